#!/usr/bin/env bash
# Memory plans inside the schedules that split backward or put several stages
# on a rank (zb-h1, interleaved, interleaved-zb, zbv), and under GPipe (1F1B:
# memory.sh; 2 ranks, the quickstart GPT, dropout on), all from one profile:
# keeping everything, at exactly the smallest budget the partitioner names
# (it swaps there), and (interleaved) by recomputing only,
# every rank's measured peak is within 10% of the prediction and within the
# budget, and the losses equal keeping everything under the same schedule
# exactly (Note [split backward memory], memory/StageMemory.h); zbv and
# interleaved also under a budget only each rank's stages together meet
# (Note [rank budget], partition/Plan.cpp), and interleaved-zb recomputing
# only at the budget its ranks meet with their stages together. Recompute
# under every schedule is exact by tests/pipeline/MemoryPlanTest.cpp.
source "$(dirname "$0")/lib.sh"
CFG="$ROOT/configs/quickstart.yaml"
drop=(--set model.dropout=0.1)
run=(--set training.steps=4 --set logging.interval=2 "${drop[@]}")
source "$(dirname "$0")/memory_lib.sh"

# check_window NAME BUDGET_MIB: Note [rank window] (partition/Plan.cpp): with
# several stages per rank the swap window is at most an eighth of the rank's
# budget, and grew to it or until a rank's predicted peak met the budget; it
# is larger than an eighth of a stage's equal share.
check_window() {
  awk -v n="$1" -v b="$2" '
    / MiB swap window$/ { w = $(NF - 3); if (w > win) win = w }
    /^  rank [0-9]+ \(stages .*\): predicted peak / { for (i = 1; i <= NF; ++i) if ($i == "peak") p = $(i + 1); if (p > peak) peak = p }
    END { printf "%s: swap window %.2f MiB, largest rank peak %.2f MiB, budget %s MiB\n", n, win, peak, b
          if (win > b / 8 + 0.01) { print "window over an eighth of the budget"; exit 1 }
          if (win < b / 8 - 0.01 && peak < b - 0.01) { print "the window could have grown"; exit 1 }
          if (win <= b / 16 + 0.01) { print "the window is a stage share'"'"'s"; exit 1 } }' "$TMP/$1.plan.log" ||
    { cat "$TMP/$1.plan.log"; fail "$1: swap window"; }
}

# The profile memory.sh plans from too (lib.sh shared_profile).
cp "$(shared_profile quickstart_dropout)" "$TMP/prof.pb"
# in_pairs FUNCTION ARG...: FUNCTION ARG for each ARG, two at a time (a
# partition run is one thread, and CTest gives this test both cores); fails
# when any does.
in_pairs() {
  local f=$1 pids=() a rc=0
  shift
  for a in "$@"; do
    "$f" "$a" &
    pids+=($!)
    if [ ${#pids[@]} -eq 2 ]; then wait "${pids[0]}" || rc=1; pids=("${pids[@]:1}"); fi
  done
  for a in "${pids[@]}"; do wait "$a" || rc=1; done
  return $rc
}
# The planner's runs first (most of this test's time): each schedule's smallest
# budget with an equal share per stage, the plans that swap at it and, for zbv
# and interleaved, the plans at 85% of it (Note [rank budget], partition/Plan.cpp).
schedules=(interleaved-zb zbv zb-h1 interleaved gpipe)  # the longest searches first
smallest_of() { smallest_budget --set pipeline.schedule="$1" >"$TMP/smallest_$1" || fail "$1: smallest budget"; }
swap_plan() { plan_from swap_$1 "$(cat "$TMP/smallest_$1")" --set pipeline.schedule="$1" >"$TMP/budget_$1"; }
rank_plan() { plan rank_$1 --budget-mb "$(percent_of "$(cat "$TMP/smallest_$1")" 85)" --set pipeline.schedule="$1"; }
in_pairs smallest_of "${schedules[@]}" || fail "finding the smallest budgets"
for schedule in "${schedules[@]}"; do
  [ -n "$(cat "$TMP/smallest_$schedule")" ] || fail "$schedule: partition does not name the smallest budget that fits"
done
in_pairs swap_plan "${schedules[@]}" || fail "planning at the smallest budgets"
in_pairs rank_plan zbv interleaved || fail "planning at 85% of the smallest budgets"

for schedule in gpipe zb-h1 interleaved interleaved-zb zbv; do
  s=(--set pipeline.schedule=$schedule)
  plan keep_$schedule "${s[@]}"
  train keep_$schedule "$TMP/keep_$schedule.pb" "${s[@]}"
  check_memory keep_$schedule 0

  budget=$(cat "$TMP/budget_$schedule")
  grep -qE "^  stage .* swap$" "$TMP/swap_$schedule.plan.log" ||
    { cat "$TMP/swap_$schedule.plan.log"; fail "$schedule: the $budget MiB plan swaps nothing"; }
  [[ $schedule == zb-h1 || $schedule == gpipe ]] || check_window swap_$schedule "$budget"
  train swap_$schedule "$TMP/swap_$schedule.pb" "${s[@]}"
  check_memory swap_$schedule "$budget"
  same_losses swap_$schedule keep_$schedule
  grep -q "memory plan: swapped [1-9]" "$TMP/swap_$schedule"/logs/rank_*.log || fail "$schedule: no rank swapped"
done

# Note [rank budget] (partition/Plan.cpp): a rank's stages fit its budget
# together, so zbv and interleaved plan at 85% of the smallest budget an equal
# share per stage can meet, and train within it with memory.hard_limit (an
# allocation beyond the budget fails), the losses those of keeping everything.
for schedule in zbv interleaved; do
  s=(--set pipeline.schedule=$schedule)
  equal=$(cat "$TMP/smallest_$schedule")
  budget=$(percent_of "$equal" 85)
  grep -q "^  rank 0 (stages .*): predicted peak .* of its $budget MiB budget" "$TMP/rank_$schedule.plan.log" ||
    { cat "$TMP/rank_$schedule.plan.log"; fail "$schedule: no rank peak against the budget in the plan"; }
  train rank_$schedule "$TMP/rank_$schedule.pb" "${s[@]}" --set memory.budget_mb="$budget" --set memory.hard_limit=true
  check_memory rank_$schedule "$budget"
  same_losses rank_$schedule keep_$schedule
  echo "$schedule: planned and trained at $budget MiB, under the $equal MiB equal shares need"
done

# Recompute only (no swap tier), interleaved, on the cuts of keeping
# everything (else the cuts alone move under the budget) and 80% of its
# largest predicted rank peak. Left out: zb-h1 and interleaved-zb, where
# recompute frees little (a split backward's Bi rebuilds what W reads and
# holds it until W); their recompute is exact by MemoryPlanTest.
keep_peak=$(cat "$TMP/keep_interleaved"/logs/rank_*.log | grep -o "predicted_peak_bytes=[0-9]*" | cut -d= -f2 | sort -n | tail -1)
budget=$((keep_peak * 8 / 10 / 1048576))
cuts=$(grep -oE "^ +[0-9]+ +\[[0-9]+," "$TMP/keep_interleaved.plan.log" | grep -oE "[0-9]+,$" | tr -d , | tail -n +2 | paste -sd,)
[ -n "$cuts" ] || fail "no cuts in the interleaved plan"
s=(--set pipeline.schedule=interleaved --set memory.swap=false)
plan recompute_interleaved --budget-mb "$budget" "${s[@]}" --set "pipeline.cuts=[$cuts]"
grep -qE "^  stage .* recompute( |$)" "$TMP/recompute_interleaved.plan.log" || fail "the recompute-only plan recomputes nothing"
train recompute_interleaved "$TMP/recompute_interleaved.pb" "${s[@]}"
check_memory recompute_interleaved "$budget"
same_losses recompute_interleaved keep_interleaved
grep -q "memory plan: .*recomputed [1-9]" "$TMP/recompute_interleaved"/logs/rank_*.log || fail "interleaved: no rank recomputed"
# Recompute only, interleaved-zb, at exactly the smallest budget the planner
# names: with no swap tier it searches the budget each rank's stages meet
# together (Note [rank budget], partition/Plan.cpp), which is below keeping
# everything (an equal share per stage needs more); trained under
# memory.hard_limit.
s=(--set pipeline.schedule=interleaved-zb --set memory.swap=false)
budget=$(smallest_budget "${s[@]}")
[ -n "$budget" ] || fail "interleaved-zb, recompute only: partition does not name a budget that fits"
keep_peak=$(cat "$TMP/keep_interleaved-zb"/logs/rank_*.log | grep -o "predicted_peak_bytes=[0-9]*" | cut -d= -f2 | sort -n | tail -1)
awk -v b="$budget" -v k="$keep_peak" 'BEGIN { exit !(b * 1048576 < k) }' ||
  fail "interleaved-zb, recompute only: the named $budget MiB is not below keeping everything ($keep_peak bytes)"
plan rank_recompute_izb --budget-mb "$budget" "${s[@]}"
train rank_recompute_izb "$TMP/rank_recompute_izb.pb" "${s[@]}" --set memory.budget_mb="$budget" --set memory.hard_limit=true
check_memory rank_recompute_izb "$budget"
same_losses rank_recompute_izb keep_interleaved-zb
echo "interleaved-zb, recompute only: planned and trained at the $budget MiB it names, below keeping everything ($(awk -v k="$keep_peak" 'BEGIN { printf "%.2f", k / 1048576 }') MiB)"
echo "ok: memory plans under gpipe, zb-h1, interleaved, interleaved-zb and zbv, each at the smallest budget it names"
