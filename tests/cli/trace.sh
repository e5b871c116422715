#!/usr/bin/env bash
# The timeline trace (logging.trace / --trace) of a 2-stage 1F1B job with 4
# micro-batches: trace.json is valid JSON with both ranks, and trace_check.py
# finds per rank and traced step the 1F1B order, no overlapping compute and
# every event inside its step, and LibTorch's profiler's ops inside each
# forward and backward (logging.trace_ops), with each rank's device trace
# line. The run ends with each stage's measured busy
# time and bubble next to the plan's. Then the same checks on a run whose
# memory plan swaps (swap writes and reads on the io stream) and on 2 stages
# x 2 replicas with full recompute and DistAdam (recomputes inside their
# backward, reduce-scatter / all-gather waits inside the optimizer step), and
# the SVG drawn from a trace (rendered by rsvg-convert).
source "$(dirname "$0")/lib.sh"
[ -x "$PY" ] || fail "$PY is needed (scripts/setup.sh makes it)"
CFG="$ROOT/configs/quickstart.yaml"
small=("${SMALL[@]}" --set pipeline.stages=2 --set pipeline.microbatches=4 --set pipeline.schedule=1f1b)
traced=(--set training.steps=6 --set logging.interval=6 --set "logging.trace_steps=[3, 4]" --trace)
# Every run plans from one shared profile (lib.sh shared_profile), as at start-up.
cp "$(shared_profile small)" "$TMP/prof.pb"
"$SLUICE" train "$CFG" "${small[@]}" "${traced[@]}" --set pipeline.profile="$TMP/prof.pb" --set job.output_dir="$TMP/run" \
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
"$PY" "$ROOT/tests/cli/trace_check.py" "$TMP/run/trace.json" 2 4 plain || fail "trace.json"
# The device trace (logging.trace_ops): each rank's line per traced step, ops with their self times, no kernels on CPU.
for s in 0 1; do for step in 3 4; do
  grep -qE "stage $s device trace, step $step \([0-9.]+ ms\): [0-9]+ host ops; top self time: aten::[a-z_]+ [0-9.]+ ms.*; no device kernels \(host-only run\)" "$TMP/run.log" ||
    { grep "device trace" "$TMP/run.log"; fail "no device trace line for stage $s, step $step"; }
done; done

# A plan that swaps: at exactly the partitioner's smallest budget (it names it
# when asked for less) it must free the most, and does so by swapping and
# recomputing; 10% above it, the choice between the two follows the
# profile's timings (recompute only, in some).
smallest=$({ "$SLUICE" partition "$CFG" "${small[@]}" --profile "$TMP/prof.pb" -o "$TMP/unused.pb" --budget-mb 0.5 2>&1 || true; } |
  grep -o "the smallest budget that fits is [0-9.]* MiB" | awk '{ print $7 }')
[ -n "$smallest" ] || fail "partition does not name the smallest budget that fits"
budget=$smallest
"$SLUICE" partition "$CFG" "${small[@]}" --profile "$TMP/prof.pb" -o "$TMP/swap.pb" --budget-mb "$budget" \
  >"$TMP/swap.plan.log" 2>&1 || { cat "$TMP/swap.plan.log"; fail "partition at $budget MiB"; }
"$SLUICE" train "$CFG" "${small[@]}" "${traced[@]}" --set pipeline.plan="$TMP/swap.pb" --set job.output_dir="$TMP/swap" \
  --set logging.trace_ops=false \
  >"$TMP/swap.log" 2>&1 || { cat "$TMP/swap.log"; fail "training a swapping plan with --trace"; }
grep -q "storages swapped to file" "$TMP/swap.log" || { cat "$TMP/swap.log"; fail "the plan at $budget MiB does not swap"; }
# The ranks whose stage swaps (a plan near the smallest budget may swap on one stage only).
swapping=$(grep -o "\[rank [0-9]*\] stage [0-9]* memory plan: [1-9][0-9]* storages swapped" "$TMP/swap.log" |
  awk '{ gsub(/\]/, "", $2); printf "%s%s", (n++ ? "," : ""), $2 }')
"$PY" "$ROOT/tests/cli/trace_check.py" "$TMP/swap/trace.json" 2 4 swap "$swapping" || {
  cat "$TMP/swap.plan.log"; grep -E "memory plan|swap" "$TMP/swap.log"; fail "trace.json of the swapping run (swapping ranks: '$swapping')"; }
# Full recompute and DistAdam on 2 stages x 2 replicas (the profile's micro-batch shape: twice the global batch).
OMPI_MCA_mpi_yield_when_idle=1 "$SLUICE" train "$CFG" "${small[@]}" "${traced[@]}" --set pipeline.data_parallel=2 \
  --set optimizer.name=dist_adam --set training.global_batch_size=32 --set memory.policy=full_recompute \
  --set pipeline.profile="$TMP/prof.pb" --set job.output_dir="$TMP/dist" >"$TMP/dist.log" 2>&1 ||
  { cat "$TMP/dist.log"; fail "training 2 x 2 with --trace"; }
"$PY" "$ROOT/tests/cli/trace_check.py" "$TMP/dist/trace.json" 2 4 recompute_dist || fail "trace.json of the 2 x 2 run"

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
# The swapping and 2 x 2 traces draw too (4 rows: 56 + 4 x 40 + 40 pixels high), with their recompute,
# swap and collective marks.
for run in swap:176 dist:256; do
  name=${run%%:*} height=${run##*:}
  "$SLUICE" trace show "$TMP/$name/trace.json" -o "$TMP/$name.svg" >"$TMP/$name.show.log" 2>&1 || { cat "$TMP/$name.show.log"; fail "trace show $name"; }
  grep -q "wrote $TMP/$name.svg (1200 x $height)" "$TMP/$name.show.log" || { cat "$TMP/$name.show.log"; fail "trace show $name: size"; }
  rsvg-convert -o "$TMP/$name.png" "$TMP/$name.svg" || fail "rsvg-convert could not render the $name SVG"
done
grep -q 'fill="#2471a3"><title>swap out' "$TMP/swap.svg" || fail "no swap writes drawn"
grep -q 'fill="#e67e22"><title>recompute' "$TMP/dist.svg" || fail "no recomputes drawn"
grep -q 'fill="url(#collective)"><title>wait reduce-scatter' "$TMP/dist.svg" || fail "no collective waits drawn"
echo '{"a": 1}' >"$TMP/not_a_trace.json"
expect_failure not_a_trace "is not a trace (no traceEvents list" "$TMP/bad.svg" -- \
  "$SLUICE" trace show "$TMP/not_a_trace.json" -o "$TMP/bad.svg"
