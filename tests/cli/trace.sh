#!/usr/bin/env bash
# The timeline trace (logging.trace / --trace) of a 2-stage 1F1B job with 4
# micro-batches: trace.json is valid JSON with both ranks; per rank and traced
# step, the forward/backward events come in 1F1B's order (written out here
# from the textbook rule: stage s runs p - 1 - s warm-up forwards, then
# alternates one forward and one backward, then drains the backwards); no two
# compute events of a rank overlap; every event lies inside its step. The run
# ends with each stage's measured busy time and bubble next to the plan's.
source "$(dirname "$0")/lib.sh"
command -v python3 >/dev/null || fail "python3 is needed (scripts/setup.sh installs it)"
"$SLUICE" train "$ROOT/configs/quickstart.yaml" --set training.steps=6 --set logging.interval=6 --set model.layers=2 \
  --set model.embd=64 --set model.heads=4 --set model.block_size=32 --set pipeline.stages=2 --set pipeline.microbatches=4 \
  --set pipeline.schedule=1f1b --set job.output_dir="$TMP/run" --set "logging.trace_steps=[3, 4]" --trace \
  >"$TMP/run.log" 2>&1 || { cat "$TMP/run.log"; fail "training with --trace"; }
grep -q "trace: $TMP/run/trace.json (steps 3, 4;" "$TMP/run.log" || fail "no trace line"
! ls "$TMP/run"/trace.rank_* >/dev/null 2>&1 || fail "per-rank parts left behind"
# The measured vs predicted table: both stages, bubbles in [0, 100)%.
grep -A4 "timeline: measured over 2 traced steps (pipeline window" "$TMP/run.log" >"$TMP/summary" || fail "no timeline summary"
for s in 0 1; do
  grep -qE "^ +$s +[0-9.]+ +[0-9.-]+ +[0-9]{1,2}\.[0-9]% +[0-9.]+ +[0-9.-]+%$" "$TMP/summary" || { cat "$TMP/summary"; fail "no measured vs predicted row for stage $s"; }
done
grep -qE "bubble \(all stages\) [0-9.]+%, predicted [0-9.]+%" "$TMP/summary" || { cat "$TMP/summary"; fail "no overall bubble"; }
cat "$TMP/summary"
python3 - "$TMP/run/trace.json" <<'PY' || fail "trace.json"
import json, sys
p, m, steps = 2, 4, [3, 4]
events = json.load(open(sys.argv[1]))["traceEvents"]
names = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "process_name"}
assert names == {0: "stage 0 / replica 0", 1: "stage 1 / replica 0"}, names
def one_f_one_b(s):
    warm = min(p - 1 - s, m)
    order = [f"F{i}" for i in range(warm)]
    f, b = warm, 0
    while b < m:
        if f < m:
            order.append(f"F{f}"); f += 1
        order.append(f"B{b}"); b += 1
    return order
for rank in (0, 1):
    mine = [e for e in events if e.get("ph") == "X" and e["pid"] == rank]
    for step in steps:
        span = [e for e in mine if e["cat"] == "step" and e["args"]["step"] == step]
        assert len(span) == 1, (rank, step, span)
        begin, end = span[0]["ts"], span[0]["ts"] + span[0]["dur"]
        inside = [e for e in mine if e["args"]["step"] == step and e["cat"] != "step"]
        for e in inside:
            assert begin <= e["ts"] and e["ts"] + e["dur"] <= end + 1e-3, (rank, step, e, begin, end)
        compute = sorted((e for e in inside if e["cat"] == "compute" and e["name"] != "optimizer"), key=lambda e: e["ts"])
        got = [e["name"] for e in compute]
        assert got == one_f_one_b(rank), (rank, step, got, one_f_one_b(rank))
        allc = sorted((e for e in inside if e["cat"] == "compute"), key=lambda e: e["ts"])
        for a, b in zip(allc, allc[1:]):
            assert a["ts"] + a["dur"] <= b["ts"] + 1e-3, ("overlap", rank, a, b)
        assert any(e["name"] == "optimizer" for e in inside), (rank, step)
        assert any(e["cat"] == "recv" for e in inside) and any(e["cat"] == "send" for e in inside), (rank, step)
    assert {e["args"]["step"] for e in mine} == set(steps), (rank, {e["args"]["step"] for e in mine})
print("ok: trace.json: 2 ranks, steps 3 and 4 in 1F1B order, no overlapping compute, every event inside its step")
PY
