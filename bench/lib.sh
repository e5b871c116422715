# Shared by the benchmarks, sourced first: source "$(dirname "$0")/lib.sh".
# Sets strict mode, $root (the checkout), the environment (scripts/env.sh) and
# $sluice, built when missing.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$root/scripts/env.sh"
sluice="${SLUICE_BIN:-$root/build/cli/sluice}"  # SLUICE_BIN: another build (scripts/gpu/check.sh)
[ -x "$sluice" ] || bash "$root/scripts/build.sh" sluice

# median: the median of the numbers on stdin, one per line (nothing for none).
median() {
  sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) exit; if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# median_step_time METRICS_JSONL: median step_time_s after 3 warm-up steps.
# jfields KEYS FILE: the "key": value pairs of a metrics.jsonl whose key
# matches KEYS (a grep alternation, e.g. 'loss\|eval_loss'), one per line,
# printed as `"key": value` whatever the file's spacing.
jfields() { grep -o "\"\\($1\\)\": *[^,}]*" "$2" | sed 's/": */": /'; }
median_step_time() {
  jfields step_time_s "$1" | awk '{print $2}' | tail -n +4 | median
}

# The quickstart GPT on $quickstart_stages (default 2) stages x 1 thread, global
# batch 16 (schedules.sh, peers.sh), trained by "${quickstart_run[@]}" CONFIG
# ARGS... "${quickstart_extra[@]}" (default: $sluice train CONFIG ARGS...;
# peers.sh launches on cluster hosts). A configuration is "SCHEDULE M [unit] [ARGS...]": M micro-batches;
# unit runs zb-h1 / interleaved-zb in the unit-cost order
# (pipeline.fit_schedule: false) instead of fitted to the plan's stage times;
# ARGS are more --set options (e.g. --set training.precision=bf16).
quickstart_args() {  # SCHEDULE M [unit] [ARGS...] -> the train/partition options
  local schedule=$1 m=$2 fit=true
  shift 2
  if [ "${1:-}" = unit ]; then fit=false; shift; fi
  echo --set pipeline.stages="${quickstart_stages:-2}" --set pipeline.microbatches="$m" --set training.micro_batch_size=$((16 / m)) \
    --set training.global_batch_size=16 --set job.threads_per_rank=1 --set pipeline.schedule="$schedule" \
    --set pipeline.fit_schedule=$fit "$@"
}
# quickstart_plan PLAN CONFIG...: profiles once per distinct shape (cached
# next to PLAN; the schedule does not change a profile) and partitions into PLAN.
quickstart_plan() {
  local plan=$1 dir prof key
  shift
  dir=$(dirname "$plan")
  key=$(quickstart_args "$@" | sed 's/--set pipeline.schedule=[^ ]*//; s/--set pipeline.fit_schedule=[^ ]*//' | cksum | cut -d' ' -f1)
  prof="$dir/profile_$key.pb"
  if [ ! -f "$prof" ]; then
    "$sluice" profile "$root/configs/quickstart.yaml" -o "$prof" $(quickstart_args "$@") >"$prof.log" 2>&1 ||
      { cat "$prof.log" >&2; exit 1; }
  fi
  "$sluice" partition "$root/configs/quickstart.yaml" --profile "$prof" -o "$plan" $(quickstart_args "$@") \
    >"$plan.log" 2>&1 || { cat "$plan.log" >&2; exit 1; }
}
# quickstart_train PLAN OUT STEPS CONFIG...: trains STEPS steps at a constant
# learning rate into OUT and prints "median-step-time model-GFLOP-per-step
# peak-GFLOP/s": the trainer's utilisation line, the model's work per step and
# what the ranks' matrix products reach together, measured in the same run.
quickstart_train() {
  local plan=$1 out=$2 steps=$3
  shift 3
  rm -rf "$out"
  local run=("$sluice" train)
  [ -z "${quickstart_run+x}" ] || run=("${quickstart_run[@]}")
  "${run[@]}" "$root/configs/quickstart.yaml" $(quickstart_args "$@") --set pipeline.plan="$plan" \
    --set training.steps="$steps" --set logging.interval="$steps" \
    --set optimizer.schedule=constant --set optimizer.warmup_steps=0 --set job.output_dir="$out" \
    ${quickstart_extra[@]+"${quickstart_extra[@]}"} >"$out.log" 2>&1 || { cat "$out.log" >&2; exit 1; }
  echo "$(median_step_time "$out/metrics.jsonl")" \
    "$(sed -n 's/.*utilisation: \([0-9.]*\) GFLOP .* of the \([0-9.]*\) GFLOP\/s.*/\1 \2/p' "$out.log" | sed -n 1p)"
}

# bench_cluster NAME SLOTS: the test cluster (tests/cluster/lib.sh; root):
# hosts h1 (launches), h2 and h3 (SLOTS ranks each, $WORK/hostfile), network
# namespaces with TCP between them. Needs $tmp set; the cluster's EXIT trap
# removes the hosts and $tmp. $WORK is what every host sees (their /tmp is
# private); on_host H CMD runs CMD on host H.
bench_cluster() {
  bench_name=$1
  fail() { echo "bench/$bench_name: $*" >&2; exit 1; }
  SLUICE=$sluice ROOT=$root TMP=$tmp
  source "$root/tests/cluster/lib.sh"
  cluster_up 3
  printf 'h2 slots=%s\nh3 slots=%s\n' "$2" "$2" >"$WORK/hostfile"
}
