#!/usr/bin/env bash
# bench/simulate: `sluice simulate` against time and against reality.
# 1. Scale: every schedule at p = 64 ranks, m = 512 micro-batches on explicit
#    stage times (F, B, W = 1, 1.2, 0.8 ms; interleaved kinds 2 stages per
#    rank), each run's wall time: the whole command, building the schedule
#    (fitted and unit-cost where the kind fits) and simulating it.
# 2. Reality: the quickstart GPT (micro-batch 4, 6 micro-batches, 1 thread per
#    rank, dropout 0.1) on 2 and 3 ranks under each schedule. Each round, for
#    each schedule: `sluice profile` of the shape, `sluice simulate` from that
#    profile (its predicted step), `sluice partition` (the same plan) and a
#    training run on that plan (the measured step: median of steps 4..STEPS).
#    The profile is taken right before the run it predicts, so that as little
#    of the host's drift (its speed moves by 10-30% over minutes) as can be
#    falls between them; even rounds go through the schedules in reverse.
#    Each simulation runs twice: with a device per rank, and with the ranks
#    sharing this machine's cores (--cores, Note [ranks sharing cores]), which
#    is what 3 ranks on 2 cores do. Prints per configuration the medians over
#    rounds of both simulated steps, the measured one, and measured over the
#    sharing simulation.
# Asserts nothing.   usage: bench/simulate.sh [ROUNDS] [STEPS]   (default 3 rounds of 15 steps)
#   BENCH_RANKS="2" picks rank counts, BENCH_SCHEDULES="1f1b zb-h1" schedules.
source "$(dirname "$0")/lib.sh"  # strict mode, $root, scripts/env.sh, $sluice
rounds=${1:-3}
steps=${2:-15}
export OMPI_MCA_mpi_yield_when_idle=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
read -r -a schedules <<<"${BENCH_SCHEDULES:-gpipe 1f1b zb-h1 interleaved interleaved-zb zbv}"
read -r -a rank_counts <<<"${BENCH_RANKS:-2 3}"

echo "bench/simulate 1: p = 64, m = 512, F,B,W = 1,1.2,0.8 ms: seconds per \`sluice simulate\` (the whole command)"
for s in "${schedules[@]}"; do
  t0=$(date +%s.%N)
  "$sluice" simulate --stage-times 1,1.2,0.8 --ranks 64 --micro-batches 512 --schedule "$s" >"$tmp/scale.log"
  t1=$(date +%s.%N)
  printf '  %-16s %6.2f s  (%s)\n' "$s" "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')" \
    "$(awk -v s="$s" '$1 == s { if ($2 == "x2") $0 = $1 " " $3 " " $4; print "step " $2 " ms, bubble " $3; exit }' \
      "$tmp/scale.log")"
done

m=6
cores=$(nproc)
shape() {  # RANKS SCHEDULE -> the options of the quickstart at this shape
  echo "$root/configs/quickstart.yaml" --set pipeline.stages="$1" --set pipeline.schedule="$2" \
    --set pipeline.microbatches=$m --set training.micro_batch_size=4 --set training.global_batch_size=$((4 * m)) \
    --set job.threads_per_rank=1 --set model.dropout=0.1
}
echo
echo "bench/simulate 2: the quickstart GPT, micro-batch 4 x $m, 1 thread per rank, $rounds rounds of $steps steps"
"$sluice" --version | sed -n 1,2p | sed 's/^/  /'
for r in $(seq "$rounds"); do
  order=("${schedules[@]}")
  if ((r % 2 == 0)); then
    order=()
    for ((i = ${#schedules[@]} - 1; i >= 0; --i)); do order+=("${schedules[i]}"); done
  fi
  for p in "${rank_counts[@]}"; do
    prof="$tmp/profile_$p.pb"
    for s in "${order[@]}"; do
      "$sluice" profile $(shape "$p" 1f1b) -o "$prof" >"$prof.log" 2>&1 || { cat "$prof.log" >&2; exit 1; }
      key="$p $s"
      "$sluice" simulate $(shape "$p" "$s") --profile "$prof" >"$tmp/sim.log" 2>&1 || { cat "$tmp/sim.log" >&2; exit 1; }
      simulated=$(awk -v s="$s" '$1 == s { print ($2 == "x2" ? $3 : $2) / 1000; exit }' "$tmp/sim.log")
      "$sluice" simulate $(shape "$p" "$s") --profile "$prof" --cores "$cores" >"$tmp/sim.log" 2>&1 ||
        { cat "$tmp/sim.log" >&2; exit 1; }
      shared=$(awk -v s="$s" '$1 == s { print ($2 == "x2" ? $3 : $2) / 1000; exit }' "$tmp/sim.log")
      "$sluice" partition $(shape "$p" "$s") --profile "$prof" -o "$tmp/plan.pb" >"$tmp/plan.log" 2>&1 ||
        { cat "$tmp/plan.log" >&2; exit 1; }
      rm -rf "$tmp/run"
      "$sluice" train $(shape "$p" "$s") --set pipeline.plan="$tmp/plan.pb" --set training.steps="$steps" \
        --set logging.interval="$steps" --set optimizer.schedule=constant --set optimizer.warmup_steps=0 \
        --set job.output_dir="$tmp/run" >"$tmp/run.log" 2>&1 || { cat "$tmp/run.log" >&2; exit 1; }
      measured=$(median_step_time "$tmp/run/metrics.jsonl")
      echo "$key $simulated $shared $measured" >>"$tmp/results"
      printf '  round %d: %d ranks %-15s simulated %.4f s (sharing %d cores %.4f s), measured %.4f s, ratio %.3f\n' \
        "$r" "$p" "$s" "$simulated" "$cores" "$shared" "$measured" \
        "$(awk -v a="$measured" -v b="$shared" 'BEGIN { print a / b }')"
    done
  done
done
echo
printf '  %-5s %-15s %13s %15s %12s %18s %18s\n' ranks schedule "simulated s" "sharing $cores s" "measured s" \
  "measured/simulated" "measured/sharing"
for p in "${rank_counts[@]}"; do
  for s in "${schedules[@]}"; do
    col() { awk -v p="$p" -v s="$s" -v e="$1" '$1 == p && $2 == s { $0 = $0 " " $5 / $3 " " $5 / $4; print $e }' \
      "$tmp/results" | median; }
    printf '  %-5s %-15s %13.4f %15.4f %12.4f %18.3f %18.3f\n' "$p" "$s" "$(col 3)" "$(col 4)" "$(col 5)" "$(col 6)" \
      "$(col 7)"
  done
done
