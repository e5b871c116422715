#!/usr/bin/env bash
# bench/overhead: the interpreter's host cost per op against PyTorch eager's.
# A GPT so small that its kernels take next to nothing (12 layers x 32 wide,
# 2 heads, block 16, vocabulary 256, global batch 8 in 2 micro-batches), on 1
# stage and 1 thread, so the step time is almost all host work: Sluice's node
# loop, autograd and AdamW against the same model in PyTorch eager
# (bench/eager_torch.py: same sizes, micro-batches and AdamW). ROUNDS paired
# rounds in alternating order (Sluice first in odd rounds). Prints each
# round's two medians (after 3 warm-up steps) and the median over rounds of
# the paired ratio Sluice / PyTorch (below 1: Sluice's step is shorter), and
# the spread of Sluice's per-step times (a rank that sometimes runs much
# slower shows here as a bimodal spread). Asserts nothing.
#   usage: bench/overhead.sh [ROUNDS] [STEPS]   (default 5 rounds of 60 steps)
source "$(dirname "$0")/lib.sh"  # strict mode, $root, scripts/env.sh, $sluice
rounds=${1:-5}
steps=${2:-60}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
py="$SLUICE_TORCH_ENV/bin/python"
[ -x "$py" ] || { echo "bench/overhead: $py is needed (scripts/setup.sh makes it)" >&2; exit 1; }
layers=12 embd=32 heads=2 block=16 batch=8 mbs=2
echo "bench/overhead: GPT $layers x $embd, block $block, batch $batch in $mbs micro-batches, 1 stage x 1 thread," \
  "$rounds paired rounds of $steps steps"
"$sluice" --version | sed 's/^/  /'
sluice_run() {  # round -> median step time (s); the per-step times go to $tmp/steps_<round>
  local out="$tmp/sluice_$1"
  "$sluice" train "$root/configs/quickstart.yaml" --set model.layers=$layers --set model.embd=$embd \
    --set model.heads=$heads --set model.block_size=$block --set pipeline.stages=1 --set pipeline.microbatches=$mbs \
    --set training.micro_batch_size=$((batch / mbs)) --set training.global_batch_size=$batch \
    --set job.threads_per_rank=1 --set training.steps="$steps" --set logging.interval="$steps" \
    --set optimizer.schedule=constant --set optimizer.warmup_steps=0 --set job.output_dir="$out" \
    >"$out.log" 2>&1 || { cat "$out.log" >&2; exit 1; }
  jfields step_time_s "$out/metrics.jsonl" | awk '{print $2}' | tail -n +4 >"$tmp/steps_$1"
  median <"$tmp/steps_$1"
}
torch_run() {
  (cd "$root/bench" && OMP_NUM_THREADS=1 "$py" eager_torch.py --layers $layers --embd $embd --heads $heads \
    --block $block --batch $batch --microbatches $mbs --steps "$steps" --threads 1) |
    sed -n 's/^step_time_s=//p'
}
results="$tmp/results"
: >"$results"
for r in $(seq 1 "$rounds"); do
  if [ $((r % 2)) -eq 1 ]; then s=$(sluice_run "$r"); t=$(torch_run); else t=$(torch_run); s=$(sluice_run "$r"); fi
  echo "$r $s $t" >>"$results"
  awk -v r="$r" -v n="$rounds" -v s="$s" -v t="$t" \
    'BEGIN { printf "  round %d/%d: Sluice %.2f ms, PyTorch %.2f ms, %.3fx\n", r, n, 1000 * s, 1000 * t, s / t }' >&2
done
ratio=$(awk '{ print $2 / $3 }' "$results" | median)
sl=$(awk '{ print 1000 * $2 }' "$results" | median)
pt=$(awk '{ print 1000 * $3 }' "$results" | median)
printf '\n%-10s %14s\n' "" "step time ms"
printf '%-10s %14.2f\n' "Sluice" "$sl" "PyTorch" "$pt"
printf 'Sluice / PyTorch: %.3fx (median of %d paired rounds)\n' "$ratio" "$rounds"
# Sluice's per-step spread over all rounds: the 10th, 50th and 90th percentiles.
cat "$tmp"/steps_* | sort -g | awk '{ v[NR] = $1 } END {
  printf "Sluice per-step times over all rounds: p10 %.2f ms, p50 %.2f ms, p90 %.2f ms (%d steps)\n",
    1000 * v[int(NR * 0.1) + 1], 1000 * v[int(NR * 0.5) + 1], 1000 * v[int(NR * 0.9) + 1], NR }'
