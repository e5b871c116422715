#!/usr/bin/env bash
# bench/distadam: a GPT trained data-parallel on 2 ranks (1 thread each):
# Sluice's DistAdam with hook-driven reduce-scatter vs reduce-scatter after
# backward vs plain all-reduce AdamW, and PyTorch's DDP + ZeroRedundancyOptimizer
# (AdamW, Gloo; Debian's python3-torch) on the same sizes, all in this run.
# Prints median step times (after 3 warm-up steps), ratios and optimizer bytes per rank.
#   usage: bench/distadam.sh [STEPS]   (default 15)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/scripts/env.sh"
source "$root/bench/lib.sh"
sluice="$root/build/launcher/sluice"
bash "$root/scripts/setup.sh" >/dev/null
[ -x "$sluice" ] || bash "$root/scripts/build.sh" sluice
steps=${1:-15}
layers=4 embd=192 heads=6 block=128 mbs=4 m=4
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
common=(--set data.name=synthetic --set model.layers=$layers --set model.embd=$embd --set model.heads=$heads
        --set model.block_size=$block --set training.steps="$steps" --set logging.interval="$steps"
        --set pipeline.stages=1 --set pipeline.data_parallel=2 --set training.micro_batch_size=$mbs
        --set pipeline.microbatches=$m --set training.global_batch_size=$((mbs * m * 2))
        --set job.threads_per_rank=1 --set optimizer.name=dist_adam --set optimizer.schedule=constant
        --set optimizer.warmup_steps=0)
declare -A time bytes
for mode in hooks after_backward allreduce; do
  "$sluice" train "$root/configs/quickstart.yaml" "${common[@]}" --set optimizer.dist_adam.mode=$mode \
    --set job.output_dir="$tmp/$mode" >"$tmp/$mode.log" 2>&1 || { cat "$tmp/$mode.log"; exit 1; }
  time[$mode]=$(median_step_time "$tmp/$mode/metrics.jsonl")
  bytes[$mode]=$(grep -o '(\([0-9]*\) bytes)' "$tmp/$mode/logs/rank_0.log" | tr -dc 0-9)
done
py=/usr/bin/python3
if $py -c "import torch.distributed" 2>/dev/null; then
  out=$(OMP_NUM_THREADS=1 $py "$root/bench/distadam_torch.py" --layers $layers --embd $embd --heads $heads \
        --block $block --micro-batch $mbs --microbatches $m --steps "$steps" 2>"$tmp/torch.err") ||
    { cat "$tmp/torch.err"; exit 1; }
  time[torch]=$(echo "$out" | sed -n 's/.*step_time_s=\([0-9.]*\).*/\1/p')
  bytes[torch]=$(echo "$out" | sed -n 's/.*optimizer_bytes=\([0-9]*\).*/\1/p')
else
  echo "bench/distadam: python3-torch could not be imported; the PyTorch row is left out" >&2
fi
echo "bench/distadam: GPT ${layers}x${embd}, block $block, 2 data-parallel ranks x 1 thread, $m micro-batches of $mbs per rank"
"$sluice" --version | sed 's/^/  /'
printf '\n%-48s %12s %10s %22s\n' "optimizer" "step time s" "vs torch" "optimizer bytes/rank"
row() {
  local ref=${time[torch]:-}
  awk -v n="$1" -v t="$2" -v r="$ref" -v b="$3" 'BEGIN {
    printf "%-48s %12.4f %10s %22s\n", n, t, (r == "" ? "-" : sprintf("%.2fx", r / t)), b }'
}
row "sluice DistAdam, hooks (reduce in backward)" "${time[hooks]}" "${bytes[hooks]}"
row "sluice DistAdam, reduce-scatter after backward" "${time[after_backward]}" "${bytes[after_backward]}"
row "sluice all-reduce AdamW (replicated state)" "${time[allreduce]}" "${bytes[allreduce]}"
[ -n "${time[torch]:-}" ] && row "pytorch DDP + ZeroRedundancyOptimizer(AdamW)" "${time[torch]}" "${bytes[torch]}"
awk -v h="${time[hooks]}" -v a="${time[after_backward]}" 'BEGIN { printf "\nhooks / after_backward step time: %.3f\n", h / a }'
echo "vs torch = PyTorch step time / this row's step time (above 1: faster than PyTorch)."
