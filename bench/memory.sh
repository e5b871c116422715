#!/usr/bin/env bash
# bench/memory: what the memory plan buys under each schedule, on a GPT whose
# activations dominate (bench/memory.yaml: sequence 256, width 256, 4 layers,
# 2 ranks x 1 thread, 4 micro-batches). The candidates:
#   1f1b none              keep every saved tensor (the baseline);
#   1f1b full_recompute    checkpoint every transformer block (Megatron's full
#                          recompute, DeepSpeed's activation checkpointing);
#   SCHEDULE plan          Sluice's partitioner under 1f1b, zb-h1, interleaved,
#                          interleaved-zb or zbv (2 stages per rank): per saved
#                          storage keep, swap (O_DIRECT file in memory.swap_dir)
#                          or recompute, whatever is fastest within the budget;
#   auto plan              pipeline.schedule auto: the schedule and plan the
#                          cost model predicts fastest within the budget.
# (a) Under one fixed budget per rank (the peak of keeping everything at
#     micro-batch 2, + 3%), the largest micro-batch each candidate trains (3
#     steps, memory.hard_limit: an allocation beyond the budget fails).
# (b) At micro-batch 4, budgets that leave 100%, 50% and 25% of 1F1B's keep-all
#     saved activations (budget = keep-all peak - (1 - x) x in-flight
#     activations, the larger over the ranks; 25% of the whole peak would be
#     below the parameters' and optimizer's own memory): step time relative to
#     1F1B keeping everything, as the median over ROUNDS rounds of the ratio to
#     the same round's baseline run (each round runs the baseline first, then
#     every candidate, in alternating order; a run's step time is its median
#     after 3 warm-up steps); the cost model's predicted step time and its
#     error; what was swapped and recomputed; predicted vs measured peak.
#     Then the issue's three checks, computed from the table (printed, not
#     asserted: a benchmark reports).
#   usage: bench/memory.sh [STEPS] [ROUNDS] [PARTS]   (defaults 8, 5 and ab: both
#   parts; a or b runs one)
source "$(dirname "$0")/lib.sh"  # strict mode, $root, scripts/env.sh, $sluice
steps=${1:-8}
rounds=${2:-5}
parts=${3:-ab}
cfg="$root/bench/memory.yaml"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMPI_MCA_mpi_yield_when_idle=1

mb_args() { echo "--set training.micro_batch_size=$1 --set training.global_batch_size=$((4 * $1))"; }
profile() {  # profile MB -> $tmp/prof.MB.pb
  [ -s "$tmp/prof.$1.pb" ] && return 0
  # shellcheck disable=SC2046
  "$sluice" profile "$cfg" $(mb_args "$1") -o "$tmp/prof.$1.pb" >"$tmp/prof.$1.log" 2>&1 ||
    { cat "$tmp/prof.$1.log"; exit 1; }
}
# A candidate "SCHEDULE POLICY" as config flags.
cand_args() { echo "--set pipeline.schedule=$1 --set memory.policy=$2"; }
# plan NAME MB SCHEDULE POLICY BUDGET: partition into $tmp/NAME.pb; 0 when a plan fits.
plan() {
  local name=$1 mb=$2 schedule=$3 policy=$4 budget=$5
  profile "$mb"
  # shellcheck disable=SC2046
  "$sluice" partition "$cfg" $(mb_args "$mb") $(cand_args "$schedule" "$policy") --profile "$tmp/prof.$mb.pb" \
    -o "$tmp/$name.pb" --budget-mb "$budget" >"$tmp/$name.plan.log" 2>&1
}
# train RUN PLAN MB SCHEDULE POLICY BUDGET STEPS [hard]: train with the plan into $tmp/RUN; 0 when it trained.
train() {
  local run=$1 planName=$2 mb=$3 schedule=$4 policy=$5 budget=$6 n=$7 hard=${8:-}
  # shellcheck disable=SC2046
  "$sluice" train "$cfg" $(mb_args "$mb") $(cand_args "$schedule" "$policy") --set memory.budget_mb="$budget" \
    --set pipeline.plan="$tmp/$planName.pb" --set training.steps="$n" --set logging.interval="$n" \
    ${hard:+--set memory.hard_limit=true} --set job.output_dir="$tmp/$run" >"$tmp/$run.log" 2>&1
}
# field NAME KEY: the larger over the ranks of KEY=value in the "memory:" lines.
field() { cat "$tmp/$1"/logs/rank_*.log | { grep -o "$2=[0-9]*" || true; } | cut -d= -f2 | sort -n | tail -1; }
mib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }
why_not() {  # why_not NAME: why a plan or run failed
  grep -ho "needs [0-9.]* MiB\|budget that fits is [0-9.]* MiB\|out of memory\|does not fit" \
    "$tmp/$1.plan.log" "$tmp/$1.log" 2>/dev/null | sed -n 1p || true
}
predicted_step() { grep -o "predicted step time [0-9.]* ms" "$tmp/$1.plan.log" | awk '{ print $4 / 1000 }'; }

candidates=("1f1b full_recompute" "1f1b plan" "zb-h1 plan" "interleaved plan" "interleaved-zb plan" "zbv plan" "auto plan")
label() { echo "${1// /+}"; }  # "zb-h1 plan" -> zb-h1+plan

echo "bench/memory: $(grep -c ^processor /proc/cpuinfo) cores, 2 ranks x 1 thread, $("$sluice" --version | grep BLAS)"
echo "model: GPT, vocab 256, sequence 256, width 256, 4 layers, 4 heads; 2 ranks, 4 micro-batches (interleaved: 2 stages per rank)"

# ---- (a) the largest micro-batch under a fixed budget ----
if [[ $parts == *a* ]]; then
plan keep2 2 1f1b none 0 && train keep2 keep2 2 1f1b none 0 3 || { cat "$tmp/keep2.plan.log" "$tmp/keep2.log"; exit 1; }
budget=$(awk -v b="$(field keep2 measured_peak_bytes)" 'BEGIN { printf "%.1f", 1.03 * b / 1048576 }')
echo
echo "(a) budget $budget MiB per rank (1F1B keep-all peak at micro-batch 2, + 3%), memory.hard_limit on"
printf '%-24s %20s %9s\n' candidate "largest micro-batch" "vs none"
declare -A largest
for c in "1f1b none" "${candidates[@]:0:6}"; do
  best=0
  for mb in 1 2 3 4 6 8 12 16 24; do
    name="a.$(label "$c").$mb"
    # shellcheck disable=SC2086
    if plan "$name" "$mb" $c "$budget" && train "$name" "$name" "$mb" $c "$budget" 3 hard; then
      best=$mb
      echo "  $(label "$c"): micro-batch $mb trains (peak $(mib "$(field "$name" measured_peak_bytes)") MiB)" >&2
    else
      echo "  $(label "$c"): micro-batch $mb does not: $(why_not "$name")" >&2
      break
    fi
  done
  largest[$c]=$best
done
for c in "1f1b none" "${candidates[@]:0:6}"; do
  awk -v p="$(label "$c")" -v b="${largest[$c]}" -v n="${largest[1f1b none]}" \
    'BEGIN { printf "%-24s %20d %8.1fx\n", p, b, (n > 0 ? b / n : 0) }'
done
fi
[[ $parts == *b* ]] || exit 0

# ---- (b) step time under budgets at micro-batch 4 ----
plan base 4 1f1b none 0 || { cat "$tmp/base.plan.log"; exit 1; }
# keep-all peak and in-flight activations per stage, from the baseline's plan
read -r -a levels <<<"$("$sluice" plan show "$tmp/base.pb" | awk '
  /^  stage [0-9]+ memory:/ { for (i = 1; i <= NF; i++) if ($i == "x") { n = $(i - 1); h = $(i + 1); u = $(i + 2) }
                              stages++; inflight[stages] = n; held[stages] = h * (u == "KiB" ? 1 / 1024 : 1) }
  /^ +[0-9]+ +\[/ { rows++; peak[rows] = $(NF - 7) }
  END { for (x = 1; x >= 0.24; x -= (x > 0.6 ? 0.5 : 0.25)) { b = 0
          for (k = 1; k <= stages; k++) { v = peak[k] - (1 - x) * inflight[k] * held[k]; if (v > b) b = v }
          printf "%.2f ", b } }')"
pct=(100 50 25)
echo
echo "(b) micro-batch 4, budgets per rank: ${levels[0]} / ${levels[1]} / ${levels[2]} MiB (100% / 50% / 25% of the keep-all activations); planning ..." >&2
# The plans, once per level and candidate (the runs below reuse them). When
# full_recompute does not fit the 25% budget, every candidate also runs at the
# smallest budget it fits (+4%: its measured peak runs up to 2.6% over the
# prediction, and memory.hard_limit is on), so the two compare at one budget.
declare -A fits
plan_level() {
  local i=$1 c name
  for c in "${candidates[@]}"; do
    name="b.${pct[$i]}.$(label "$c")"
    # shellcheck disable=SC2086
    if plan "$name" 4 $c "${levels[$i]}"; then fits[$name]=1; else fits[$name]=0; fi
  done
}
for i in 0 1 2; do plan_level "$i"; done
if [ "${fits[b.25.1f1b+full_recompute]}" != 1 ]; then
  need=$(grep -ho "needs [0-9.]* MiB" "$tmp/b.25.1f1b+full_recompute.plan.log" | awk '{ print $2 }' | sed -n 1p || true)
  if [ -n "$need" ]; then
    levels[3]=$(awk -v n="$need" 'BEGIN { printf "%.2f", 1.04 * n }')
    pct[3]=$(awk -v b="${levels[3]}" -v l="${levels[2]}" -v h="${levels[0]}" 'BEGIN { printf "%.0f", 100 - 75 * (h - b) / (h - l) }')
    plan_level 3
  fi
fi
nlevels=${#levels[@]}
# The rounds: the baseline, then every candidate that fits (alternating order).
runs=()
for ((i = 0; i < nlevels; i++)); do for c in "${candidates[@]}"; do runs+=("$i|$c"); done; done
declare -A times
for ((r = 1; r <= rounds; r++)); do
  train "base.$r" base 4 1f1b none 0 "$steps" || { cat "$tmp/base.$r.log"; exit 1; }
  times[base.$r]=$(median_step_time "$tmp/base.$r/metrics.jsonl")
  order=("${runs[@]}")
  if ((r % 2 == 0)); then
    order=()
    for ((k = ${#runs[@]} - 1; k >= 0; k--)); do order+=("${runs[$k]}"); done
  fi
  for run in "${order[@]}"; do
    i=${run%%|*} c=${run#*|}
    name="b.${pct[$i]}.$(label "$c")"
    [ "${fits[$name]}" = 1 ] || continue
    # shellcheck disable=SC2086
    if train "$name.$r" "$name" 4 $c "${levels[$i]}" "$steps" hard; then
      times[$name.$r]=$(median_step_time "$tmp/$name.$r/metrics.jsonl")
    else
      echo "  $name round $r failed: $(why_not "$name.$r")" >&2
      times[$name.$r]=
    fi
  done
  echo "  round $r of $rounds done (baseline ${times[base.$r]} s/step)" >&2
done
# each NAME [OTHER]: per round where NAME (and OTHER) trained, "t_NAME t_OTHER_or_base".
each() {
  local r other=${2:-base}
  for ((r = 1; r <= rounds; r++)); do
    if [ -n "${times[$1.$r]:-}" ] && [ -n "${times[$other.$r]:-}" ]; then echo "${times[$1.$r]} ${times[$other.$r]}"; fi
  done
}
# ratio NAME: the median over rounds of base / NAME (paired by round); secs NAME: its median step time;
# paired A B: the median over rounds of A's step time / B's. Empty when no round has both.
ratio() { each "$1" | awk '{ print $2 / $1 }' | median; }
secs() { each "$1" | awk '{ print $1 }' | median; }
paired() { each "$1" "$2" | awk '{ print $1 / $2 }' | median; }
# first_run NAME: its first run that trained (its logs give bytes and peaks).
first_run() {
  local r
  for ((r = 1; r <= rounds; r++)); do
    if [ -n "${times[$1.$r]:-}" ]; then echo "$1.$r"; return 0; fi
  done
}
base_s=$(secs base)
echo
echo "(b) micro-batch 4; 1F1B keeping everything: $base_s s/step (median of $rounds runs; predicted $(predicted_step base) s); medians over $rounds paired rounds"
[ "$nlevels" -gt 3 ] && echo "(full_recompute does not fit the 25% budget: level ${pct[3]}% is the smallest budget it fits, + 4%)"
printf '%-5s %8s %-24s %8s %8s %9s %7s %10s %11s %9s %7s %9s %7s\n' level "budget" candidate "s/step" "vs 1F1B" "predicted" \
  "error" "swapped" "recomputed" "pred MiB" "window" "meas MiB" "error"
memory_off=0 memory_rows=0
declare -A vs pred
for ((i = 0; i < nlevels; i++)); do
  for c in "${candidates[@]}"; do
    name="b.${pct[$i]}.$(label "$c")"
    shown=$(label "$c")
    [ "$c" = "auto plan" ] && [ "${fits[$name]}" = 1 ] &&
      shown="auto=$(grep -o "auto chose [a-z0-9-]*" "$tmp/$name.plan.log" | awk '{ print $3 }')+plan"
    if [ "${fits[$name]}" != 1 ]; then
      printf '%-5s %8s %-24s %s\n' "${pct[$i]}%" "${levels[$i]}" "$shown" "does not fit ($(why_not "$name"))"
      continue
    fi
    t=$(secs "$name")
    [ -n "$t" ] || { printf '%-5s %8s %-24s %s\n' "${pct[$i]}%" "${levels[$i]}" "$shown" "failed to train"; continue; }
    vs[$name]=$(ratio "$name") pred[$name]=$(predicted_step "$name")
    one=$(first_run "$name")
    swapped=$(cat "$tmp/$one"/logs/rank_*.log | { grep -o "swapped [0-9.]* [KMG]\?i\?B" || true; } | awk '{ print $2 $3 }' | paste -sd+ -)
    recomputed=$(cat "$tmp/$one"/logs/rank_*.log | { grep -o "recomputed [0-9.]* [KMG]\?i\?B in" || true; } | awk '{ print $2 $3 }' | paste -sd+ -)
    awk -v l="${pct[$i]}%" -v b="${levels[$i]}" -v p="$shown" -v t="$t" -v v="${vs[$name]}" -v pr="${pred[$name]}" \
      -v sw="${swapped:-0}" -v rc="${recomputed:-0}" -v pp="$(field "$one" predicted_peak_bytes)" \
      -v mp="$(field "$one" measured_peak_bytes)" -v w="$(field "$one" swap_window_bytes)" 'BEGIN {
      # Memory error: above the prediction, against it; below it by more than
      # the swap window (counted whole: bytes in flight to or from the tier),
      # against the prediction without the window; 0 in between.
      e = mp > pp ? (mp - pp) / pp : mp < pp - w ? (mp - (pp - w)) / (pp - w) : 0
      printf "%-5s %8s %-24s %8.3f %7.2fx %9.3f %+6.1f%% %10s %11s %9.1f %7.1f %9.1f %+6.1f%%\n", l, b, p, t, v, pr, 100 * (t - pr) / t,
             sw, rc, pp / 1048576, w / 1048576, mp / 1048576, 100 * e
      exit (e > 0.05 || e < -0.05) }' || memory_off=$((memory_off + 1))
    memory_rows=$((memory_rows + 1))
  done
done
echo
echo "vs 1F1B = 1F1B keep-all step time / step time, the median of per-round ratios (1.00x: as fast); predicted: the"
echo "cost model's step time (s), error = (measured - predicted) / measured; swapped/recomputed: bytes over its first"
echo "run, per stage; pred/meas MiB: peak allocated bytes of the model, the larger rank (counting allocator);"
echo "window: the swap window the prediction counts whole; memory error: against the prediction when above it, against"
echo "the prediction less the window when below that, 0 in between."
echo "memory: $((memory_rows - memory_off)) of $memory_rows trained plans within 5% of the prediction (the issue's bound)"

# ---- the issue's three checks, from the table ----
best() {  # best LEVEL_INDEX: the plan candidate (not full_recompute, not auto) with the largest vs 1F1B
  local i=$1 c name top="" topv=0
  for c in "${candidates[@]:1:5}"; do
    name="b.${pct[$i]}.$(label "$c")"
    [ -n "${vs[$name]:-}" ] || continue
    if awk -v a="${vs[$name]}" -v b="$topv" 'BEGIN { exit !(a > b) }'; then top=$name topv=${vs[$name]}; fi
  done
  echo "$top"
}
echo
b50=$(best 1)
[ -n "$b50" ] && awk -v n="${b50#b.50.}" -v v="${vs[$b50]}" 'BEGIN {
  printf "at 50%%: the best schedule with a plan, %s, runs at %.2fx 1F1B keeping everything (%s)\n", n, v,
         (v >= 1 ? "at least as fast" : "slower") }'
b25=$(best 2)
fr=b.25.1f1b+full_recompute
if [ -n "$b25" ] && [ -n "${vs[$fr]:-}" ]; then
  awk -v n="${b25#b.25.}" -v x="$(paired "$fr" "$b25")" 'BEGIN {
    printf "at 25%%: %s is %.2fx faster than 1F1B full_recompute (median of paired ratios; %s 1.15x)\n", n, x,
           (x >= 1.15 ? "meets" : "below") }'
elif [ -n "$b25" ] && [ "$nlevels" -gt 3 ]; then
  echo "at 25%: ${b25#b.25.} trains; 1F1B full_recompute does not fit ($(why_not "$fr"))"
  bl=$(best 3) fr=b.${pct[3]}.1f1b+full_recompute
  [ -n "$bl" ] && [ -n "${vs[$fr]:-}" ] && awk -v l="${pct[3]}" -v b="${levels[3]}" -v n="${bl#b.${pct[3]}.}" \
    -v x="$(paired "$fr" "$bl")" 'BEGIN {
    printf "at %s%% (%s MiB, the smallest budget full_recompute fits): %s is %.2fx faster than it (median of paired ratios)\n",
           l, b, n, x }'
else
  echo "at 25%: no comparison (no plan trained)"
fi
for ((i = 0; i < nlevels; i++)); do
  a="b.${pct[$i]}.auto+plan" top=$(best "$i")
  [ -n "${vs[$a]:-}" ] && [ -n "$top" ] || continue
  # auto's slowdown against the fastest measured candidate vs the cost model's
  # error on that comparison: its predicted ratio of the two against the
  # measured one (the profile's drift, which scales every prediction, cancels)
  awk -v l="${pct[$i]}" -v chose="$(grep -o "auto chose [a-z0-9-]*" "$tmp/$a.plan.log" | awk '{ print $3 }')" \
    -v n="${top#b.${pct[$i]}.}" -v slow="$(paired "$a" "$top")" -v pa="${pred[$a]}" -v pb="${pred[$top]}" 'BEGIN {
    e = slow / (pa / pb) - 1; if (e < 0) e = -e
    printf "at %s%%: auto chose %s; the fastest measured is %s; auto / it = %.3f measured, %.3f predicted: the cost model'"'"'s error on the comparison %.1f%% (%s)\n",
           l, chose, n, slow, pa / pb, 100 * e, (slow - 1 <= e ? "within" : "beyond") }'
done
exit 0
