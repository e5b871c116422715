#!/usr/bin/env bash
# bench/schedules: the quickstart GPT (global batch 16) on 2 stages x 1 thread
# under each pipeline schedule (interleaved, interleaved-zb: 2 stages per rank),
# against plain PyTorch eager in one process
# with 2 intra-op threads on the same model and batch (bench/eager_torch.py;
# also run with the same glibc heap settings as Sluice, as a second peer).
#
# This machine's speed drifts by 10-40% over seconds, so the runs alternate
# finely: each configuration is planned once up front (one profile per
# micro-batch size, then `sluice partition`), so that a measured run is only
# its training steps (a few seconds), and every round runs
#   torch, heap-kept torch, torch, config 1, torch, config 2, ..., torch
# with each run's ratio taken against the geometric mean of the two PyTorch
# runs right before and after it. Prints per-configuration median step times
# and the medians over rounds of the ratios to PyTorch, to PyTorch with the
# heap kept and to 1F1B at the same micro-batch count. Asserts nothing.
#   usage: bench/schedules.sh [ROUNDS] [STEPS]   (default 5 rounds of 15 steps; medians after 3 warm-up steps)
#   BENCH_CONFIGS="1f1b 4;interleaved-zb 4" picks configurations ("SCHEDULE M [unit]").
source "$(dirname "$0")/lib.sh"  # strict mode, $root, scripts/env.sh, $sluice
rounds=${1:-5}
steps=${2:-15}
py=$SLUICE_PYTHON  # torch 2.11, the PyTorch side (scripts/setup.sh)
$py -c "import torch" 2>/dev/null || { echo "bench/schedules: needs torch in $py (scripts/setup.sh installs it)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# "SCHEDULE M [unit]" (bench/lib.sh's quickstart_args).
configs=("1f1b 4" "zb-h1 4" "zb-h1 4 unit" "interleaved 4" "interleaved-zb 4" "gpipe 4" "1f1b 8" "zb-h1 8"
         "zb-h1 8 unit" "interleaved 8" "interleaved-zb 8")
if [ -n "${BENCH_CONFIGS:-}" ]; then IFS=';' read -r -a configs <<<"$BENCH_CONFIGS"; fi
# Sluice keeps freed memory in its heap (core/HeapPolicy.h); PyTorch is also
# run with the same glibc settings, as a second peer.
heap_kept=glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=1073741824
name_of() { echo "$1/m=$2${3:+/$3}"; }
plan_of() { echo "$tmp/plan_$(name_of "$@" | tr / _).pb"; }  # schedule microbatches [unit] -> its plan file
torch_run() {  # [GLIBC_TUNABLES] -> median step time
  (cd "$root/bench" && GLIBC_TUNABLES=${1:-} OMP_NUM_THREADS=2 $py eager_torch.py --steps "$steps" --threads 2 |
     sed -n 's/step_time_s=//p')
}
sluice_run() {  # schedule microbatches [unit] -> "median step time, model GFLOP per step, peak GFLOP/s"
  quickstart_train "$(plan_of "$@")" "$tmp/run_$(name_of "$@" | tr / _)" "$steps" "$@"
}
echo "bench/schedules: quickstart GPT (4 x 192, block 128), global batch 16, $rounds rounds of $steps steps"
"$sluice" --version | sed 's/^/  /'
# Plans, once: one profile per micro-batch size (on 2 ranks, as training runs), one plan per configuration.
for c in "${configs[@]}"; do quickstart_plan "$(plan_of $c)" $c; done
echo "  planned ${#configs[@]} configurations" >&2
results="$tmp/results"  # lines: round position name seconds [model GFLOP per step, peak GFLOP/s]
: >"$results"
for r in $(seq 1 "$rounds"); do
  pos=0
  # Each run assigned first: a failed run stops the bench.
  run=$(torch_run); echo "$r $((pos++)) torch $run" >>"$results"
  run=$(torch_run "$heap_kept"); echo "$r $((pos++)) torch-heap-kept $run" >>"$results"
  for c in "${configs[@]}"; do
    run=$(torch_run); echo "$r $((pos++)) torch $run" >>"$results"
    run=$(sluice_run $c); echo "$r $((pos++)) $(name_of $c) $run" >>"$results"
  done
  run=$(torch_run); echo "$r $((pos++)) torch $run" >>"$results"
  echo "  round $r/$rounds done" >&2
done
$py - "$results" "$heap_kept" <<'PY'
import collections, math, statistics, sys
runs = collections.defaultdict(list)  # round -> [(position, name, seconds)]
util = collections.defaultdict(list)  # name -> model FLOP/s over the peak, per run
work, peaks = [], []
for line in open(sys.argv[1]):
    r, p, name, t, *more = line.split()
    runs[int(r)].append((int(p), name, float(t)))
    if len(more) == 2:
        work.append(float(more[0]))
        peaks.append(float(more[1]))
        util[name].append(float(more[0]) / float(t) / float(more[1]))
times = collections.defaultdict(list)  # name -> step times over rounds
vs_torch = collections.defaultdict(dict)  # name -> round -> ratio to the PyTorch runs around it
for r, seq in runs.items():
    seq.sort()
    for i, (_, name, t) in enumerate(seq):
        times[name].append(t)
        if name == "torch":
            continue
        before = [s for _, n, s in seq[:i] if n == "torch"][-1]
        after = [s for _, n, s in seq[i + 1:] if n == "torch"][0]
        vs_torch[name][r] = t / math.sqrt(before * after)
med = statistics.median
print("\n%-52s %12s %10s %14s %16s %14s %6s" % ("configuration", "step time s", "vs torch", "(range)", "vs torch heap",
                                                "vs 1f1b same m", "util"))
# PyTorch's utilisation: the same model work over the peak Sluice's ranks measured (the same 2 cores).
torch_util = "%5.0f%%" % (100 * med(work) / med(times["torch"]) / med(peaks)) if work else "-"
print("%-52s %12.4f %9.3fx %14s %16s %14s %6s" % ("pytorch eager, 1 process x 2 threads", med(times["torch"]), 1.0, "-",
                                                "-", "-", torch_util))
for n, by_round in vs_torch.items():
    rounds = sorted(by_round)
    vh = med(by_round[r] / vs_torch["torch-heap-kept"][r] for r in rounds)
    base = "1f1b/m=" + n.split("m=")[1].split("/")[0] if "m=" in n else None
    vb = med(by_round[r] / vs_torch[base][r] for r in rounds) if base in vs_torch else None
    label = ("pytorch eager, 2 threads, heap kept as sluice's" if n == "torch-heap-kept"
             else "sluice 2 stages x 1 thread, " + n)
    spread = "%.3f-%.3f" % (min(by_round.values()), max(by_round.values()))
    print("%-52s %12.4f %9.3fx %14s %15.3fx %14s %6s" % (label, med(times[n]), med(by_round.values()), spread, vh,
                                                         "-" if vb is None else "%.3fx" % vb,
                                                         "%5.0f%%" % (100 * med(util[n])) if util[n] else "-"))
print("\nvs torch: step time / the geometric mean of the PyTorch runs right before and after it, median over rounds"
      " (below 1: faster; range: over rounds);\nthe other ratios divide two such ratios of the same round. interleaved and interleaved-zb:"
      " 2 stages per rank;\n/unit: zb order from unit costs, not fitted to the plan's stage times; torch heap: PyTorch"
      " with GLIBC_TUNABLES=" + sys.argv[2] + ";\nutil: model FLOP/s (3 x the forward's matrix products per step, over"
      " the median step time) over the FLOP/s the ranks' matrix products reach together, measured in each run"
      " (PyTorch: against the median of those)")
PY
