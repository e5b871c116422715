#!/usr/bin/env bash
# `sluice train` with pipeline.stages=1 and =2 (same seed and global batch)
# write the same per-step losses to metrics.jsonl, to a relative 1e-5
# (compiled graphs of different cuts round differently; see EquivalenceTest).
source "$(dirname "$0")/lib.sh"
small=(--set training.steps=10 --set logging.interval=5 --set model.layers=2 --set model.embd=64
       --set model.heads=4 --set model.block_size=32)
"$SLUICE" train "$ROOT/configs/quickstart.yaml" "${small[@]}" --set pipeline.stages=1 --set job.output_dir="$TMP/one"
"$SLUICE" train "$ROOT/configs/quickstart.yaml" "${small[@]}" --set pipeline.stages=2 --set job.output_dir="$TMP/two"
n1=$(losses "$TMP/one/metrics.jsonl" | wc -l)
n2=$(losses "$TMP/two/metrics.jsonl" | wc -l)
[ "$n1" -eq 10 ] && [ "$n2" -eq 10 ] || fail "expected 10 steps each, got $n1 and $n2"
paste <(losses "$TMP/one/metrics.jsonl") <(losses "$TMP/two/metrics.jsonl") | awk '
  { d = $1 - $2; if (d < 0) d = -d; r = d / ($1 < 0 ? -$1 : $1); if (r > max) max = r;
    if (r > 1e-5) { printf "step %d: 1 stage %s vs 2 stages %s (relative %g)\n", NR - 1, $1, $2, r; bad = 1 } }
  END { printf "max relative difference over %d steps: %g\n", NR, max; exit bad }' || fail "losses differ"
grep -q '"tokens_per_s"' "$TMP/two/metrics.jsonl" || fail "metrics.jsonl lacks tokens_per_s"
echo "ok: 1-stage and 2-stage losses agree"
