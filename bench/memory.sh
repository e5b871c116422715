#!/usr/bin/env bash
# bench/memory: what the memory plan buys, on a GPT whose activations dominate
# (bench/memory.yaml: sequence 256, width 256, 4 layers, 2 stages, 1F1B, 4
# micro-batches), 2 ranks x 1 thread, against the two baselines:
#   none            keep every saved tensor;
#   full_recompute  checkpoint every transformer block (Megatron's full
#                   recompute, DeepSpeed's activation checkpointing);
#   plan            Sluice's partitioner: per saved storage keep, swap (O_DIRECT
#                   file in memory.swap_dir) or recompute, whatever is fastest
#                   within the budget.
# (a) Under one fixed per-stage budget (the peak of keeping everything at
#     micro-batch 2, + 3%), the largest micro-batch each policy trains (3
#     steps, memory.hard_limit: an allocation beyond the budget fails).
# (b) At micro-batch 4, budgets that leave 100%, 50% and 25% of the keep-all
#     saved-activation memory (budget = keep-all peak - (1 - x) * in-flight
#     activations, the larger over the stages): throughput relative to no
#     budget (median step time after 3 warm-up steps), what was swapped and
#     recomputed, swap stall, and predicted vs measured peak.
# All runs in one invocation; prints tables, asserts nothing.
#   usage: bench/memory.sh [STEPS]   (default 20 for (b); the unconstrained run
#   is made twice, first and last, and the baseline is their mean)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/scripts/env.sh"
source "$root/bench/lib.sh"
steps=${1:-20}
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
# run NAME MB POLICY BUDGET STEPS [hard]: partition + train; 0 when it trained.
run() {
  local name=$1 mb=$2 policy=$3 budget=$4 n=$5 hard=${6:-}
  profile "$mb"
  # shellcheck disable=SC2046
  "$sluice" partition "$cfg" $(mb_args "$mb") --set memory.policy="$policy" --profile "$tmp/prof.$mb.pb" \
    -o "$tmp/$name.pb" --budget-mb "$budget" >"$tmp/$name.plan.log" 2>&1 || return 1
  # shellcheck disable=SC2046
  "$sluice" train "$cfg" $(mb_args "$mb") --set memory.policy="$policy" --set memory.budget_mb="$budget" \
    --set pipeline.plan="$tmp/$name.pb" --set training.steps="$n" --set logging.interval="$n" \
    ${hard:+--set memory.hard_limit=true} --set job.output_dir="$tmp/$name" >"$tmp/$name.log" 2>&1
}
# field NAME KEY: the larger over both ranks of KEY=value in the "memory:" lines.
field() { cat "$tmp/$1"/logs/rank_*.log | { grep -o "$2=[0-9]*" || true; } | cut -d= -f2 | sort -n | tail -1; }
mib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }

echo "bench/memory: $(grep -c ^processor /proc/cpuinfo) cores, 2 ranks x 1 thread, $("$sluice" --version | grep BLAS)"
echo "model: GPT, vocab 256, sequence 256, width 256, 4 layers, 4 heads; 2 stages, 1F1B, 4 micro-batches"

# ---- (a) the largest micro-batch under a fixed budget ----
run keep2 2 none 0 3 || { cat "$tmp/keep2.log"; exit 1; }
budget=$(awk -v b="$(field keep2 measured_peak_bytes)" 'BEGIN { printf "%.1f", 1.03 * b / 1048576 }')
echo
echo "(a) budget $budget MiB per stage (keep-all peak at micro-batch 2, + 3%), memory.hard_limit on"
printf '%-16s %22s %14s\n' policy "largest micro-batch" "vs none"
declare -A largest
for policy in none full_recompute plan; do
  best=0
  for mb in 1 2 3 4 6 8 10 12 16; do
    if run "a.$policy.$mb" "$mb" "$policy" "$budget" 3 hard; then
      best=$mb
      echo "  $policy: micro-batch $mb trains (peak $(mib "$(field "a.$policy.$mb" measured_peak_bytes)") MiB)" >&2
    else
      echo "  $policy: micro-batch $mb does not: $(grep -ho "needs [0-9.]* MiB\|smallest budget that fits is [0-9.]* MiB\|out of memory" \
        "$tmp/a.$policy.$mb.plan.log" "$tmp/a.$policy.$mb.log" 2>/dev/null | head -1 || true)" >&2
      break
    fi
  done
  largest[$policy]=$best
done
for policy in none full_recompute plan; do
  awk -v p="$policy" -v b="${largest[$policy]}" -v n="${largest[none]}" \
    'BEGIN { printf "%-16s %22d %13.1fx\n", p, b, (n > 0 ? b / n : 0) }'
done

# ---- (b) throughput under budgets at micro-batch 4 ----
run free 4 none 0 "$steps" || { cat "$tmp/free.log"; exit 1; }
base=$(median_step_time "$tmp/free/metrics.jsonl")
# keep-all peak and in-flight activations per stage, from the plan of the unconstrained run
read -r -a levels <<<"$("$sluice" plan show "$tmp/free.pb" | awk '
  /^  stage [0-9]+ memory:/ { for (i = 1; i <= NF; i++) if ($i == "x") { n = $(i - 1); h = $(i + 1); u = $(i + 2) }
                              stages++; inflight[stages] = n; held[stages] = h * (u == "KiB" ? 1 / 1024 : 1) }
  /^ +[0-9]+ +\[/ { rows++; peak[rows] = $(NF - 7) }
  END { for (x = 1; x >= 0.24; x -= (x > 0.6 ? 0.5 : 0.25)) { b = 0
          for (k = 1; k <= stages; k++) { v = peak[k] - (1 - x) * inflight[k] * held[k]; if (v > b) b = v }
          printf "%.2f ", b } }')"
echo
echo "(b) micro-batch 4; no budget: $base s/step; budgets leave 100% / 50% / 25% of the keep-all activations"
printf '%-6s %9s %-15s %10s %9s %10s %12s %9s %11s %11s %7s\n' level "budget" policy "s/step" "vs free" "swapped" \
  "recomputed" "stall s" "predicted" "measured" "error"
pct=(100 50 25)
# When full_recompute does not fit the smallest budget, both run once more at
# the smallest budget it fits, so the two compare at one budget.
for i in 0 1 2 3; do
  if [ "$i" -eq 3 ]; then
    need=$(grep -ho "needs [0-9.]* MiB" "$tmp/b.full_recompute.25.plan.log" 2>/dev/null | awk '{print $2}' | head -1 || true)
    [ -n "$need" ] || break
    levels[3]=$(awk -v n="$need" 'BEGIN { printf "%.2f", n + 0.01 }')
    pct[3]=$(awk -v b="${levels[3]}" -v l="${levels[2]}" -v h="${levels[0]}" 'BEGIN { printf "%.0f", 100 - 75 * (h - b) / (h - l) }')
  fi
  b=${levels[$i]}
  for policy in plan full_recompute; do
    name="b.$policy.${pct[$i]}"
    if ! run "$name" 4 "$policy" "$b" "$steps" hard; then
      why=$(grep -ho "needs [0-9.]* MiB\|the smallest budget that fits is [0-9.]* MiB\|out of memory" "$tmp/$name.plan.log" "$tmp/$name.log" 2>/dev/null | head -1 || true)
      printf '%-6s %9s %-15s %s\n' "${pct[$i]}%" "$b" "$policy" "does not fit (${why:-see log})"
      continue
    fi
    t=$(median_step_time "$tmp/$name/metrics.jsonl")
    swapped=$(cat "$tmp/$name"/logs/rank_*.log | { grep -o "swapped [0-9.]* [KMG]\?i\?B" || true; } | awk '{print $2 $3}' | paste -sd+ -)
    recomputed=$(cat "$tmp/$name"/logs/rank_*.log | { grep -o "recomputed [0-9.]* [KMG]\?i\?B in" || true; } | awk '{print $2 $3}' | paste -sd+ -)
    stall=$(cat "$tmp/$name"/logs/rank_*.log | { grep -o "swap stall [0-9.]* s" || true; } | awk '{s += $3} END {printf "%.2f", s}')
    pred=$(field "$name" predicted_peak_bytes) meas=$(field "$name" measured_peak_bytes)
    awk -v l="${pct[$i]}%" -v b="$b" -v p="$policy" -v t="$t" -v base="$base" -v sw="${swapped:-0}" \
      -v rc="${recomputed:-0}" -v st="$stall" -v pr="$pred" -v me="$meas" 'BEGIN {
      printf "%-6s %9s %-15s %10.3f %8.2fx %10s %12s %9s %10.1fM %10.1fM %+6.1f%%\n", l, b, p, t, base / t, sw, rc, st,
             pr / 1048576, me / 1048576, 100 * (me - pr) / pr }'
  done
done
run free2 4 none 0 "$steps" || { cat "$tmp/free2.log"; exit 1; }
echo "no budget again at the end: $(median_step_time "$tmp/free2/metrics.jsonl") s/step (the machine's drift over the run)"
echo
echo "vs free = step time without a budget / step time (1.00x: no slowdown); swapped/recomputed: bytes over the run,"
echo "per stage; stall: time the compute threads waited for swap I/O (both stages); predicted/measured: peak allocated"
echo "bytes of the model, the larger stage (counting allocator)."
