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
# ROUNDS paired rounds, each profiling every model, planning it with every
# method and training every distinct split once between two profiles: the
# one taken right before its run and the one right after it (which is the
# next run's before), its prediction the mean of the two. For each method:
# the cut(s), predicted and measured step time (medians over rounds), and
# the medians over rounds of its measured/predicted ratio and of its ratio
# to the profile plan's step time in the same round. Then the cost model's
# accuracy per stage: predicted forward+backward(+loss) per micro-batch vs
# what training measured (the median of the per-round errors), and predicted
# vs measured peak saved activations. Last, the partitioner's own speed on a
# 5,000-node chain into 8 stages.
# Asserts nothing.   usage: bench/partition.sh [ROUNDS] [STEPS]   (default 5 rounds of 20 steps)
#   BENCH_MODELS="one_block odd_layers" picks models (default all four).
source "$(dirname "$0")/lib.sh"  # strict mode, $root, scripts/env.sh, $sluice
[ -x "$root/build/tests/sluice_tests" ] || bash "$root/scripts/build.sh" sluice sluice_tests
rounds=${1:-5}
steps=${2:-20}
export OMPI_MCA_mpi_yield_when_idle=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# plan_cuts PROFILE OUT: the current method's cuts planned on PROFILE (OUT.pb, its table in OUT.plan).
plan_cuts() {
  "$sluice" partition "${config[$label]}" "${args[@]}" --profile "$1" \
    --set "pipeline.cuts=[${cut[$method]}]" -o "$2.pb" >"$2.plan" 2>&1 || { cat "$2.plan"; exit 1; }
}
# stage_compute PLAN_TABLE STAGE: the plan's compute per micro-batch of STAGE in ms (forward + backward +
# extra: loss, swap stall, recompute, refill after waits), from the row "S [A, B) PARAMS UNIT FWD BWD COMM EXTRA ...".
stage_compute() {
  awk -v s="$2" '$1 == s && $2 ~ /^\[/ { sub(/^[^)]*\)/, ""); print $3 + $4 + $6; found = 1; exit }
    END { if (!found) { print "bench/partition: no row for stage " s " in " FILENAME > "/dev/stderr"; exit 1 } }' "$1"
}
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

# Rounds: each profiles every model, plans it with every method and trains
# every distinct split once (a method whose cut equals an earlier method's
# shares its run: the same split is the same job). Profiles and runs
# alternate (profile, run, profile, run, ..., profile), and each run is
# predicted for its cuts from the profile right before it and the one right
# after it, the mean of the two: this machine's speed drifts by 10-30% over
# tens of seconds, so a profile taken on one side of a run only would measure
# the drift as well as the cost model.
for ((r = 1; r <= rounds; ++r)); do
  echo "round $r of $rounds ..." >&2
  for label in "${models[@]}"; do
    read -r -a args <<<"$(common_args) ${extra[$label]}"
    prof="$tmp/$label.r$r.prof.pb"
    "$sluice" profile "${config[$label]}" "${args[@]}" -o "$prof" >"$prof.log" 2>&1 || { cat "$prof.log"; exit 1; }
    before=$prof  # the profile taken right before the next run
    declare -A cut=() runof=()
    for method in "${methods[@]}"; do
      plan="$tmp/$label.$method.r$r"
      if ! "$sluice" partition "${config[$label]}" "${args[@]}" --profile "$prof" --method "$method" \
        -o "$plan.pb" >"$plan.plan" 2>&1; then
        # A method may not apply (uniform needs a block per stage): say so in the table, run nothing.
        grep -q "error: partition: method" "$plan.plan" || { cat "$plan.plan"; exit 1; }
        grep -o "error: partition: .*" "$plan.plan" | cut -c 19-90 >"$tmp/$label.$method.refused"
        continue
      fi
      cut[$method]=$(awk '$1 == 1 && $2 ~ /^\[/ { gsub(/[\[,]/, "", $2); print $2 }' "$plan.plan")
      runof[$method]=$method
      for earlier in "${methods[@]}"; do
        [ "$earlier" = "$method" ] && break
        [ -n "${cut[$earlier]:-}" ] || continue
        if [ "${cut[$earlier]}" = "${cut[$method]}" ]; then runof[$method]=${runof[$earlier]}; break; fi
      done
      echo "${cut[$method]}" >>"$tmp/$label.$method.cuts"
      [ "${runof[$method]}" = "$method" ] || { echo "${runof[$method]}" >>"$tmp/$label.$method.shared"; continue; }
      fresh="$tmp/$label.$method.r$r.fresh"
      plan_cuts "$before" "$fresh.before"
      out="$tmp/$label.$method.r$r.run"
      "$sluice" train "${config[$label]}" "${args[@]}" --set pipeline.plan="$fresh.before.pb" \
        --set logging.measure_memory=true --set job.output_dir="$out" >"$out.log" 2>&1 || { cat "$out.log"; exit 1; }
      "$sluice" profile "${config[$label]}" "${args[@]}" -o "$fresh.after.prof.pb" >"$fresh.after.prof.log" 2>&1 ||
        { cat "$fresh.after.prof.log"; exit 1; }
      plan_cuts "$fresh.after.prof.pb" "$fresh.after"
      before=$fresh.after.prof.pb
      cat "$fresh.before.plan" "$fresh.after.plan" | grep -o "predicted step time [0-9.]*" |
        awk '{ s += $4 } END { print s / NR / 1000 }' >"$tmp/$label.$method.r$r.predicted"
      median_step_time "$out/metrics.jsonl" >"$tmp/$label.$method.r$r.step"
      declare -a pc=() mc=()
      for stage in 0 1; do
        log="$out/logs/rank_$stage.log"
        # Predicted: the mean of the plans from the profiles before and after the run.
        a=$(stage_compute "$fresh.before.plan" "$stage") && b=$(stage_compute "$fresh.after.plan" "$stage") || exit 1
        pc[$stage]=$(awk -v a="$a" -v b="$b" 'BEGIN { print (a + b) / 2 }')
        mc[$stage]=$(grep -o "compute per micro-batch: [0-9.]* ms" "$log" | awk '{print $4}')
      done
      for stage in 0 1; do
        log="$out/logs/rank_$stage.log"
        rf=$(grep -o "refill after waits [0-9][0-9.]*" "$log" | awk '{print $4}')
        # This stage's error relative to both stages' together (the machine's drift cancels).
        rel=$(awk -v p="${pc[$stage]}" -v m="${mc[$stage]}" -v a="${pc[0]}" -v b="${pc[1]}" \
          -v c="${mc[0]}" -v d="${mc[1]}" 'BEGIN { print 100 * ((p / m) / ((a + b) / (c + d)) - 1) }')
        echo "${pc[$stage]} ${mc[$stage]} $(grep -o "saved activations peak [0-9]* bytes" "$log" | awk '{print $4}')" \
          "$(grep -o "saved activations: peak [0-9]* bytes" "$log" | awk '{print $4}') ${rf:-0} $rel" \
          >>"$tmp/$label.$method.s$stage"
      done
    done
    # Every method's predicted and measured step time this round (a shared split: its twin's).
    for method in "${methods[@]}"; do
      [ -n "${runof[$method]:-}" ] || continue
      cat "$tmp/$label.${runof[$method]}.r$r.predicted" >>"$tmp/$label.$method.predicted"
      cat "$tmp/$label.${runof[$method]}.r$r.step" >>"$tmp/$label.$method.steps"
    done
    unset cut runof
  done
done

printf '\n%-12s %-11s %9s %12s %12s %10s %16s\n' "model" "method" "cut" "predicted s" "measured s" "meas/pred" "vs profile plan"
for label in "${models[@]}"; do
  for method in "${methods[@]}"; do
    if [ -f "$tmp/$label.$method.refused" ]; then
      printf '%-12s %-11s %9s %12s %12s %10s %16s  %s\n' "$label" "$method" - - - - - \
        "refused: $(head -1 "$tmp/$label.$method.refused")..."
      continue
    fi
    cuts=$(sort -n "$tmp/$label.$method.cuts" | uniq | paste -sd/)
    predicted=$(median <"$tmp/$label.$method.predicted")
    measured=$(median <"$tmp/$label.$method.steps")
    mp=$(paste "$tmp/$label.$method.steps" "$tmp/$label.$method.predicted" | awk '{print $1 / $2}' | median)
    ratio=$(paste "$tmp/$label.$method.steps" "$tmp/$label.profile.steps" | awk '{print $1 / $2}' | median)
    note=""
    [ -f "$tmp/$label.$method.shared" ] && note="same split as $(sort "$tmp/$label.$method.shared" | uniq | paste -sd/) in $(wc -l <"$tmp/$label.$method.shared") of $rounds rounds"
    awk -v l="$label" -v m="$method" -v c="$cuts" -v p="$predicted" -v t="$measured" -v mp="$mp" -v q="$ratio" \
      -v n="$note" 'BEGIN { printf "%-12s %-11s %9s %12.4f %12.4f %10.2f %15.3fx  %s\n", l, m, c, p, t, mp, q, n }'
  done
done

echo
echo "cost model accuracy per stage (compute = forward + backward + loss per micro-batch, with the refill after waits"
echo "the plan predicts (partition/Refill.h); predicted = the mean of the plans from the profiles right before and after"
echo "the run; error = median over the rounds that ran the split of (predicted - measured)"
echo "/ measured; 'no refill' = the same without the refill; 'vs both' = predicted/measured of the stage over that of"
echo "both stages together, - 1: the error in how the model divides the work, which the machine's drift between"
echo "profile and run does not move; memory = peak saved activations)"
printf '%-12s %-11s %5s %6s %13s %13s %8s %10s %10s %8s %15s %15s %8s\n' "model" "method" "stage" "rounds" "pred comp ms" \
  "meas comp ms" "error" "refill ms" "no refill" "vs both" "pred act bytes" "meas act bytes" "error"
for label in "${models[@]}"; do
  for method in "${methods[@]}"; do
    for stage in 0 1; do
      f="$tmp/$label.$method.s$stage"
      [ -f "$f" ] || continue
      awk -v l="$label" -v m="$method" -v s="$stage" '
        function med(a, n,   i, j, t) { for (i = 1; i <= n; ++i) for (j = i + 1; j <= n; ++j) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
                                     return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
        { ++n; pc[n] = $1; mc[n] = $2; e[n] = 100 * ($1 - $2) / $2; pa[n] = $3; ma[n] = $4; ea[n] = $4 ? 100 * ($3 - $4) / $4 : ($3 ? 100 : 0)
          rf[n] = $5; nr[n] = 100 * ($1 - $5 - $2) / $2; vb[n] = $6 }
        END { printf "%-12s %-11s %5s %6d %13.2f %13.2f %+7.1f%% %10.2f %+9.1f%% %+7.1f%% %15d %15d %+7.1f%%\n", l, m, s, n,
                     med(pc, n), med(mc, n), med(e, n), med(rf, n), med(nr, n), med(vb, n), med(pa, n), med(ma, n), med(ea, n) }' "$f"
    done
  done
done
echo
"$root/build/tests/sluice_tests" --gtest_filter='Partitioner.FiveThousandNodesIntoEightStages' 2>&1 |
  grep -o "FiveThousandNodesIntoEightStages ([0-9]* ms)" | sed 's/^/partitioner speed: 5,000 nodes into 8 stages, two plans (no budget, then a binding one): /'
