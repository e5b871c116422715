#!/usr/bin/env bash
# bench/gpu: Sluice against PyTorch on one GPU, in bf16 (exits 77 where
# PyTorch sees no GPU; scripts/gpu/check.sh runs it, step gpu).
#
# Table 1, per model, ROUNDS paired rounds of four runs in rotating order:
#   sluice eager    pipeline.execution: eager
#   sluice graphs   pipeline.execution: graphs (CUDA graphs; the row says
#                   "refused" with Sluice's message where this build refuses)
#   torch eager     bench/gpu_torch.py
#   torch compile   bench/gpu_torch.py --compile (torch.compile)
# Models (same micro-batches, 2 of 4, global batch 8; AdamW; dropout 0):
#   gpt  the 12 x 768 GPT at block 1024, byte vocabulary (Sluice's native
#        GPT; PyTorch: bench/gpt_torch.py, the same layers)
#   hf   Hugging Face's GPT-2 124M, its 50,257-token vocabulary, block 1024:
#        exported for Sluice by models/export_hf.py (needs transformers;
#        skipped with a line saying so where Python lacks it). Tokens are
#        the fortunes text's bytes on both sides (ids below 256).
# Columns: median step time, tokens/s, MFU (model FLOPs with attention,
# 6 N + 12 L T C per token, over the GPU's bf16 dense peak: H100/H200 989
# TFLOP/s, A100 312; BF16_PEAK_TFLOPS overrides), peak allocated memory, and
# the paired ratio to torch eager.
# Table 2 (gpt): 2 stages sharing the GPU under 1F1B and zb-h1 against 1
# stage, Sluice eager, planned once from one profile.
# Asserts nothing.
#   usage: bench/gpu.sh [ROUNDS] [STEPS] [MODELS]   (default 2 rounds of 12 steps, "gpt hf"; medians after 3 warm-up steps)
source "$(dirname "$0")/lib.sh"  # strict mode, $root, scripts/env.sh, $sluice
PY=${SLUICE_PYTHON:-/opt/sluice/torch-2.11/bin/python}
rounds=${1:-2}
steps=${2:-12}
models=${3:-gpt hf}
if ! "$PY" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  echo "bench/gpu: no GPU can be used here (PyTorch at $PY sees none)"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
gpu=$("$PY" -c 'import torch; print(torch.cuda.get_device_name())')
case "$gpu" in
  *H100* | *H200* | *H20*) peak=989 ;;
  *A100*) peak=312 ;;
  *) peak=0 ;;
esac
peak=${BF16_PEAK_TFLOPS:-$peak}
echo "bench/gpu: $gpu (bf16 peak ${peak} TFLOP/s; 0 = unknown, set BF16_PEAK_TFLOPS), $rounds rounds of $steps steps, bf16"
"$sluice" --version | sed -n 1p | sed 's/^/  /'
common=(--set job.device=cuda --set training.precision=bf16 --set pipeline.microbatches=2
        --set training.micro_batch_size=4 --set training.global_batch_size=8 --set training.steps="$steps"
        --set logging.interval="$steps" --set optimizer.name=adamw --set optimizer.lr=0.001
        --set optimizer.schedule=constant --set optimizer.warmup_steps=0)
# Per model: Sluice's model options, the PyTorch peer's, and (L T C vocab).
model_gpt=(--set model.layers=12 --set model.embd=768 --set model.heads=12 --set model.block_size=1024 --set model.dropout=0)
config_gpt=$root/configs/quickstart.yaml
torch_gpt=(--model gpt --vocab 256)
shape_gpt="12 1024 768"
torch_hf=(--model hf --vocab 50257)
shape_hf="12 1024 768"
if [[ " $models " == *" hf "* ]]; then
  if HF_HUB_OFFLINE=1 "$PY" "$root/models/export_hf.py" "$tmp/hf" --arch gpt2 --vocab 50257 --block 1024 --embd 768 \
    --layers 12 --heads 12 --batch 4 --dropout 0 >"$tmp/hf.log" 2>&1; then
    model_hf=()
    config_hf=$tmp/hf.yaml  # the quickstart's job, data and optimizer; the program fixes the model's sizes
    { echo "model: {name: exported, path: $tmp/hf/model.pt2}"
      awk '/^model:/ { skip = 1; next } /^[^ #]/ { skip = 0 } !skip' "$root/configs/quickstart.yaml"; } >"$config_hf"
  else
    echo "  hf: skipped: models/export_hf.py failed here ($(tail -1 "$tmp/hf.log"))"
    models=${models//hf/}
  fi
fi
sluice_run() {  # model execution stages-options... -> "step_time peak_bytes parameters" or "refused: ..."
  local m=$1 exec=$2 out="$tmp/sluice_$1_$2_$RANDOM"
  shift 2
  local -n opts="model_$m" config="config_$m"
  if ! "$sluice" train "$config" "${common[@]}" ${opts[@]+"${opts[@]}"} --set pipeline.execution="$exec" \
    --set pipeline.stages=1 "$@" --set job.output_dir="$out" >"$out.log" 2>&1; then
    echo "refused: $(grep -m1 -i 'error' "$out.log" | cut -c1-150)"
    return
  fi
  local peakb params
  peakb=$(grep -o '"peak_bytes": *\[[^]]*\]' "$out/metrics.jsonl" | tr '[],' '   ' |
    awk '{ for (i = 2; i <= NF; ++i) if ($i > m) m = $i } END { print m + 0 }')
  params=$(sed -n 's/.* \([0-9]*\) parameter tensors (\([0-9.]*\) \([KMG]\)iB).*/\2 \3/p' "$out/logs/rank_0.log" | sed -n 1p |
    awk '{ f = $2 == "K" ? 1024 : $2 == "M" ? 1048576 : 1073741824; print int($1 * f / 4) }')
  echo "$(median_step_time "$out/metrics.jsonl") $peakb $params"
}
torch_run() {  # model [--compile] -> "step_time peak_bytes parameters"
  local m=$1
  shift
  local -n opts="torch_$m"
  (cd "$root/bench" && "$PY" gpu_torch.py "${opts[@]}" --steps "$steps" "$@" 2>"$tmp/torch.err") |
    sed -n 's/^step_time_s=\([0-9.]*\) peak_bytes=\([0-9]*\) parameters=\([0-9]*\)$/\1 \2 \3/p' |
    grep . || echo "refused: $(tail -1 "$tmp/torch.err" | cut -c1-150)"
}
results="$tmp/results"
: >"$results"
runs=("sluice_eager" "sluice_graphs" "torch_eager" "torch_compile")
for m in $models; do
  for r in $(seq 1 "$rounds"); do
    for k in 0 1 2 3; do
      kind=${runs[$(((k + r - 1) % 4))]}
      case $kind in
        sluice_eager) res=$(sluice_run "$m" eager) ;;
        sluice_graphs) res=$(sluice_run "$m" graphs) ;;
        torch_eager) res=$(torch_run "$m") ;;
        torch_compile) res=$(torch_run "$m" --compile) ;;
      esac
      echo "$m $r $kind $res" >>"$results"
    done
    echo "  $m: round $r/$rounds done" >&2
  done
done
grep refused "$results" | sort -u -k1,1 -k3,3 | sed 's/^/  /' || true
for m in $models; do
  shape="shape_$m"
  awk -v m="$m" -v rounds="$rounds" -v peak="$peak" -v shape="${!shape}" '
    function median(a, n,   i, j, t) { for (i = 1; i <= n; ++i) for (j = i + 1; j <= n; ++j) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
                                        return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
    $1 == m && $4 != "refused:" { t[$3, $2] = $4; pk[$3] = $5 > pk[$3] ? $5 : pk[$3]; if ($3 == "torch_eager") params = $6 }
    END {
      split(shape, s, " "); L = s[1]; T = s[2]; C = s[3]; tokens = 8 * T
      flop = (6 * params + 12 * L * T * C) * tokens
      printf "\n%s (%.1f M parameters, %d tokens per step)\n", m, params / 1e6, tokens
      printf "%-15s %12s %10s %8s %12s %14s\n", "run", "step time s", "tokens/s", "MFU", "peak", "vs torch eager"
      split("sluice_eager sluice_graphs torch_eager torch_compile", kinds, " ")
      for (k = 1; k <= 4; ++k) {
        n = 0
        for (r = 1; r <= rounds; ++r) if ((kinds[k], r) in t && (("torch_eager", r) in t)) { n++; a[n] = t[kinds[k], r]; q[n] = t[kinds[k], r] / t["torch_eager", r] }
        if (n == 0) { printf "%-15s %12s\n", kinds[k], "-"; continue }
        ms = median(a, n); mq = median(q, n)
        mfu = peak > 0 ? sprintf("%.1f%%", 100 * flop / ms / (peak * 1e12)) : "-"
        printf "%-15s %12.4f %10.0f %8s %8.0f MiB %13.3fx\n", kinds[k], ms, tokens / ms, mfu, pk[kinds[k]] / 1048576, mq
      }
    }' "$results"
done

# Table 2: 2 stages sharing the GPU against 1 stage (gpt, Sluice eager).
if [[ " $models " == *" gpt "* ]]; then
  two=(--set pipeline.stages=2 --set job.threads_per_rank=1)
  "$sluice" profile "$root/configs/quickstart.yaml" "${common[@]}" "${model_gpt[@]}" "${two[@]}" -o "$tmp/prof.pb" \
    >"$tmp/prof.log" 2>&1 || { tail -5 "$tmp/prof.log" >&2; exit 1; }
  for s in 1f1b zb-h1; do
    "$sluice" partition "$root/configs/quickstart.yaml" "${common[@]}" "${model_gpt[@]}" "${two[@]}" \
      --set pipeline.schedule=$s --profile "$tmp/prof.pb" -o "$tmp/plan_$s.pb" >"$tmp/plan_$s.log" 2>&1 ||
      { tail -5 "$tmp/plan_$s.log" >&2; exit 1; }
  done
  : >"$tmp/two"
  for r in $(seq 1 "$rounds"); do
    echo "$r one $(sluice_run gpt eager)" >>"$tmp/two"
    for s in 1f1b zb-h1; do
      echo "$r $s $(sluice_run gpt eager "${two[@]}" --set pipeline.schedule=$s --set pipeline.plan="$tmp/plan_$s.pb")" >>"$tmp/two"
    done
  done
  awk -v rounds="$rounds" '
    function median(a, n,   i, j, t) { for (i = 1; i <= n; ++i) for (j = i + 1; j <= n; ++j) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
                                        return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
    $3 != "refused:" { t[$2, $1] = $3; pk[$2] = $4 > pk[$2] ? $4 : pk[$2] }
    END {
      printf "\ngpt, Sluice eager: 2 stages sharing the GPU against 1 stage\n%-12s %12s %10s %12s %10s\n", "run", "step time s", "tokens/s", "peak", "vs 1 stage"
      split("one 1f1b zb-h1", kinds, " ")
      for (k = 1; k <= 3; ++k) {
        n = 0
        for (r = 1; r <= rounds; ++r) if ((kinds[k], r) in t && ("one", r) in t) { n++; a[n] = t[kinds[k], r]; q[n] = t[kinds[k], r] / t["one", r] }
        if (n == 0) { printf "%-12s %12s\n", kinds[k], "-"; continue }
        printf "%-12s %12.4f %10.0f %8.0f MiB %9.3fx\n", kinds[k] == "one" ? "1 stage" : kinds[k], median(a, n), 8192 / median(a, n), pk[kinds[k]] / 1048576, median(q, n)
      }
    }' "$tmp/two"
  grep refused "$tmp/two" | sed 's/^/  /' || true
fi
