#!/usr/bin/env bash
# bench/schedules: the quickstart GPT (global batch 16) on 2 stages x 1 thread
# under each pipeline schedule (interleaved, interleaved-zb: 2 stages per rank),
# against plain PyTorch eager in one process
# with 2 intra-op threads on the same model and batch (bench/eager_torch.py;
# run twice: as is, and with the same glibc heap settings as Sluice),
# in paired rounds: every round runs every configuration once, in the same
# order, and each ratio is taken within a round. Prints per-configuration
# median step times and the medians over rounds of the ratios to PyTorch and
# to 1F1B at the same micro-batch count. Asserts nothing.
#   usage: bench/schedules.sh [ROUNDS] [STEPS]   (default 5 rounds of 15 steps; medians after 3 warm-up steps)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/scripts/env.sh"
source "$root/bench/lib.sh"
rounds=${1:-5}
steps=${2:-15}
py=/usr/bin/python3
$py -c "import torch" 2>/dev/null || { echo "bench/schedules: needs python3-torch (scripts/setup.sh installs it)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# "SCHEDULE M [unit]": unit runs zb-h1 / interleaved-zb in the unit-cost order
# (pipeline.fit_schedule: false) instead of fitted to the plan's stage times.
# BENCH_CONFIGS (";"-separated) picks some.
configs=("1f1b 4" "zb-h1 4" "zb-h1 4 unit" "interleaved 4" "interleaved-zb 4" "gpipe 4" "1f1b 8" "zb-h1 8"
         "zb-h1 8 unit" "interleaved 8" "interleaved-zb 8")
if [ -n "${BENCH_CONFIGS:-}" ]; then IFS=';' read -r -a configs <<<"$BENCH_CONFIGS"; fi
# Sluice keeps freed memory in its heap (core/HeapPolicy.h); PyTorch is also
# run with the same glibc settings, as a second peer.
heap_kept=glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=1073741824
sluice_run() {  # schedule microbatches [unit] -> median step time
  local out="$tmp/$1_$2${3:+_$3}"
  rm -rf "$out"
  "$sluice" train "$root/configs/quickstart.yaml" --set training.steps="$steps" --set logging.interval="$steps" \
    --set pipeline.stages=2 --set pipeline.schedule="$1" --set pipeline.microbatches="$2" \
    --set pipeline.fit_schedule=$([ "${3:-}" = unit ] && echo false || echo true) \
    --set training.micro_batch_size=$((16 / $2)) --set training.global_batch_size=16 --set job.threads_per_rank=1 \
    --set optimizer.schedule=constant --set optimizer.warmup_steps=0 --set job.output_dir="$out" \
    >"$out.log" 2>&1 || { cat "$out.log"; exit 1; }
  median_step_time "$out/metrics.jsonl"
}
echo "bench/schedules: quickstart GPT (4 x 192, block 128), global batch 16, $rounds rounds of $steps steps"
"$sluice" --version | sed 's/^/  /'
results="$tmp/results"
: >"$results"
for r in $(seq 1 "$rounds"); do
  t=$(cd "$root/bench" && OMP_NUM_THREADS=2 $py eager_torch.py --steps "$steps" --threads 2 | sed -n 's/step_time_s=//p')
  echo "$r torch $t" >>"$results"
  t=$(cd "$root/bench" && GLIBC_TUNABLES=$heap_kept OMP_NUM_THREADS=2 $py eager_torch.py --steps "$steps" --threads 2 |
      sed -n 's/step_time_s=//p')
  echo "$r torch-heap-kept $t" >>"$results"
  for c in "${configs[@]}"; do
    set -- $c
    echo "$r $1/m=$2${3:+/$3} $(sluice_run "$@")" >>"$results"
  done
  echo "  round $r/$rounds done" >&2
done
$py - "$results" "$heap_kept" <<'PY'
import collections, statistics, sys
rows = collections.defaultdict(dict)
for line in open(sys.argv[1]):
    r, name, t = line.split()
    rows[name][int(r)] = float(t)
med = statistics.median
names = list(rows)
print("\n%-52s %12s %10s %16s %14s" % ("configuration", "step time s", "vs torch", "vs torch heap", "vs 1f1b same m"))
for n in names:
    rounds = sorted(rows[n])
    vt = med(rows[n][r] / rows["torch"][r] for r in rounds)
    vh = med(rows[n][r] / rows["torch-heap-kept"][r] for r in rounds)
    base = "1f1b/m=" + n.split("m=")[1].split("/")[0] if "m=" in n else None
    vb = med(rows[n][r] / rows[base][r] for r in rounds) if base in rows else None
    label = {"torch": "pytorch eager, 1 process x 2 threads",
             "torch-heap-kept": "pytorch eager, 2 threads, heap kept as sluice's"}.get(n, "sluice 2 stages x 1 thread, " + n)
    print("%-52s %12.4f %9.3fx %15.3fx %14s" % (label, med(rows[n].values()), vt, vh, "-" if vb is None else "%.3fx" % vb))
print("\nratios are step time / reference step time, median over rounds of the ratio within each round (below 1: faster).")
print("interleaved and interleaved-zb: 2 stages per rank; /unit: zb order from unit costs, not fitted to the plan's"
      " stage times; torch heap: PyTorch with GLIBC_TUNABLES=" + sys.argv[2])
PY
