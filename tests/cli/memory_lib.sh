# Helpers of the memory-plan CLI tests (sourced after lib.sh, with CFG,
# drop (the --set flags for dropout) and run (training flags) set): the
# smallest budget the partitioner can meet, plans and training runs in $TMP,
# predicted vs measured peaks, losses vs keeping everything.
# smallest_budget [args...]: the smallest budget the partitioner can meet, as
# it names it when asked for less (MiB, to 1/100, rounded up; with several
# stages per rank, the smallest with equal shares: Note [rank budget]). The
# tests plan and train at exactly that figure.
smallest_budget() {
  { "$SLUICE" partition "$CFG" "${drop[@]}" --profile "$TMP/prof.pb" -o "$TMP/unused.$BASHPID.pb" --budget-mb 1 "$@" 2>&1 || true; } |
    grep -o "set memory.budget_mb to at least [0-9.]*" | awk '{ print $NF }'
}
# percent_of MIB PERCENT: PERCENT% of a budget in MiB, to 1/100.
percent_of() { awk -v b="$1" -v p="$2" 'BEGIN { printf "%.2f\n", int(b * p) / 100 }'; }
plan() {  # plan NAME [args...]
  local name=$1
  shift
  "$SLUICE" partition "$CFG" "${drop[@]}" --profile "$TMP/prof.pb" -o "$TMP/$name.pb" "$@" >"$TMP/$name.plan.log" 2>&1 ||
    { cat "$TMP/$name.plan.log"; fail "partition $name"; }
}
# plan_from NAME BUDGET_MIB [args...]: a plan at BUDGET_MIB, which must fit:
# every budget from the smallest the partitioner names up does (Note [memory
# unit], partition/CostModel.h); prints that budget.
plan_from() {
  local name=$1 budget=$2
  shift 2
  plan "$name" --budget-mb "$budget" "$@" >&2
  echo "$budget"
}
train() {  # train NAME PLAN [args...]
  local name=$1 planFile=$2
  shift 2
  "$SLUICE" train "$CFG" "${run[@]}" --set pipeline.plan="$planFile" --set job.output_dir="$TMP/$name" "$@" \
    >"$TMP/$name.log" 2>&1 || { cat "$TMP/$name.log"; fail "train $name"; }
}
# check_memory NAME BUDGET_MIB [RANKS]: every rank's measured peak within 10%
# of its prediction (and within the budget, when there is one). The
# prediction counts a swapping rank's swap window whole (bytes in flight to or
# from the tier: a bound, for the budget); how much of it is in flight at the
# peak depends on how far the I/O thread lags, so below the prediction the
# measure is held to 10% of the prediction without the window.
check_memory() {
  local name=$1 budget=$2 ranks=${3:-2}
  cat "$TMP/$name"/logs/rank_*.log |
    grep -o "memory: stage [0-9]* measured_peak_bytes=[0-9]* predicted_peak_bytes=[0-9]* .*swap_window_bytes=[0-9]*" |
    awk -v n="$name" -v b="$budget" -v r="$ranks" '
      { split($4, m, "="); split($5, p, "="); split($NF, w, "="); e = (m[2] - p[2]) / p[2]; rows++
        low = (m[2] - (p[2] - w[2])) / (p[2] - w[2])
        printf "%s: stage %s measured %.2f MiB, predicted %.2f MiB (%+.1f%%%s)%s\n", n, $3, m[2] / 1048576, p[2] / 1048576,
               100 * e, (w[2] > 0 ? sprintf("; %+.1f%% without the %.2f MiB swap window", 100 * low, w[2] / 1048576) : ""),
               (b > 0 ? sprintf(", budget %s MiB (%.1f%% of it used)", b, 100 * m[2] / (b * 1048576)) : "")
        if (e > 0.10 || low < -0.10) bad = 1; if (b > 0 && m[2] > b * 1048576) over = 1
        margin = 0.10 - e; if (low + 0.10 < margin) margin = low + 0.10; if (rows == 1 || margin < worst) worst = margin }
      END { if (rows != r) { print "expected " r " ranks, got " rows; exit 1 }
            printf "%s: worst margin to the 10%% rule %.1f points\n", n, 100 * worst
            if (bad) { print "off by more than 10%"; exit 1 }
            if (over) { print "over the budget"; exit 1 } }' || fail "$name: memory"
}
# same_losses NAME [REFERENCE]: NAME's losses equal REFERENCE's (default keep), exactly.
same_losses() {
  local ref=${2:-keep}
  cmp <(losses "$TMP/$ref/metrics.jsonl") <(losses "$TMP/$1/metrics.jsonl") || fail "$1: losses differ from $ref (keeping everything)"
  echo "$1: $(losses "$TMP/$1/metrics.jsonl" | wc -l) losses equal to $ref (exactly)"
}

