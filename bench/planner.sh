#!/usr/bin/env bash
# bench/planner: how long `sluice partition` takes (the whole command: model
# capture, profile load, planning, plan written) under every schedule and
# budgets from "nothing fits" to "no budget", for
#   quickstart  configs/quickstart.yaml, 2 ranks (123 nodes);
#   gpt12x768   the same GPT with 12 layers of width 768 and 12 heads, 4 ranks
#               (355 nodes; 8 stages under interleaved, interleaved-zb, zbv).
# With BASE=/path/to/another/sluice (e.g. a build of an earlier commit) each
# call alternates between that binary and this build's, and the table gives
# both medians and their ratio. Each model is profiled once by this build
# (the 12 x 768 takes some 4 minutes on 2 cores); BASE must read the same
# profile format.
# Prints, per model and schedule, the median seconds over ROUNDS of each
# budget's call and the largest of them. Asserts nothing.
#   usage: [BASE=old/sluice] [MODELS="quickstart gpt12x768"] [BUDGETS="1 700 0"] bench/planner.sh [ROUNDS]
#   (default 3 rounds; BUDGETS replaces every model's list, SCHEDULES="zbv ..." picks schedules)
source "$(dirname "$0")/lib.sh"  # strict mode, $root, scripts/env.sh, $sluice
rounds=${1:-3}
base=${BASE:-}
read -r -a models <<<"${MODELS:-quickstart gpt12x768}"
export OMPI_MCA_mpi_yield_when_idle=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cfg="$root/configs/quickstart.yaml"
declare -A args budgets
args[quickstart]=""
budgets[quickstart]="1 30 40 50 62.7 100 0"
args[gpt12x768]="--set model.layers=12 --set model.embd=768 --set model.heads=12 --set pipeline.stages=4"
budgets[gpt12x768]="1 500 700 850 1000 1500 0"
read -r -a schedules <<<"${SCHEDULES:-gpipe 1f1b zb-h1 interleaved interleaved-zb zbv}"
if [ -n "${BUDGETS:-}" ]; then for m in "${!budgets[@]}"; do budgets[$m]=$BUDGETS; done; fi

# seconds BINARY MODEL SCHEDULE BUDGET: one call's wall time (a plan or "nothing fits" both count).
seconds() {
  local start end
  start=$(date +%s.%N)
  # shellcheck disable=SC2086
  "$1" partition "$cfg" ${args[$2]} --profile "$tmp/$2.pb" -o "$tmp/plan.pb" --set pipeline.schedule="$3" \
    --budget-mb "$4" >"$tmp/last.log" 2>&1 || grep -q "fits" "$tmp/last.log" || { cat "$tmp/last.log"; exit 1; }
  end=$(date +%s.%N)
  awk -v a="$start" -v b="$end" 'BEGIN { printf "%.3f\n", b - a }'
}

echo "bench/planner: sluice partition, whole command, median of $rounds rounds${base:+, alternating with BASE=$base}"
for model in "${models[@]}"; do
  # shellcheck disable=SC2086
  "$sluice" profile "$cfg" ${args[$model]} -o "$tmp/$model.pb" >"$tmp/profile.log" 2>&1 || { cat "$tmp/profile.log"; exit 1; }
  echo
  echo "$model, budgets (MiB per rank; 0: none): ${budgets[$model]}"
  printf "%-15s %s\n" schedule "seconds per budget (this build${base:+ / BASE}), largest"
  for schedule in "${schedules[@]}"; do
    line="" worst=0 worstBase=0
    for budget in ${budgets[$model]}; do
      : >"$tmp/after" && : >"$tmp/before"
      for ((r = 0; r < rounds; ++r)); do
        if [ -n "$base" ] && ((r % 2 == 1)); then seconds "$base" "$model" "$schedule" "$budget" >>"$tmp/before"; fi
        seconds "$sluice" "$model" "$schedule" "$budget" >>"$tmp/after"
        if [ -n "$base" ] && ((r % 2 == 0)); then seconds "$base" "$model" "$schedule" "$budget" >>"$tmp/before"; fi
      done
      a=$(median <"$tmp/after")
      worst=$(awk -v x="$a" -v y="$worst" 'BEGIN { print (x > y ? x : y) }')
      if [ -n "$base" ]; then
        b=$(median <"$tmp/before")
        worstBase=$(awk -v x="$b" -v y="$worstBase" 'BEGIN { print (x > y ? x : y) }')
        line="$line $budget:${a}/${b}"
      else
        line="$line $budget:$a"
      fi
    done
    printf "%-15s %s  largest %s%s\n" "$schedule" "$line" "$worst" \
      "${base:+ / $worstBase ($(awk -v x="$worst" -v y="$worstBase" 'BEGIN { printf "%.2fx", y / x }') faster)}"
  done
done
