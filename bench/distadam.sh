#!/usr/bin/env bash
# bench/distadam: a GPT trained data-parallel on 2 ranks (1 thread each):
# Sluice's DistAdam with hook-driven reduce-scatter vs reduce-scatter after
# backward vs plain all-reduce AdamW, and PyTorch's DDP + ZeroRedundancyOptimizer
# (AdamW, Gloo; torch 2.11 from scripts/setup.sh's environment) on the same sizes, all in this run.
# Prints median step times (after 3 warm-up steps), ratios and optimizer bytes per rank.
#   usage: bench/distadam.sh [STEPS] [ROUNDS]   (default 15 steps, 5 paired rounds: every round runs every
#   configuration once; ratios are medians over rounds of the ratio within a round)
# BENCH_HOSTS=2 (root): the 2 ranks on two hosts of the test cluster
# (tests/cluster/lib.sh: network namespaces on a bridge, veth links), so every
# reduction crosses a link over TCP: Sluice through `sluice launch` with a
# hostfile, PyTorch with one process per host (Gloo over eth0).
source "$(dirname "$0")/lib.sh"  # strict mode, $root, scripts/env.sh, $sluice
bash "$root/scripts/setup.sh" >/dev/null
steps=${1:-15}
layers=4 embd=192 heads=6 block=128 mbs=4 m=4
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
common=(--set data.name=synthetic --set model.layers=$layers --set model.embd=$embd --set model.heads=$heads
        --set model.block_size=$block --set training.steps="$steps" --set logging.interval="$steps"
        --set pipeline.stages=1 --set pipeline.data_parallel=2 --set training.micro_batch_size=$mbs
        --set pipeline.microbatches=$m --set training.global_batch_size=$((mbs * m * 2))
        --set job.threads_per_rank=1 --set optimizer.name=dist_adam --set optimizer.schedule=constant
        --set optimizer.warmup_steps=0)
rounds=${2:-5}
py=$SLUICE_PYTHON  # torch 2.11, the PyTorch side (scripts/setup.sh)
have_torch=0
$py -c "import torch.distributed" 2>/dev/null && have_torch=1 ||
  echo "bench/distadam: torch could not be imported from $py; the PyTorch row is left out" >&2
torch_args=(--layers $layers --embd $embd --heads $heads --block $block --micro-batch $mbs --microbatches $m
            --steps "$steps")
hosts=${BENCH_HOSTS:-1}
where="on this machine"
if [ "$hosts" = 2 ]; then
  # The test cluster's helpers: h1 launches, h2 and h3 run one rank each.
  bench_cluster distadam 1  # bench/lib.sh
  out_root=$WORK  # /tmp is private to each host
  where="on two hosts (h2, h3: network namespaces, veth links over a bridge, TCP)"
  run_sluice() {
    on_host h1 "$sluice" launch "$root/configs/quickstart.yaml" "${common[@]}" "$@" --hostfile "$WORK/hostfile" \
      --set cluster.interface=eth0 --set cluster.rsh_agent="$AGENT"
  }
  run_torch() {
    on_host h3 env OMP_NUM_THREADS=1 GLOO_SOCKET_IFNAME=eth0 $py "$root/bench/distadam_torch.py" "${torch_args[@]}" \
      --rank 1 --master h2 >/dev/null 2>"$tmp/torch1.err" &
    local peer=$!
    on_host h2 env OMP_NUM_THREADS=1 GLOO_SOCKET_IFNAME=eth0 $py "$root/bench/distadam_torch.py" "${torch_args[@]}" \
      --rank 0 --master h2 || { wait $peer; cat "$tmp/torch1.err" >&2; return 1; }
    wait $peer
  }
else
  out_root=$tmp
  run_sluice() { "$sluice" train "$root/configs/quickstart.yaml" "${common[@]}" "$@"; }
  run_torch() { OMP_NUM_THREADS=1 $py "$root/bench/distadam_torch.py" "${torch_args[@]}"; }
fi
results="$tmp/results"
: >"$results"
for r in $(seq 1 "$rounds"); do
  for mode in hooks after_backward allreduce; do
    out="$out_root/$mode"
    run_sluice --set optimizer.dist_adam.mode=$mode --set job.output_dir="$out" >"$tmp/$mode.log" 2>&1 ||
      { cat "$tmp/$mode.log"; exit 1; }
    echo "$r $mode $(median_step_time "$out/metrics.jsonl") $(grep -o '(\([0-9]*\) bytes)' "$out/logs/rank_0.log" | tr -dc 0-9)" >>"$results"
    rm -rf "${out:?}"
  done
  if [ $have_torch = 1 ]; then
    out=$(run_torch 2>"$tmp/torch.err") || { cat "$tmp/torch.err"; exit 1; }
    echo "$r torch $(echo "$out" | sed -n 's/.*step_time_s=\([0-9.]*\).*/\1/p') $(echo "$out" | sed -n 's/.*optimizer_bytes=\([0-9]*\).*/\1/p')" >>"$results"
  fi
  echo "  round $r/$rounds done" >&2
done
echo "bench/distadam: GPT ${layers}x${embd}, block $block, 2 data-parallel ranks x 1 thread $where, $m micro-batches of $mbs per rank, $rounds paired rounds of $steps steps"
"$sluice" --version | sed 's/^/  /'
$py - "$results" <<'PY'
import collections, statistics, sys
t, b = collections.defaultdict(dict), {}
for line in open(sys.argv[1]):
    r, name, time, nbytes = line.split()
    t[name][int(r)] = float(time)
    b[name] = nbytes
med = statistics.median
labels = {"hooks": "sluice DistAdam, hooks (reduce in backward)",
          "after_backward": "sluice DistAdam, reduce-scatter after backward",
          "allreduce": "sluice all-reduce AdamW (replicated state)",
          "torch": "pytorch DDP + ZeroRedundancyOptimizer(AdamW)"}
print("\n%-48s %12s %10s %16s %22s" % ("optimizer", "step time s", "vs torch", "vs after_bwd", "optimizer bytes/rank"))
for n in labels:
    if n not in t:
        continue
    rs = sorted(t[n])
    vt = "%.2fx" % med(t["torch"][r] / t[n][r] for r in rs) if "torch" in t else "-"
    va = "%.3f" % med(t[n][r] / t["after_backward"][r] for r in rs)
    print("%-48s %12.4f %10s %16s %22s" % (labels[n], med(t[n].values()), vt, va, b[n]))
print("\nvs torch = PyTorch step time / this row's (above 1: faster than PyTorch); vs after_bwd = this row's step"
      " time / after_backward's (below 1: faster); both medians over rounds of the ratio within a round.")
PY
