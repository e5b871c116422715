#!/usr/bin/env bash
# bench/partition: the four partition methods (profile = Sluice's optimum of
# its cost model, cutting between any ops; uniform = equal transformer blocks
# as in Megatron; parameters = equal parameter bytes as in DeepSpeed; layers =
# profiled time balanced at layer granularity, torchgpipe's balance_by_time,
# the strongest layer-level peer) on 2 ranks x 1 thread,
# for the quickstart GPT and a GPT unbalanced by a large vocabulary
# (bench/large_vocab.yaml). For each: the cut, predicted and measured step
# time, the measured ratio to the profile plan; then the cost model's accuracy
# per stage: predicted forward+backward(+loss) vs the compute time measured in
# training, and predicted vs measured peak saved activations. Last, the
# partitioner's own speed on a 5,000-node chain into 8 stages.
# Asserts nothing.   usage: bench/partition.sh [STEPS]   (default 20)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/scripts/env.sh"
source "$root/bench/lib.sh"
[ -x "$root/build/tests/sluice_tests" ] || bash "$root/scripts/build.sh" sluice sluice_tests
steps=${1:-20}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# stage_row LOG: "pred_compute_ms pred_act_bytes meas_fwd_ms meas_bwd_ms meas_act_bytes" from a rank's log.
stage_row() {
  local log=$1
  echo "$(grep -o "compute per micro-batch [0-9.]* ms" "$log" | awk '{print $4}')" \
       "$(grep -o "saved activations peak [0-9]* bytes" "$log" | awk '{print $4}')" \
       "$(grep -o "compute per micro-batch: forward [0-9.]* ms" "$log" | awk '{print $5}')" \
       "$(grep -o "ms, backward [0-9.]* ms (over" "$log" | awk '{print $3}')" \
       "$(grep -o "saved activations: peak [0-9]* bytes" "$log" | awk '{print $4}')"
}

accuracy_rows=()
bench_model() {  # label config extra-args...
  local label=$1 cfg=$2
  shift 2
  local common=(--set pipeline.stages=2 --set job.threads_per_rank=1 --set training.steps="$steps"
                --set logging.interval="$steps" "$@")
  "$sluice" profile "$cfg" "${common[@]}" -o "$tmp/$label.prof.pb" >"$tmp/$label.profile.log" 2>&1 ||
    { cat "$tmp/$label.profile.log"; exit 1; }
  local base="" baseCut=""
  for method in profile uniform parameters layers; do
    "$sluice" partition "$cfg" "${common[@]}" --profile "$tmp/$label.prof.pb" --method "$method" \
      -o "$tmp/$label.$method.pb" >"$tmp/$label.$method.plan" 2>&1 || { cat "$tmp/$label.$method.plan"; exit 1; }
    local measured predicted cut note=""
    predicted=$(grep -o "predicted step time [0-9.]*" "$tmp/$label.$method.plan" | awk '{print $4 / 1000}')
    cut=$(awk '$1 == 1 && $2 ~ /^\[/ { gsub(/[\[,]/, "", $2); print $2 }' "$tmp/$label.$method.plan")
    if [ "$cut" = "$baseCut" ]; then
      # The same split as the profile plan is the same job: its run stands for both.
      note="same split as profile, not rerun"
      cp -r "$tmp/$label.profile" "$tmp/$label.$method"
    else
      "$sluice" train "$cfg" "${common[@]}" --set pipeline.plan="$tmp/$label.$method.pb" --set logging.measure_memory=true \
        --set job.output_dir="$tmp/$label.$method" >"$tmp/$label.$method.log" 2>&1 || { cat "$tmp/$label.$method.log"; exit 1; }
    fi
    measured=$(median_step_time "$tmp/$label.$method/metrics.jsonl")
    [ -n "$base" ] || base=$measured baseCut=$cut
    awk -v l="$label" -v m="$method" -v c="$cut" -v p="$predicted" -v t="$measured" -v b="$base" -v n="$note" \
      'BEGIN { printf "%-12s %-11s %5s %12.4f %12.4f %10.2f %14.2fx  %s\n", l, m, c, p, t, t / p, t / b, n }'
    for stage in 0 1; do
      accuracy_rows+=("$label $method $stage $(stage_row "$tmp/$label.$method/logs/rank_$stage.log")")
    done
  done
}

echo "bench/partition: 2 ranks x 1 thread, $steps steps per run (median step time of steps 4..$steps)"
"$sluice" --version | sed 's/^/  /'
printf '\n%-12s %-11s %5s %12s %12s %10s %15s\n' "model" "method" "cut" "predicted s" "measured s" "meas/pred" "vs profile plan"
bench_model quickstart "$root/configs/quickstart.yaml"
bench_model large_vocab "$root/bench/large_vocab.yaml"

echo
echo "cost model accuracy per stage (compute = forward + backward + loss per micro-batch; memory = peak saved activations)"
printf '%-12s %-11s %5s %13s %13s %8s %15s %15s %8s\n' "model" "method" "stage" "pred comp ms" "meas comp ms" "error" \
  "pred act bytes" "meas act bytes" "error"
for row in "${accuracy_rows[@]}"; do
  read -r label method stage pc pa mf mb ma <<<"$row"
  awk -v l="$label" -v m="$method" -v s="$stage" -v pc="$pc" -v pa="$pa" -v mf="$mf" -v mb="$mb" -v ma="$ma" \
    'BEGIN { q = mf + mb; printf "%-12s %-11s %5s %13.2f %13.2f %+7.1f%% %15d %15d %+7.1f%%\n", l, m, s, pc, q,
             100 * (pc - q) / q, pa, ma, 100 * (pa - ma) / ma }'
done
echo
"$root/build/tests/sluice_tests" --gtest_filter='Partitioner.FiveThousandNodesIntoEightStages' 2>&1 |
  grep -o "FiveThousandNodesIntoEightStages ([0-9]* ms)" | sed 's/^/partitioner speed: 5,000 nodes into 8 stages, two plans (no budget, then a binding one): /'
