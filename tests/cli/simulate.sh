#!/usr/bin/env bash
# `sluice simulate`, no rank started. On explicit stage times (F = B = W = 1
# ms, 4 ranks, 8 micro-batches): every schedule in the table, 1F1B at (m + p
# - 1)(F + B + W) = 33 ms and ZB-H1 at m (F + B + W) + (p - 1)(F + B - W) =
# 27 ms; --trace writes a trace that `sluice trace show` draws with one row
# per rank. On the quickstart's profile (shared, dropout on) for 2 and 3
# ranks: a row for every candidate of auto, the fastest in detail with its
# critical path; a device twice as fast (--speed 4 against 2) halves the
# step when messages are free; DistAdam's collectives over 2 replicas come after the pipeline (a
# slower network, a longer step); a memory no plan fits leaves nothing to
# simulate (exit 1, each schedule's reason). Usage errors exit 2 with the
# flag named.
source "$(dirname "$0")/lib.sh"

row() { awk -v s="$1" '$1 == s { print $2; exit }' "$2"; }

"$SLUICE" simulate --stage-times 1,1,1 --ranks 4 --micro-batches 8 --trace "$TMP/sim.json" >"$TMP/times.log"
cat "$TMP/times.log"
for s in 1f1b zb-h1 gpipe interleaved interleaved-zb zbv; do
  grep -E "^$s( x2)? " "$TMP/times.log" >/dev/null || fail "explicit times: no row for $s"
done
[ "$(row 1f1b "$TMP/times.log")" = 33.000 ] || fail "1f1b: want 33.000 ms"
[ "$(row zb-h1 "$TMP/times.log")" = 27.000 ] || fail "zb-h1: want 27.000 ms"
grep -F "critical path" "$TMP/times.log" >/dev/null || fail "no critical path"
# Ranks sharing cores (Note [ranks sharing cores]): on one core GPipe's 96 ms
# of work runs back to back, and more: 4 ranks on 1 core wait as Work::wait
# does on such a host, polling 0.5 ms (holding the core) and then sleeping
# (seeing a message late). With a core per rank the step is the plain
# (m + p - 1) x 3 ms.
for c in 1 2 4; do
  "$SLUICE" simulate --stage-times 1,1,1 --ranks 4 --micro-batches 8 --schedule gpipe --cores $c >"$TMP/cores$c.log"
done
awk -v a="$(row gpipe "$TMP/cores1.log")" 'BEGIN { exit !(a > 96 && a < 100) }' ||
  fail "gpipe on 1 core: want the 96 ms of work and under 4 ms of waits' polls and naps"
[ "$(row gpipe "$TMP/cores4.log")" = 33.000 ] || fail "gpipe on a core per rank: want 33.000 ms"
awk -v a="$(row gpipe "$TMP/cores2.log")" 'BEGIN { exit !(a > 48 && a < 96) }' || fail "gpipe on 2 cores: not between"
grep -F "the ranks sharing 1 cores" "$TMP/cores1.log" >/dev/null || fail "the detail does not say the ranks share a core"
grep -F "a wait polls 0.500 ms, then sleeps" "$TMP/cores1.log" >/dev/null || fail "the detail does not say how waits wait"
"$SLUICE" trace show "$TMP/sim.json" -o "$TMP/sim.svg" | tee "$TMP/show.log"
grep -F "(1200 x 256)" "$TMP/show.log" >/dev/null || fail "the simulated trace is not drawn with 4 rows"

profile=$(shared_profile quickstart_dropout)
Q=("$ROOT/configs/quickstart.yaml" --set model.dropout=0.1 --profile "$profile")
for p in 2 3; do
  "$SLUICE" simulate "${Q[@]}" --ranks "$p" --micro-batches 6 --schedule auto >"$TMP/q$p.log" 2>"$TMP/q$p.err" ||
    { cat "$TMP/q$p.err"; fail "simulate on $p ranks"; }
  echo "== $p ranks"; cat "$TMP/q$p.log"
  for s in 1f1b zb-h1 gpipe; do
    grep -E "^$s " "$TMP/q$p.log" >/dev/null || fail "$p ranks: no row for $s"
  done
  grep -E "^(interleaved|interleaved-zb|zbv) x2 " "$TMP/q$p.log" >/dev/null || fail "$p ranks: no interleaved rows"
  grep -E "^fastest: " "$TMP/q$p.log" >/dev/null || fail "$p ranks: no choice"
  [ "$(grep -cE '^ +[0-9]+ +[0-9.]+ +[0-9.]+ +[0-9.]+%' "$TMP/q$p.log")" -eq "$p" ] || fail "$p ranks: not one row per rank"
  grep -F "sluice: planning zbv for $p ranks x 2 stages" "$TMP/q$p.err" >/dev/null || fail "$p ranks: no progress"
done

# Refill (the profiled machine's caches) is dropped on another device, so
# compare two other devices: twice as fast halves the step when messages are free.
FREE=(--schedule 1f1b --link-gbps 1000 --latency-us 0)
"$SLUICE" simulate "${Q[@]}" "${FREE[@]}" --speed 2 >"$TMP/speed2.log" 2>/dev/null
"$SLUICE" simulate "${Q[@]}" "${FREE[@]}" --speed 4 >"$TMP/speed4.log" 2>/dev/null
ratio=$(awk -v a="$(row 1f1b "$TMP/speed4.log")" -v b="$(row 1f1b "$TMP/speed2.log")" 'BEGIN { print a / b }')
awk -v r="$ratio" 'BEGIN { exit !(r > 0.499 && r < 0.501) }' || fail "--speed 4 against 2, free messages: step ratio $ratio, want 0.5"
echo "ok: --speed 4 halves --speed 2's step with free messages (ratio $ratio)"

# 2 data-parallel replicas with DistAdam: its collectives follow the pipeline, slower on a slower network.
DP=(--schedule 1f1b --micro-batches 2 --set pipeline.data_parallel=2 --set optimizer.name=dist_adam)
"$SLUICE" simulate "${Q[@]}" "${DP[@]}" --collective-gbps 1 >"$TMP/dp_slow.log" 2>/dev/null
"$SLUICE" simulate "${Q[@]}" "${DP[@]}" --collective-gbps 1000 >"$TMP/dp_fast.log" 2>/dev/null
grep -F "DistAdam's collectives" "$TMP/dp_slow.log" >/dev/null || fail "data parallel: no DistAdam collectives"
awk -v a="$(row 1f1b "$TMP/dp_slow.log")" -v b="$(row 1f1b "$TMP/dp_fast.log")" 'BEGIN { exit !(a > b) }' ||
  fail "data parallel: a 1 GB/s network is not slower than 1000 GB/s"
echo "ok: $(grep -oE "DistAdam's collectives [0-9.]+ ms" "$TMP/dp_slow.log" | sed -n 1p) at 1 GB/s"

expect_failure too_small "no schedule could be simulated" "$TMP/none" -- \
  "$SLUICE" simulate "${Q[@]}" --memory-gb 0.001
[ "$FAILURE_RC" -eq 1 ] || fail "too_small: exit $FAILURE_RC, want 1"
grep -F "does not fit" "$TMP/too_small.log" >/dev/null || fail "too_small: no reason"
# usage_error NAME TEXT -- CMD...: exits 2 with TEXT.
usage_error() {
  expect_failure "$1" "$2" "$TMP/none" "${@:3}"
  [ "$FAILURE_RC" -eq 2 ] || fail "$1: exit $FAILURE_RC, want 2"
}
usage_error both "either CONFIG and --profile FILE or --stage-times" -- \
  "$SLUICE" simulate "${Q[@]}" --stage-times 1,1,1
usage_error no_profile "simulate needs --profile FILE" -- "$SLUICE" simulate "$ROOT/configs/quickstart.yaml"
usage_error bad_times "'x' in '1,x,1' is not a time in ms" -- \
  "$SLUICE" simulate --stage-times 1,x,1 --ranks 4 --micro-batches 8
usage_error no_ranks "needs --ranks P" -- "$SLUICE" simulate --stage-times 1,1,1 --micro-batches 8
usage_error bad_schedule "'zz' is no schedule" -- \
  "$SLUICE" simulate --stage-times 1,1,1 --ranks 4 --micro-batches 8 --schedule zz
echo "PASS"
