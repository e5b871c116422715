#!/usr/bin/env bash
# The README's run command: configs/quickstart.yaml on 2 ranks. The last
# logged loss must be at least 30% below the first, and the run outputs exist.
source "$(dirname "$0")/lib.sh"
# SIGUSR2 once step 50 is logged: the ranks print their metrics report and go on.
"$SLUICE" train "$ROOT/configs/quickstart.yaml" --set job.output_dir="$TMP/q" 2>&1 | tee "$TMP/q.log" |
  while IFS= read -r line; do
    echo "$line"
    if [[ $line == *"step 50/"* ]]; then pkill -USR2 -f "sluice train $ROOT/configs/quickstart.yaml --set job.output_dir=$TMP/q"; fi
  done
[ "${PIPESTATUS[0]}" -eq 0 ] || fail "quickstart failed"
first=$(losses "$TMP/q/metrics.jsonl" | sed -n 1p)
last=$(losses "$TMP/q/metrics.jsonl" | tail -1)
steps=$(losses "$TMP/q/metrics.jsonl" | wc -l)
echo "quickstart: $steps steps, loss $first -> $last"
awk -v f="$first" -v l="$last" 'BEGIN { exit !(l <= 0.7 * f) }' || fail "loss fell less than 30%: $first -> $last"
for f in config.resolved.yaml logs/rank_0.log logs/rank_1.log; do [ -s "$TMP/q/$f" ] || fail "missing $f"; done
for k in step loss lr step_time_s samples_per_s tokens_per_s; do
  grep -q "\"$k\"" "$TMP/q/metrics.jsonl" || fail "metrics.jsonl lacks $k"
done
# The metrics report, asked for mid-run (SIGUSR2) and at the end, on both ranks: no host syncs on non-log steps.
for r in 0 1; do
  [ "$(grep -c "^\[rank $r\] metrics report" "$TMP/q.log")" -eq 2 ] || { grep -A5 "metrics report" "$TMP/q.log"; fail "rank $r: expected 2 metrics reports (SIGUSR2 and the end)"; }
  [ "$(grep -A4 "^\[rank $r\] metrics report (stage $r, replica 0; " "$TMP/q.log" |
    grep -cE "host syncs \(reads of training tensors\) per step: 0\.00 on [1-9][0-9]* non-log steps \(at most 0\)")" -eq 2 ] ||
    { grep -A5 "metrics report" "$TMP/q.log"; fail "rank $r: host syncs on non-log steps"; }
done
# Utilisation: the model's work is its matrix products' FLOPs, 3 x the forward's:
# L (24 B T d^2 + 4 B T^2 d) + 2 B T d V with L 4, B 16, T 128, d 192, V 256 = 8.254 GFLOP.
grep -E "^\[rank 0\] utilisation: 24\.76 GFLOP of model work per step .* = [0-9]+% of the [0-9.]+ GFLOP/s" "$TMP/q.log" ||
  { grep utilisation "$TMP/q.log"; fail "no utilisation line, or not 3 x 8.254 GFLOP per step"; }
grep -A5 "^\[rank 1\] metrics report (stage 1, replica 0; 250 steps)" "$TMP/q.log"
echo "ok: quickstart trains"
