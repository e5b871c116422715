#!/usr/bin/env bash
# The timeline trace (logging.trace / --trace) of a 2-stage 1F1B job with 4
# micro-batches: trace.json is valid JSON with both ranks; per rank and traced
# step, the forward/backward events come in 1F1B's order (written out here
# from the textbook rule: stage s runs p - 1 - s warm-up forwards, then
# alternates one forward and one backward, then drains the backwards); no two
# compute events of a rank overlap; every event lies inside its step. The run
# ends with each stage's measured busy time and bubble next to the plan's.
source "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3  # Debian's, with the packages setup.sh installs
[ -x "$PY" ] || fail "python3 is needed (scripts/setup.sh installs it)"
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
"$PY" - "$TMP/run/trace.json" <<'PY' || fail "trace.json"
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

# The picture: `sluice trace show` -> SVG -> PNG by rsvg-convert (librsvg, independent of Sluice), decoded
# here: the expected size, and not blank (many pixels neither white nor the row background, many colours).
"$SLUICE" trace show "$TMP/run/trace.json" -o "$TMP/timeline.svg" >"$TMP/show.log" 2>&1 || { cat "$TMP/show.log"; fail "trace show"; }
grep -q "wrote $TMP/timeline.svg (1200 x 176)" "$TMP/show.log" || { cat "$TMP/show.log"; fail "trace show: size"; }
grep -q "Sluice timeline: 2 ranks, steps 3, 4; step time [0-9.]* ms; bubble [0-9.]*%" "$TMP/timeline.svg" || fail "the SVG lacks its title"
command -v rsvg-convert >/dev/null || fail "rsvg-convert is needed (scripts/setup.sh installs librsvg2-bin)"
rsvg-convert -o "$TMP/timeline.png" "$TMP/timeline.svg" || fail "rsvg-convert could not render the SVG"
"$PY" - "$TMP/timeline.png" <<'PY' || fail "timeline.png"
import struct, sys, zlib
data = open(sys.argv[1], "rb").read()
assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
pos, idat, ihdr = 8, b"", None
while pos < len(data):
    n, kind = struct.unpack(">I4s", data[pos:pos + 8])
    body = data[pos + 8:pos + 8 + n]
    if kind == b"IHDR": ihdr = struct.unpack(">IIBBBBB", body)
    if kind == b"IDAT": idat += body
    pos += 12 + n
w, h, depth, ctype = ihdr[:4]
assert (w, h) == (1200, 176), (w, h)
assert depth == 8 and ctype in (2, 6), (depth, ctype)
bpp = 4 if ctype == 6 else 3
raw, stride, prev, rows = zlib.decompress(idat), w * bpp, bytearray(w * bpp), []
for y in range(h):
    f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
    for i in range(stride):
        a = line[i - bpp] if i >= bpp else 0
        b, c = prev[i], prev[i - bpp] if i >= bpp else 0
        if f == 1: line[i] = (line[i] + a) & 255
        elif f == 2: line[i] = (line[i] + b) & 255
        elif f == 3: line[i] = (line[i] + (a + b) // 2) & 255
        elif f == 4:
            p = a + b - c; pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
    rows.append(line); prev = line
pixels = [tuple(r[i:i + 3]) for r in rows for i in range(0, stride, bpp)]
inked = sum(1 for p in pixels if p not in ((255, 255, 255), (244, 244, 244)))
colours = len(set(pixels))
assert inked > 0.10 * len(pixels), f"only {inked} of {len(pixels)} pixels drawn"
assert colours > 50, f"only {colours} colours"
print(f"ok: timeline.png {w} x {h}: {100 * inked / len(pixels):.0f}% of the pixels drawn, {colours} colours")
PY
echo '{"a": 1}' >"$TMP/not_a_trace.json"
expect_failure not_a_trace "is not a trace (no traceEvents list" "$TMP/bad.svg" -- \
  "$SLUICE" trace show "$TMP/not_a_trace.json" -o "$TMP/bad.svg"
