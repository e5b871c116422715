#!/usr/bin/env bash
# `sluice profile` (2 ranks, self-launched: one entry per graph node, p2p
# measured; a missing -o is a usage error) -> `sluice partition` (four
# methods) -> `sluice plan show` -> `sluice train` with pipeline.plan, whose
# losses must equal 1-stage training; a plan that swaps and recomputes trains
# to the same losses; and the errors: a plan for another model, a truncated
# plan, a budget too small (names the smallest that fits), a profile of
# another model.
source "$(dirname "$0")/lib.sh"
CFG="$ROOT/configs/quickstart.yaml"
small=("${SMALL[@]}" --set training.steps=8 --set logging.interval=4)
# The profile: shared with other scripts (lib.sh); its summary is beside it.
PROF=$(shared_profile small)
cp "$PROF" "$TMP/prof.pb"
[ -s "$TMP/prof.pb" ] || fail "no profile written"
nodes=$("$SLUICE" graph "$CFG" "${small[@]}" | tail -1 | awk '{print $1}')
grep -q "^profile of graph [0-9a-f]*: $nodes nodes" "${PROF%.pb}.log" || { cat "${PROF%.pb}.log"; fail "summary does not list $nodes nodes"; }
grep -q "machine: p2p [1-9]" "${PROF%.pb}.log" || { cat "${PROF%.pb}.log"; fail "p2p bandwidth not measured"; }
expect_failure missing_output "profile needs -o FILE" "$TMP/none" -- "$SLUICE" profile "$CFG"
echo "ok: profile of $nodes nodes"

for method in profile uniform parameters layers; do
  "$SLUICE" partition "$CFG" "${small[@]}" --profile "$TMP/prof.pb" -o "$TMP/$method.pb" --method "$method" \
    >"$TMP/$method.log" 2>&1 || { cat "$TMP/$method.log"; fail "partition --method $method"; }
  grep -q "method $method" "$TMP/$method.log" || fail "$method: table lacks the method"
done
"$SLUICE" plan show "$TMP/profile.pb" >"$TMP/show.log" || fail "plan show"
grep -qE "^ +0 +\[0, [0-9]+\)" "$TMP/show.log" && grep -qE "^ +1 +\[[0-9]+, [0-9]+\)" "$TMP/show.log" &&
  grep -q "predicted step time" "$TMP/show.log" || { cat "$TMP/show.log"; fail "plan show lacks stage rows"; }
echo "ok: profile, partition (4 methods), plan show"

# The plan drives training, and the losses are those of one stage.
"$SLUICE" train "$CFG" "${small[@]}" --set pipeline.stages=1 --set job.output_dir="$TMP/one" >/dev/null 2>&1 || fail "train 1 stage"
"$SLUICE" train "$CFG" "${small[@]}" --set pipeline.stages=2 --set pipeline.plan="$TMP/profile.pb" \
  --set job.output_dir="$TMP/planned" >"$TMP/planned.log" 2>&1 || { cat "$TMP/planned.log"; fail "train with plan"; }
cut=$(awk '/^ +1 +\[/ {gsub(/[\[,]/, "", $2); print $2}' "$TMP/show.log")
grep -q "cuts at \[$cut\]" "$TMP/planned/logs/rank_0.log" || fail "training did not use the plan's cut $cut"
[ -s "$TMP/planned/plan.pb" ] || fail "the plan used is not in the output folder"
paste <(losses "$TMP/one/metrics.jsonl") <(losses "$TMP/planned/metrics.jsonl") | awk '
  { d = $1 - $2; if (d < 0) d = -d; r = d / $1; if (r > max) max = r; if (r > 1e-5) bad = 1 }
  END { printf "plan (cut %s) vs 1 stage: %d steps, max relative loss difference %g\n", cut, NR, max; exit bad || NR != 8 }' \
  cut="$cut" || fail "losses with the plan differ from 1 stage"

# Errors: non-zero exit, a message naming the fix, nothing written.
"$SLUICE" partition "$CFG" "${small[@]}" --set model.layers=3 --profile "$TMP/prof.pb" -o "$TMP/x.pb" >"$TMP/other_profile.log" 2>&1 &&
  fail "a profile of another model was accepted"
grep -q "profile this config again" "$TMP/other_profile.log" || fail "other-profile message"
# A plan for another model: the 2-layer plan given to the 3-layer model.
expect_failure other_model "was made for another model or batch shape" "$TMP/out_other" -- \
  "$SLUICE" train "$CFG" "${small[@]}" --set model.layers=3 --set pipeline.stages=2 --set pipeline.plan="$TMP/profile.pb" \
  --set job.output_dir="$TMP/out_other"
head -c 100 "$TMP/profile.pb" >"$TMP/truncated.pb"
expect_failure truncated_plan "is truncated or not a Sluice plan" "$TMP/out_trunc" -- \
  "$SLUICE" train "$CFG" "${small[@]}" --set pipeline.stages=2 --set pipeline.plan="$TMP/truncated.pb" --set job.output_dir="$TMP/out_trunc"
expect_failure truncated_show "is truncated or not a Sluice plan" "$TMP/none" -- "$SLUICE" plan show "$TMP/truncated.pb"
expect_failure budget_too_small "the smallest budget that fits is" "$TMP/tiny.pb" -- \
  "$SLUICE" partition "$CFG" "${small[@]}" --profile "$TMP/prof.pb" -o "$TMP/tiny.pb" --budget-mb 0.05
needed=$(grep -o "set memory.budget_mb to at least [0-9.]*" "$TMP/budget_too_small.log" | awk '{print $NF}')
"$SLUICE" partition "$CFG" "${small[@]}" --profile "$TMP/prof.pb" -o "$TMP/fits.pb" --budget-mb "$needed" >"$TMP/fits.log" 2>&1 ||
  { cat "$TMP/fits.log"; fail "the named budget $needed MiB does not fit"; }
grep -q "saved storages are not kept" "$TMP/fits.log" || fail "the smallest budget needs no swap/recompute?"
echo "ok: the named budget ($needed MiB) fits, with swap/recompute"
# The same with the cuts given (pipeline.cuts): the minimum named is that of these cuts, and it fits.
cut=$(awk '/^ +1 +\[/ {gsub(/[\[,]/, "", $2); print $2}' "$TMP/show.log")
expect_failure budget_too_small_cuts "with these cuts the smallest budget that fits is" "$TMP/tiny_cuts.pb" -- \
  "$SLUICE" partition "$CFG" "${small[@]}" --set "pipeline.cuts=[$cut]" --profile "$TMP/prof.pb" -o "$TMP/tiny_cuts.pb" \
  --budget-mb 0.05
needed=$(grep -o "set memory.budget_mb to at least [0-9.]*" "$TMP/budget_too_small_cuts.log" | awk '{print $NF}')
"$SLUICE" partition "$CFG" "${small[@]}" --set "pipeline.cuts=[$cut]" --profile "$TMP/prof.pb" -o "$TMP/fits_cuts.pb" \
  --budget-mb "$needed" >"$TMP/fits_cuts.log" 2>&1 || { cat "$TMP/fits_cuts.log"; fail "cuts [$cut]: the named $needed MiB does not fit"; }
below=$(awk -v n="$needed" 'BEGIN { printf "%.2f", n * 0.99 }')
! "$SLUICE" partition "$CFG" "${small[@]}" --set "pipeline.cuts=[$cut]" --profile "$TMP/prof.pb" -o "$TMP/below.pb" \
  --budget-mb "$below" >/dev/null 2>&1 || fail "cuts [$cut]: $below MiB (1% below the named minimum) fits too: not a minimum"
echo "ok: with cuts [$cut] the named minimum ($needed MiB) fits and 1% less does not"
# That plan trains (swap and recompute executed) to the losses of one stage.
"$SLUICE" train "$CFG" "${small[@]}" --set pipeline.stages=2 --set pipeline.plan="$TMP/fits.pb" \
  --set job.output_dir="$TMP/out_frees" >"$TMP/frees.log" 2>&1 || { cat "$TMP/frees.log"; fail "train with a plan that frees tensors"; }
grep -q "memory plan: swapped\|memory plan: .* recomputed" "$TMP/out_frees/logs/rank_0.log" "$TMP/out_frees/logs/rank_1.log" ||
  fail "no stage reports its memory plan"
paste <(losses "$TMP/one/metrics.jsonl") <(losses "$TMP/out_frees/metrics.jsonl") | awk '
  { d = $1 - $2; if (d < 0) d = -d; r = d / $1; if (r > max) max = r; if (r > 1e-5) bad = 1 }
  END { printf "swap/recompute plan vs 1 stage: %d steps, max relative loss difference %g\n", NR, max; exit bad || NR != 8 }' ||
  fail "losses with swap/recompute differ from 1 stage"
expect_failure missing_plan "does not exist" "$TMP/out_missing" -- \
  "$SLUICE" train "$CFG" "${small[@]}" --set pipeline.stages=2 --set pipeline.plan="$TMP/nope.pb" --set job.output_dir="$TMP/out_missing"
expect_failure bad_method "pipeline.partition.method: unknown partition method 'fastest' (expected profile | uniform | parameters | layers)" "$TMP/y.pb" -- \
  "$SLUICE" partition "$CFG" --profile "$TMP/prof.pb" -o "$TMP/y.pb" --method fastest
echo "ok: partition and plan errors"
