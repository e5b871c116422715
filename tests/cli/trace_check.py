"""Checks a trace.json written by `sluice train --trace` (tests/cli/trace.sh).

Usage: trace_check.py TRACE STAGES MICROBATCHES KIND [RANKS], KIND one of
  plain           no memory plan, no DistAdam: no io / swap / recompute / collective events; the
                  device trace's ops (logging.trace_ops, on by default): every forward and
                  backward holds ops, every forward a matrix product, every op lies inside its step
  swap            a plan that swaps: io events only on ranks in RANKS (comma-separated: the ranks
                  whose stage swaps), and swap writes and reads on at least one of them (a write
                  the backward overtakes is cancelled, so a rank may have none in two steps); run
                  with logging.trace_ops false: no op events
  recompute_dist  full_recompute and DistAdam: recomputes, reduce-scatter and all-gather waits
For every rank and traced step (3 and 4): the forward/backward events come in
1F1B's order (written out here from the textbook rule: stage s runs p - 1 - s
warm-up forwards, then alternates one forward and one backward, then drains
the backwards); no two top-level compute events overlap; every event lies
inside its step; a recompute lies inside the backward of its micro-batch, a
swap stall inside a forward or backward, a collective wait inside the
optimizer step.
"""
import json, sys
path, p, m = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
steps, kind = [3, 4], sys.argv[4]  # kind: plain | swap | recompute_dist
swapping = {int(r) for r in sys.argv[5].split(",")} if len(sys.argv) > 5 and sys.argv[5] else set()
io_seen = set()  # (rank, "out" | "in")
events = json.load(open(path))["traceEvents"]
names = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "process_name"}
ranks = len(names)
stage_of = {pid: int(n.split()[1]) for pid, n in names.items()}
assert sorted(names.values()) == sorted(f"stage {s} / replica {r}" for s in range(p) for r in range(ranks // p)), names
def one_f_one_b(s):
    warm = min(p - 1 - s, m)
    order = [f"F{i}" for i in range(warm)]
    f, b = warm, 0
    while b < m:
        if f < m:
            order.append(f"F{f}"); f += 1
        order.append(f"B{b}"); b += 1
    return order
def within(e, outer, slack=1e-3):
    return outer["ts"] - slack <= e["ts"] and e["ts"] + e["dur"] <= outer["ts"] + outer["dur"] + slack
# The profiler's clock is converted onto the trace's: its events get 20 us of slack.
OP_SLACK = 20.0
MATMUL = {"aten::mm", "aten::addmm", "aten::matmul", "aten::linear", "aten::bmm"}
for rank, s in stage_of.items():
    mine = [e for e in events if e.get("ph") == "X" and e["pid"] == rank]
    for step in steps:
        span = [e for e in mine if e["cat"] == "step" and e["args"]["step"] == step]
        assert len(span) == 1, (rank, step, span)
        inside = [e for e in mine if e["args"]["step"] == step and e["cat"] not in ("step", "op")]
        ops = [e for e in mine if e["args"]["step"] == step and e["cat"] == "op"]
        for e in inside:
            assert within(e, span[0]), (rank, step, e, span[0])
        for e in ops:
            assert within(e, span[0], OP_SLACK), ("op outside its step", rank, step, e, span[0])
        top = sorted((e for e in inside if e["cat"] == "compute"), key=lambda e: e["ts"])
        got = [e["name"] for e in top if e["name"] != "optimizer"]
        assert got == one_f_one_b(s), (rank, step, got, one_f_one_b(s))
        for a, b in zip(top, top[1:]):
            assert a["ts"] + a["dur"] <= b["ts"] + 1e-3, ("overlap", rank, a, b)
        optimizer = [e for e in top if e["name"] == "optimizer"]
        assert len(optimizer) == 1, (rank, step)
        assert any(e["cat"] == "recv" for e in inside) and any(e["cat"] == "send" for e in inside), (rank, step)
        # Nested events: a recompute inside the backward of its micro-batch; a swap stall inside a forward or
        # backward; a collective wait inside the optimizer step.
        for e in inside:
            if e["cat"] == "recompute":
                assert any(t["name"] == f"B{e['args']['micro_batch']}" and within(e, t) for t in top), (rank, e)
            if e["cat"] == "swap":
                assert any(t["name"][0] in "FB" and within(e, t) for t in top), (rank, e)
            if e["cat"] == "collective":
                assert within(e, optimizer[0]), (rank, e, optimizer[0])
            if e["cat"] == "io":
                assert 0 <= e["args"].get("micro_batch", 0) < m, (rank, e)
        cats = {e["cat"] for e in inside}
        if kind == "swap":
            assert swapping, "no rank swaps"
            io = [e["name"] for e in inside if e["cat"] == "io"]
            assert rank in swapping or not io, (rank, step, "io events on a rank that does not swap", io[:3])
            io_seen.update((rank, n.split(" ")[1]) for n in io)
        if kind == "recompute_dist":
            assert sum(e["cat"] == "recompute" for e in inside) >= m, (rank, step)
            assert any(e["name"].startswith("wait reduce-scatter") for e in inside), (rank, step)
            assert any(e["name"].startswith("wait all-gather") for e in inside), (rank, step)
        if kind == "plain":
            assert not cats & {"io", "swap", "recompute", "collective"}, (rank, step, cats)
            assert ops, (rank, step, "no op events (logging.trace_ops)")
            for t in top:
                if t["name"][0] not in "FB":
                    continue
                held = [o["name"] for o in ops if within(o, t, OP_SLACK)]
                assert held, ("no ops inside", rank, step, t)
                assert t["name"][0] == "B" or MATMUL & set(held), ("no matrix product inside", rank, step, t, held[:20])
        if kind == "swap":
            assert not ops, (rank, step, "op events with logging.trace_ops false", ops[:3])
    assert {e["args"]["step"] for e in mine} == set(steps), (rank, {e["args"]["step"] for e in mine})
if kind == "swap":
    for what in ("out", "in"):
        assert any(w == what for _, w in io_seen), f"no swap {what} events on ranks {sorted(swapping)}"
print(f"ok: {path}: {ranks} ranks, steps 3 and 4 in 1F1B order, no overlapping compute, every event inside its step ({kind})")
