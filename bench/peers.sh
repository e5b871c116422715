#!/usr/bin/env bash
# bench/peers: Sluice against torch.distributed.pipelining (PyTorch 2.11, gloo)
# side by side on the same cores: the quickstart GPT (4 x 192, block 128; the
# module of bench/gpt_torch.py, whose module paths are models/Gpt.cpp's), the
# same initial weights (written once by PyTorch as safetensors; Sluice starts
# from them with model.weights), the same batches (Sluice's text dataset on
# the fortunes file; bench/peers_torch.py draws the same windows), global
# batch 16 in M micro-batches, AdamW at a constant learning rate, 2 ranks x 1
# thread each, in fp32 and bf16.
#
# The pairs (PyTorch's schedule : Sluice's), each side under its own split:
# PyTorch's layer-balanced stages (bench/peers_torch.py), Sluice's planned
# cuts (`sluice partition` from a profile, once per configuration):
#   gpipe : gpipe, 1f1b : 1f1b, interleaved (Interleaved1F1B) : interleaved,
#   interleaved-zb (InterleavedZeroBubble) : interleaved-zb, zbv
#   (ZBVZeroBubble) : zbv, dualpipev (DualPipeV) : none, none : zb-h1.
# Every round runs each pair back to back (the peer first in odd rounds,
# Sluice first in even ones) and the pairs in alternating order. Per pair: the
# median over rounds of Sluice's step time over the peer's in the same round;
# "best": the same for each side's fastest schedule of the round. util: model
# FLOP/s over the FLOP/s the ranks' matrix products reach together (measured
# by each Sluice run; the peer's against the median of those).
#
# Same work, checked after each round: the first 3 steps' losses of every run
# equal the PyTorch 1F1B run's of the same round within relative 1e-5 (fp32) or 2e-2
# (bf16: autocast rounds differently from Sluice's captured graph), or the
# bench stops with both lists.
#   usage: bench/peers.sh [ROUNDS] [STEPS]   (default 5 rounds of 15 steps; medians after 3 warm-up steps)
#   BENCH_M=8 sets the micro-batch count (default 4); BENCH_PRECISIONS="fp32" picks precisions;
#   BENCH_PAIRS="gpipe 1f1b" keeps the pairs with one of these schedules on either side (1f1b must be
#   one: every run's losses are checked against PyTorch 1F1B's).
#   BENCH_HOSTS=2 (root): 4 ranks on two hosts of the test cluster (tests/cluster/lib.sh: network
#   namespaces h2 and h3, 2 ranks each, TCP between them): 4 stages of one layer each; PyTorch's
#   gpipe and 1f1b (its interleaved schedules would need 8 layers) against Sluice's, and Sluice's
#   zb-h1, interleaved-zb and zbv; fp32 unless BENCH_PRECISIONS says otherwise.
source "$(dirname "$0")/lib.sh"  # strict mode, $root, scripts/env.sh, $sluice
rounds=${1:-5}
steps=${2:-15}
m=${BENCH_M:-4}
read -r -a precisions <<<"${BENCH_PRECISIONS:-fp32 bf16}"
py=$SLUICE_PYTHON  # torch 2.11 (scripts/setup.sh)
$py -c "import torch, safetensors" 2>/dev/null ||
  { echo "bench/peers: needs torch and safetensors in $py (scripts/setup.sh installs them)" >&2; exit 1; }
[ "$steps" -ge 4 ] || { echo "bench/peers: STEPS must be at least 4 (3 warm-up steps)" >&2; exit 1; }
text=/usr/share/games/fortunes/fortunes
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMPI_MCA_mpi_yield_when_idle=1
pairs=("gpipe gpipe" "1f1b 1f1b" "interleaved interleaved" "interleaved-zb interleaved-zb" "zbv zbv" "dualpipev -"
       "- zb-h1")
ranks=2
where="on this machine"
if [ "${BENCH_HOSTS:-1}" = 2 ]; then
  bench_cluster peers 2  # bench/lib.sh
  tmp=$WORK  # what every host must read (weights, plans, outputs); /tmp is private to each host
  ranks=4
  where="on two hosts (h2, h3: network namespaces, veth links over a bridge, TCP), 2 ranks each"
  [ -n "${BENCH_PRECISIONS:-}" ] || precisions=(fp32)
  pairs=("gpipe gpipe" "1f1b 1f1b" "- zb-h1" "- interleaved-zb" "- zbv")
  quickstart_stages=4
  quickstart_run=(on_host h1 "$sluice" launch)
  quickstart_extra=(--hostfile "$WORK/hostfile" --set cluster.interface=eth0 --set cluster.rsh_agent="$AGENT"
                    --set "cluster.env={OMPI_MCA_mpi_yield_when_idle: '1'}")
fi
if [ -n "${BENCH_PAIRS:-}" ]; then
  case " $BENCH_PAIRS " in *" 1f1b "*) ;; *) echo "bench/peers: BENCH_PAIRS must include 1f1b (the losses' reference)" >&2; exit 1 ;; esac
  kept=()
  for pair in "${pairs[@]}"; do
    set -- $pair
    case " $BENCH_PAIRS " in *" $1 "* | *" $2 "*) kept+=("$pair") ;; esac
  done
  pairs=("${kept[@]}")
fi
weights="$tmp/weights.safetensors"
(cd "$root/bench" && $py peers_torch.py init --weights "$weights")
sluice_args() {  # schedule precision -> the configuration for quickstart_args
  echo "$1 $m --set model.weights=$weights --set data.path=$text --set training.precision=$2"
}
peer_run() {  # schedule precision -> "seconds" (losses into $tmp/losses_peer_SCHEDULE_PRECISION)
  local log="$tmp/peer_$1_$2.log"
  local args=(train --schedule "$1" --precision "$2" --weights "$weights" --text "$text" --steps "$steps"
              --microbatches "$m" --ranks "$ranks")
  if [ "$ranks" = 4 ]; then
    # One process per host, each spawning its 2 ranks; rank 0 (on h2) prints.
    on_host h3 env OMP_NUM_THREADS=1 GLOO_SOCKET_IFNAME=eth0 $py "$root/bench/peers_torch.py" "${args[@]}" \
      --nodes 2 --node-rank 1 --master h2 >"$log.h3" 2>&1 &
    local other=$!
    on_host h2 env OMP_NUM_THREADS=1 GLOO_SOCKET_IFNAME=eth0 $py "$root/bench/peers_torch.py" "${args[@]}" \
      --nodes 2 --node-rank 0 --master h2 >"$log" 2>&1 || { wait $other || true; cat "$log" "$log.h3" >&2; exit 1; }
    wait $other || { cat "$log.h3" >&2; exit 1; }
  else
    (cd "$root/bench" && OMP_NUM_THREADS=1 $py peers_torch.py "${args[@]}" >"$log" 2>&1) || { cat "$log" >&2; exit 1; }
  fi
  sed -n 's/^losses=//p' "$log" | tr , '\n' >"$tmp/losses_peer_$1_$2"
  sed -n 's/^step_time_s=//p' "$log"
}
sluice_run() {  # schedule precision -> "seconds GFLOP peak" (losses into $tmp/losses_sluice_SCHEDULE_PRECISION)
  local out="$tmp/sluice_$1_$2"
  quickstart_train "$tmp/plan_$1_$2.pb" "$out" "$steps" $(sluice_args "$@")
  jfields loss "$out/metrics.jsonl" | awk '{print $2}' >"$tmp/losses_sluice_$1_$2"
}
same_work() {  # side schedule precision: the first 3 losses equal PyTorch 1F1B's of this round
  local tol=1e-5
  [ "$3" = bf16 ] && tol=2e-2
  paste <(sed -n 1,3p "$tmp/losses_$1_$2_$3") <(sed -n 1,3p "$tmp/losses_peer_1f1b_$3") |
    awk -v tol=$tol '{ d = ($1 - $2) / $2; if (d < 0) d = -d; if (!(d <= tol)) bad = 1; n++ } END { exit (bad || n != 3) }' || {
    echo "bench/peers: $1 $2 ($3) trained other work than PyTorch's 1f1b: first losses" \
      "$(sed -n 1,3p "$tmp/losses_$1_$2_$3" | tr '\n' ' ')vs $(sed -n 1,3p "$tmp/losses_peer_1f1b_$3" | tr '\n' ' ')" >&2
    exit 1
  }
}
echo "bench/peers: quickstart GPT (4 x 192, block 128), global batch 16, m=$m, $ranks ranks x 1 thread $where," \
  "${precisions[*]}, $rounds rounds of $steps steps"
"$sluice" --version | sed 's/^/  /'
echo "  peer: torch.distributed.pipelining $($py -c 'import torch; print(torch.__version__)'), gloo"
for p in "${precisions[@]}"; do
  for pair in "${pairs[@]}"; do
    set -- $pair
    [ "$2" = - ] || quickstart_plan "$tmp/plan_$2_$p.pb" $(sluice_args "$2" "$p")
  done
done
echo "  planned" >&2
results="$tmp/results"  # lines: round precision side schedule seconds [GFLOP per step, peak GFLOP/s]
: >"$results"
for r in $(seq 1 "$rounds"); do
  for p in "${precisions[@]}"; do
    order=("${pairs[@]}")
    if [ $((r % 2)) = 0 ]; then order=(); for ((i = ${#pairs[@]} - 1; i >= 0; i--)); do order+=("${pairs[i]}"); done; fi
    sides=(peer sluice)
    [ $((r % 2)) = 0 ] && sides=(sluice peer)
    for pair in "${order[@]}"; do
      set -- $pair
      for side in "${sides[@]}"; do
        if [ "$side" = peer ] && [ "$1" != - ]; then
          run=$(peer_run "$1" "$p")  # (an assignment, so that a failed run stops the bench)
          echo "$r $p peer $1 $run" >>"$results"
        elif [ "$side" = sluice ] && [ "$2" != - ]; then
          run=$(sluice_run "$2" "$p")
          echo "$r $p sluice $2 $run" >>"$results"
        fi
      done
    done
    for pair in "${pairs[@]}"; do
      set -- $pair
      [ "$1" = - ] || same_work peer "$1" "$p"
      [ "$2" = - ] || same_work sluice "$2" "$p"
    done
  done
  echo "  round $r/$rounds done" >&2
done
echo "  every run's first 3 losses equal PyTorch 1F1B's of its round (relative 1e-5 fp32, 2e-2 bf16)"
$py - "$results" "${pairs[@]}" <<'PY'
import collections, statistics, sys
med = statistics.median
t = collections.defaultdict(dict)  # (precision, side, schedule) -> round -> seconds
work, peaks = collections.defaultdict(list), collections.defaultdict(list)  # precision -> per Sluice run
for line in open(sys.argv[1]):
    r, p, side, s, sec, *more = line.split()
    t[(p, side, s)][int(r)] = float(sec)
    if more:
        work[p].append(float(more[0]))
        peaks[p].append(float(more[1]))
pairs = [x.split() for x in sys.argv[2:]]
for p in sorted({k[0] for k in t}, key=lambda x: x != "fp32"):
    def util(sec):
        return "%5.0f%%" % (100 * med(work[p]) / sec / med(peaks[p])) if work[p] else "-"
    print(f"\n{p}: step time s (median over rounds), util, and Sluice / PyTorch (median over rounds of the paired ratio)")
    print("%-16s %-16s %10s %6s %10s %6s %16s" % ("pytorch", "sluice", "pytorch s", "util", "sluice s", "util",
                                                "sluice/pytorch"))
    best = {side: {} for side in ("peer", "sluice")}
    for peer, mine in pairs:
        a, b = t.get((p, "peer", peer), {}), t.get((p, "sluice", mine), {})
        for side, runs in (("peer", a), ("sluice", b)):
            for r, sec in runs.items():
                best[side][r] = min(best[side].get(r, sec), sec)
        ratio = "-"
        if a and b:
            rs = [b[r] / a[r] for r in sorted(a) if r in b]
            ratio = "%.3fx (%.3f-%.3f)" % (med(rs), min(rs), max(rs))
        print("%-16s %-16s %10s %6s %10s %6s %16s" % (
            peer, mine, "%.4f" % med(a.values()) if a else "-", util(med(a.values())) if a else "-",
            "%.4f" % med(b.values()) if b else "-", util(med(b.values())) if b else "-", ratio))
    a, b = best["peer"], best["sluice"]
    rs = [b[r] / a[r] for r in sorted(a)]
    print("%-16s %-16s %10.4f %6s %10.4f %6s %16s" % ("best", "best", med(a.values()), util(med(a.values())),
                                                    med(b.values()), util(med(b.values())),
                                                    "%.3fx (%.3f-%.3f)" % (med(rs), min(rs), max(rs))))
print("\nsluice/pytorch: below 1, Sluice is faster; (range over rounds). best: each side's fastest schedule of the round."
      "\nutil: 3 x the forward's matrix-product FLOP per step over the step time, over the FLOP/s the ranks' matrix"
      " products reach together (measured in each Sluice run; PyTorch's against their median)")
PY
