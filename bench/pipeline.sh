#!/usr/bin/env bash
# bench/pipeline: step time of the quickstart GPT at 8 micro-batches on
#   1 rank x 1 thread (baseline), 2 stages x 1 thread with GPipe and 1F1B,
#   and compiled vs node-by-node (eager) execution on 1 rank x 1 thread.
# Prints a table with ratios to the baseline measured in this run. Asserts nothing.
#   usage: bench/pipeline.sh [STEPS]   (default 20; the first 3 steps are warm-up)
source "$(dirname "$0")/lib.sh"  # strict mode, $root, scripts/env.sh, $sluice
steps=${1:-20}
m=8
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
common=(--set training.steps="$steps" --set logging.interval="$steps" --set pipeline.microbatches=$m
        --set training.micro_batch_size=4 --set training.global_batch_size=$((4 * m)) --set job.threads_per_rank=1
        --set optimizer.schedule=constant --set optimizer.warmup_steps=0)


run() {  # name, extra args...
  local name=$1
  shift
  "$sluice" train "$root/configs/quickstart.yaml" "${common[@]}" --set job.output_dir="$tmp/$name" "$@" \
    >"$tmp/$name.log" 2>&1 || { cat "$tmp/$name.log"; exit 1; }
  median_step_time "$tmp/$name/metrics.jsonl"
}

echo "bench/pipeline: quickstart GPT, $m micro-batches of 4, $steps steps (median of steps 4..$steps)"
"$sluice" --version | sed 's/^/  /'
base=$(run one_rank --set pipeline.stages=1)
gpipe=$(run gpipe --set pipeline.stages=2 --set pipeline.schedule=gpipe)
ofob=$(run 1f1b --set pipeline.stages=2 --set pipeline.schedule=1f1b)
eager=$(run eager --set pipeline.stages=1 --set pipeline.execution=eager)
ideal=$(awk -v m=$m 'BEGIN { printf "%.2f", 2 * m / (m + 1) }')
printf '\n%-34s %12s %10s %8s\n' "configuration" "step time s" "speedup" "ideal"
row() { awk -v n="$1" -v t="$2" -v b="$base" -v i="$3" 'BEGIN { printf "%-34s %12.4f %9.2fx %8s\n", n, t, b / t, i }'; }
row "1 rank x 1 thread, compiled" "$base" "1.00"
row "2 stages x 1 thread, gpipe" "$gpipe" "$ideal"
row "2 stages x 1 thread, 1f1b" "$ofob" "$ideal"
row "1 rank x 1 thread, eager (nodes)" "$eager" "-"
echo
echo "speedup = baseline step time / step time; ideal for 2 stages = 2m/(m+1) with m=$m (bubble (p-1)/(m+p-1))."
echo "eager runs every node through the dispatcher; compiled runs TorchScript's optimizing executor."
