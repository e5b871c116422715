#!/usr/bin/env bash
# `sluice train` with 1 stage (AdamW), 2 stages (AdamW) and 2 stages x 2
# data-parallel replicas (DistAdam, hooks; 4 ranks, oversubscribed), same seed
# and global batch, write the same per-step losses to metrics.jsonl, to a
# relative 1e-5: compiled graphs of different cuts, and gradient averages over
# replicas, round differently (see EquivalenceTest and DistAdamTest).
source "$(dirname "$0")/lib.sh"
small=(--set training.steps=10 --set logging.interval=5 --set model.layers=2 --set model.embd=64
       --set model.heads=4 --set model.block_size=32)
train() { local name=$1; shift; "$SLUICE" train "$ROOT/configs/quickstart.yaml" "${small[@]}" --set job.output_dir="$TMP/$name" "$@"; }
train one --set pipeline.stages=1
train two --set pipeline.stages=2
train two_by_two --set pipeline.stages=2 --set pipeline.data_parallel=2 --set pipeline.microbatches=2 \
  --set optimizer.name=dist_adam --set optimizer.dist_adam.mode=hooks

compare() {  # reference run, other run
  local n1 n2
  n1=$(losses "$TMP/$1/metrics.jsonl" | wc -l)
  n2=$(losses "$TMP/$2/metrics.jsonl" | wc -l)
  [ "$n1" -eq 10 ] && [ "$n2" -eq 10 ] || fail "expected 10 steps each, got $n1 ($1) and $n2 ($2)"
  paste <(losses "$TMP/$1/metrics.jsonl") <(losses "$TMP/$2/metrics.jsonl") | awk -v a="$1" -v b="$2" '
    { d = $1 - $2; if (d < 0) d = -d; r = d / ($1 < 0 ? -$1 : $1); if (r > max) max = r;
      if (r > 1e-5) { printf "step %d: %s %s vs %s %s (relative %g)\n", NR - 1, a, $1, b, $2, r; bad = 1 } }
    END { printf "%s vs %s: max relative difference over %d steps: %g\n", a, b, NR, max; exit bad }' ||
    fail "losses of $1 and $2 differ"
}
compare one two
compare one two_by_two
grep -q '"tokens_per_s"' "$TMP/two/metrics.jsonl" || fail "metrics.jsonl lacks tokens_per_s"
grep -q "DistAdam (hooks) over 2 ranks" "$TMP/two_by_two/logs/rank_0.log" || fail "the 2x2 run did not use DistAdam"
echo "ok: 1-stage, 2-stage and 2x2 losses agree"
