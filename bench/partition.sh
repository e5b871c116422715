#!/usr/bin/env bash
# bench/partition: the four partition methods (profile = Sluice's optimum of
# its cost model, cutting between any ops; uniform = equal transformer blocks
# as in Megatron; parameters = equal parameter bytes as in DeepSpeed; layers =
# profiled time balanced at layer granularity, torchgpipe's balance_by_time,
# the strongest layer-level peer) on 2 ranks x 1 thread, for three GPTs:
# - quickstart: configs/quickstart.yaml (4 equal blocks: every method can balance it);
# - large_vocab: bench/large_vocab.yaml (an 8192-token embedding, LM head and
#   loss outweigh the blocks: uniform and parameter splits leave stage 1 slow);
# - odd_layers: the quickstart with 3 blocks (layer cuts can only put 2 blocks
#   on one stage and 1 on the other; op-level cuts can split a block);
# - one_block: the quickstart with 1 block (layer cuts leave the whole block
#   on one stage; op-level cuts split it: where op-level cuts matter most,
#   as for any model with fewer heavy layers than stages can share evenly).
# One profile per model (as a user makes one); then ROUNDS paired rounds, each
# training every distinct split once. For each method: the cut, predicted
# and measured step time (median over rounds), and the median over rounds of
# its ratio to the profile plan's step time in the same round. Then the cost
# model's accuracy per stage: predicted forward+backward(+loss) per
# micro-batch vs the median over rounds of what training measured, and
# predicted vs measured peak saved activations. Last, the partitioner's own
# speed on a 5,000-node chain into 8 stages.
# Asserts nothing.   usage: bench/partition.sh [ROUNDS] [STEPS]   (default 5 rounds of 20 steps)
#   BENCH_MODELS="one_block odd_layers" picks models (default all four).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/scripts/env.sh"
source "$root/bench/lib.sh"
[ -x "$root/build/tests/sluice_tests" ] || bash "$root/scripts/build.sh" sluice sluice_tests
rounds=${1:-5}
steps=${2:-20}
export OMPI_MCA_mpi_yield_when_idle=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
common_args() {
  echo --set pipeline.stages=2 --set job.threads_per_rank=1 --set training.steps="$steps" --set logging.interval="$steps"
}

read -r -a models <<<"${BENCH_MODELS:-quickstart large_vocab odd_layers one_block}"
declare -A config extra
config[quickstart]="$root/configs/quickstart.yaml" extra[quickstart]=""
config[large_vocab]="$root/bench/large_vocab.yaml" extra[large_vocab]=""
config[odd_layers]="$root/configs/quickstart.yaml" extra[odd_layers]="--set model.layers=3"
config[one_block]="$root/configs/quickstart.yaml" extra[one_block]="--set model.layers=1"
methods=(profile uniform parameters layers)

echo "bench/partition: 2 ranks x 1 thread, $rounds paired rounds of $steps steps (step time: median of steps 4..$steps)"
"$sluice" --version | sed 's/^/  /'

# Plans: one profile per model, a plan per method; a method whose cut equals
# an earlier method's shares its runs (the same split is the same job).
declare -A cut runof
for label in "${models[@]}"; do
  read -r -a args <<<"$(common_args) ${extra[$label]}"
  echo "profiling $label ..." >&2
  "$sluice" profile "${config[$label]}" "${args[@]}" -o "$tmp/$label.prof.pb" >"$tmp/$label.profile.log" 2>&1 ||
    { cat "$tmp/$label.profile.log"; exit 1; }
  for method in "${methods[@]}"; do
    if ! "$sluice" partition "${config[$label]}" "${args[@]}" --profile "$tmp/$label.prof.pb" --method "$method" \
      -o "$tmp/$label.$method.pb" >"$tmp/$label.$method.plan" 2>&1; then
      # A method may not apply (uniform needs a block per stage): say so in the table, run nothing.
      grep -q "error: partition: method" "$tmp/$label.$method.plan" || { cat "$tmp/$label.$method.plan"; exit 1; }
      runof[$label.$method]=refused
      continue
    fi
    cut[$label.$method]=$(awk '$1 == 1 && $2 ~ /^\[/ { gsub(/[\[,]/, "", $2); print $2 }' "$tmp/$label.$method.plan")
    runof[$label.$method]=$method
    for earlier in "${methods[@]}"; do
      [ "$earlier" = "$method" ] && break
      [ "${runof[$label.$earlier]}" = refused ] && continue
      if [ "${cut[$label.$earlier]}" = "${cut[$label.$method]}" ]; then runof[$label.$method]=${runof[$label.$earlier]}; break; fi
    done
  done
done

# Rounds: every distinct split of every model once per round.
for ((r = 1; r <= rounds; ++r)); do
  echo "round $r of $rounds ..." >&2
  for label in "${models[@]}"; do
    read -r -a args <<<"$(common_args) ${extra[$label]}"
    for method in "${methods[@]}"; do
      [ "${runof[$label.$method]}" = "$method" ] || continue
      out="$tmp/$label.$method.r$r"
      "$sluice" train "${config[$label]}" "${args[@]}" --set pipeline.plan="$tmp/$label.$method.pb" \
        --set logging.measure_memory=true --set job.output_dir="$out" >"$out.log" 2>&1 || { cat "$out.log"; exit 1; }
      median_step_time "$out/metrics.jsonl" >>"$tmp/$label.$method.steps"
      for stage in 0 1; do
        log="$out/logs/rank_$stage.log"
        grep -o "compute per micro-batch: forward [0-9.]* ms, backward [0-9.]* ms" "$log" |
          awk '{print $5 + $8}' >>"$tmp/$label.$method.s$stage.comp"
        grep -o "saved activations: peak [0-9]* bytes" "$log" | awk '{print $4}' >>"$tmp/$label.$method.s$stage.act"
        # What the plan predicts (the same every round).
        grep -o "compute per micro-batch [0-9.]* ms" "$log" | awk '{print $4}' >"$tmp/$label.$method.s$stage.pcomp"
        grep -o "saved activations peak [0-9]* bytes" "$log" | awk '{print $4}' >"$tmp/$label.$method.s$stage.pact"
      done
    done
  done
done

printf '\n%-12s %-11s %5s %12s %12s %10s %16s\n' "model" "method" "cut" "predicted s" "measured s" "meas/pred" "vs profile plan"
for label in "${models[@]}"; do
  for method in "${methods[@]}"; do
    run=${runof[$label.$method]}
    if [ "$run" = refused ]; then
      printf '%-12s %-11s %5s %12s %12s %10s %16s  %s\n' "$label" "$method" - - - - - \
        "refused: $(grep -o "error: partition: .*" "$tmp/$label.$method.plan" | cut -c 19-90)..."
      continue
    fi
    predicted=$(grep -o "predicted step time [0-9.]*" "$tmp/$label.$method.plan" | awk '{print $4 / 1000}')
    measured=$(median <"$tmp/$label.$run.steps")
    ratio=$(paste "$tmp/$label.$run.steps" "$tmp/$label.profile.steps" | awk '{print $1 / $2}' | median)
    note=""
    [ "$run" = "$method" ] || note="same split as $run"
    awk -v l="$label" -v m="$method" -v c="${cut[$label.$method]}" -v p="$predicted" -v t="$measured" -v q="$ratio" \
      -v n="$note" 'BEGIN { printf "%-12s %-11s %5s %12.4f %12.4f %10.2f %15.3fx  %s\n", l, m, c, p, t, t / p, q, n }'
  done
done

echo
echo "cost model accuracy per stage (compute = forward + backward + loss per micro-batch, measured: median over rounds;"
echo "memory = peak saved activations); distinct splits only"
printf '%-12s %-11s %5s %13s %13s %8s %15s %15s %8s\n' "model" "method" "stage" "pred comp ms" "meas comp ms" "error" \
  "pred act bytes" "meas act bytes" "error"
for label in "${models[@]}"; do
  for method in "${methods[@]}"; do
    [ "${runof[$label.$method]}" = "$method" ] || continue
    for stage in 0 1; do
      f="$tmp/$label.$method.s$stage"
      awk -v l="$label" -v m="$method" -v s="$stage" -v pc="$(cat "$f.pcomp")" -v q="$(median <"$f.comp")" \
        -v pa="$(cat "$f.pact")" -v ma="$(median <"$f.act")" \
        'BEGIN { printf "%-12s %-11s %5s %13.2f %13.2f %+7.1f%% %15d %15d %+7.1f%%\n", l, m, s, pc, q,
                 100 * (pc - q) / q, pa, ma, 100 * (pa - ma) / ma }'
    done
  done
done
echo
"$root/build/tests/sluice_tests" --gtest_filter='Partitioner.FiveThousandNodesIntoEightStages' 2>&1 |
  grep -o "FiveThousandNodesIntoEightStages ([0-9]* ms)" | sed 's/^/partitioner speed: 5,000 nodes into 8 stages, two plans (no budget, then a binding one): /'
