#!/usr/bin/env bash
# bench/precision_gpu: training.precision fp32 vs bf16 vs fp16 on one GPU
# (exits 77 where PyTorch sees none; scripts/gpu/check.sh runs it on the
# lent GPU machine): a GPT-2-small-shaped model (12 layers x 768, 12 heads,
# block 1024, byte vocabulary) on the fortunes text, 1 stage, global batch 8
# (2 micro-batches of 4), dropout 0, ROUNDS rounds of the three precisions in
# rotating order. Prints per precision the median step time, the median over
# rounds of its paired ratio to fp32, tokens/s, model FLOP/s (6 x parameters
# x tokens per step, over the step time), the peak of the model's allocated
# GPU bytes (caching allocator, max over steps) and the loss after the last
# step. Float32 matrix products run as float32 (LibTorch's default: no TF32).
# Asserts nothing.
#   usage: bench/precision_gpu.sh [ROUNDS] [STEPS]   (default 2 rounds of 12 steps; medians after 3 warm-up steps)
source "$(dirname "$0")/lib.sh"  # strict mode, $root, scripts/env.sh, $sluice
PY=${SLUICE_PYTHON:-/opt/sluice/torch-2.11/bin/python}
rounds=${1:-2}
steps=${2:-12}
if ! "$PY" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  echo "bench/precision_gpu: no GPU can be used here (PyTorch at $PY sees none)"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
shape=(--set job.device=cuda --set model.layers=12 --set model.embd=768 --set model.heads=12 --set model.block_size=1024
       --set model.dropout=0 --set pipeline.stages=1 --set pipeline.microbatches=2 --set training.micro_batch_size=4
       --set training.global_batch_size=8 --set training.steps="$steps" --set logging.interval="$steps"
       --set optimizer.schedule=constant --set optimizer.warmup_steps=0)
echo "bench/precision_gpu: GPT 12 x 768, block 1024, 1 stage, global batch 8 (2 x 4), $rounds rounds of $steps steps"
echo "  gpu: $("$PY" -c 'import torch; print(torch.cuda.get_device_name())'); $("$sluice" --version | sed -n 1p)"
run() {  # precision round -> "step_time peak_bytes last_loss parameters"
  local out="$tmp/run_$1_$2"
  "$sluice" train "$root/configs/quickstart.yaml" "${shape[@]}" --set training.precision="$1" --set job.output_dir="$out" \
    >"$out.log" 2>&1 || { cat "$out.log" >&2; exit 1; }
  local peak params
  peak=$(grep -o '"peak_bytes": *\[[^]]*\]' "$out/metrics.jsonl" | tr '[],' '   ' | awk '$2 > m { m = $2 } END { print m + 0 }')
  params=$(sed -n 's/.* \([0-9]*\) parameter tensors (\([0-9.]*\) \([KMG]\)iB).*/\2 \3/p' "$out/logs/rank_0.log" | sed -n 1p |
    awk '{ f = $2 == "K" ? 1024 : $2 == "M" ? 1048576 : 1073741824; print $1 * f / 4 }')
  echo "$(median_step_time "$out/metrics.jsonl") $peak $(jfields loss "$out/metrics.jsonl" | tail -1 | awk '{print $2}') $params"
}
results="$tmp/results"
: >"$results"
orders=("fp32 bf16 fp16" "bf16 fp16 fp32" "fp16 fp32 bf16")
for r in $(seq 1 "$rounds"); do
  for p in ${orders[$(((r - 1) % 3))]}; do echo "$r $p $(run "$p" "$r")" >>"$results"; done
  echo "  round $r/$rounds done" >&2
done
awk -v rounds="$rounds" '
  function median(a, n,   i, j, t) { for (i = 1; i <= n; ++i) for (j = i + 1; j <= n; ++j) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
                                      return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
  { t[$2, $1] = $3; peak[$2] = $4 > peak[$2] ? $4 : peak[$2]; loss[$2] = $5; params = $6 }
  END {
    tokens = 8 * 1024
    printf "\n%-10s %12s %10s %12s %14s %12s %12s\n", "precision", "step time s", "vs fp32", "tokens/s", "model TFLOP/s", "peak", "last loss"
    split("fp32 bf16 fp16", names, " ")
    for (k = 1; k <= 3; ++k) {
      p = names[k]
      for (r = 1; r <= rounds; ++r) { s[r] = t[p, r]; q[r] = t[p, r] / t["fp32", r] }
      ms = median(s, rounds); mq = median(q, rounds)
      printf "%-10s %12.4f %9.3fx %12.0f %14.1f %8.0f MiB %12s\n", p, ms, mq, tokens / ms, 6 * params * tokens / ms / 1e12,
             peak[p] / 1048576, loss[p]
    }
    printf "\nparameters: %.1f M (stage 0 parameter bytes / 4); vs fp32: the step time over fp32 in the same round, median over rounds\n", params / 1e6
  }' "$results"
