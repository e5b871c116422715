#!/usr/bin/env bash
# The README's run command: configs/quickstart.yaml on 2 ranks. The last
# logged loss must be at least 30% below the first, and the run outputs exist.
source "$(dirname "$0")/lib.sh"
"$SLUICE" train "$ROOT/configs/quickstart.yaml" --set job.output_dir="$TMP/q"
first=$(losses "$TMP/q/metrics.jsonl" | head -1)
last=$(losses "$TMP/q/metrics.jsonl" | tail -1)
steps=$(losses "$TMP/q/metrics.jsonl" | wc -l)
echo "quickstart: $steps steps, loss $first -> $last"
awk -v f="$first" -v l="$last" 'BEGIN { exit !(l <= 0.7 * f) }' || fail "loss fell less than 30%: $first -> $last"
for f in config.resolved.yaml logs/rank_0.log logs/rank_1.log; do [ -s "$TMP/q/$f" ] || fail "missing $f"; done
for k in step loss lr step_time_s samples_per_s tokens_per_s; do
  grep -q "\"$k\"" "$TMP/q/metrics.jsonl" || fail "metrics.jsonl lacks $k"
done
echo "ok: quickstart trains"
