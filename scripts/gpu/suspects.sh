#!/usr/bin/env bash
# The GPU-SUSPECTS.md checks that fit a few minutes (scripts/gpu/check.sh
# steps trace and suspects), on the 12 x 768 GPT at block 1024 in bf16, 1
# stage, global batch 8 in 2 micro-batches:
#   trace     6 steps with steps 3 and 4 traced (logging.trace_ops): prints
#             the device trace lines (kernels' busy share, host-device syncs,
#             how far the host runs ahead, top kernels) and copies trace.json
#             to OUT_DIR
#   suspects  three runs of 12 steps: as built, with the NaN fill back on
#             (SLUICE_FILL_UNINITIALIZED=1) and with the transfer guard off,
#             each with nvidia-smi's utilisation sampled every 50 ms; prints
#             per run the median step time, the last loss (the three must
#             agree bitwise) and the mean utilisation
# Usage: bash scripts/gpu/suspects.sh SLUICE_BIN trace|suspects OUT_DIR
set -euo pipefail
sluice=$1 what=$2 out=$3
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
gpt=(--set job.device=cuda --set training.precision=bf16 --set model.layers=12 --set model.embd=768 --set model.heads=12
     --set model.block_size=1024 --set model.dropout=0 --set pipeline.stages=1 --set pipeline.microbatches=2
     --set training.micro_batch_size=4 --set training.global_batch_size=8 --set optimizer.schedule=constant
     --set optimizer.warmup_steps=0)
# SUSPECTS_EXTRA: more options, last wins (e.g. a CPU smoke run: --set job.device=cpu --set model.layers=2 ...).
read -r -a more <<<"${SUSPECTS_EXTRA:-}"
gpt+=(${more[@]+"${more[@]}"})
field() {  # KEY METRICS_JSONL: the key's values, one per line
  grep -o "\"$1\": *[0-9.e-]*" "$2" | cut -d: -f2 | tr -d ' '
}
case $what in
  trace)
    "$sluice" train "$root/configs/quickstart.yaml" "${gpt[@]}" --set training.steps=6 --set logging.interval=6 \
      --set "logging.trace_steps=[3, 4]" --trace --set job.output_dir="$work/run" >"$work/run.log" 2>&1 ||
      { tail -20 "$work/run.log"; exit 1; }
    grep -E "device trace|timeline|host<->device" "$work/run.log"
    cp "$work/run/trace.json" "$out/" ;;
  suspects)
    for v in as_built fill_on guard_off; do
      envs=() extra=()
      [ $v = fill_on ] && envs=(SLUICE_FILL_UNINITIALIZED=1)
      [ $v = guard_off ] && extra=(--set logging.transfer_guard=off)
      smi=
      if command -v nvidia-smi >/dev/null; then
        nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits -lms 50 >"$work/util_$v" &
        smi=$!
      fi
      env "${envs[@]}" "$sluice" train "$root/configs/quickstart.yaml" "${gpt[@]}" --set training.steps=12 \
        --set logging.interval=12 "${extra[@]}" --set job.output_dir="$work/$v" >"$work/$v.log" 2>&1 ||
        { [ -z "$smi" ] || kill "$smi"; tail -20 "$work/$v.log"; exit 1; }
      [ -z "$smi" ] || kill "$smi"
      step=$(field step_time_s "$work/$v/metrics.jsonl" | tail -n +4 | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }')
      loss=$(field loss "$work/$v/metrics.jsonl" | tail -1)
      util=$(awk '{ s += $1; n++ } END { if (n) printf "%.0f%%", s / n; else printf "-" }' "$work/util_$v" 2>/dev/null || echo -)
      echo "$v: median step $step s, last loss $loss, mean GPU utilisation $util"
    done ;;
  *) echo "suspects.sh: unknown check '$what' (trace, suspects)" >&2; exit 2 ;;
esac
