#!/usr/bin/env bash
# `sluice train` with dropout on, 1 stage (AdamW) against: 2 and 3 stages
# (AdamW), the 2-stage config again (another profile, its own plan), 2 stages x 2
# data-parallel replicas (DistAdam, hooks; 4 ranks, oversubscribed), zb-h1
# (2 stages, and 2 x 2), 2 ranks interleaved (2 stages each), plain and
# zero-bubble (interleaved-zb), zbv (2 stages each in a V), and the schedule `auto` chooses; same seed and
# global batch. Random nodes draw from streams keyed by (seed, step, global
# micro-batch, node) (Note [random streams]), so:
# - pipeline layouts (any cuts, schedule or plan) give bitwise the 1-stage
#   losses: the same ops on the same values in the same order (eager
#   execution node by node; a boundary only moves a value between ranks);
# - data-parallel layouts agree to a relative 1e-6: the replicas' gradients
#   are averaged by a reduction (sum of 2 halves, then / 2) where one
#   process accumulates 4 micro-batches, which rounds differently (~1e-7).
# A 1-stage run without dropout differs (the masks are real). bf16 with
# pipeline.boundary_dtype: compute sends half the bytes and stays within 1e-4.
# The 2-stage run profiles and plans at start-up; every other multi-stage run
# plans the same way from a shared profile of the same graph
# (pipeline.profile; lib.sh shared_profile), so `two_again` is a second plan
# from another profile.
source "$(dirname "$0")/lib.sh"
# Dropout on: every layout draws the same masks (Note [random streams]).
# One thread per rank everywhere: the 1-stage run would otherwise get 2 (cores / ranks), whose
# reductions split differently (a relative ~1e-7 from about step 14 on).
small=(--set training.steps=10 --set logging.interval=5 "${SMALL[@]}" --set model.dropout=0.1 --set job.threads_per_rank=1)
train() { local name=$1; shift; "$SLUICE" train "$ROOT/configs/quickstart.yaml" "${small[@]}" --set job.output_dir="$TMP/$name" "$@"; }
P=(--set pipeline.profile="$(shared_profile small_dropout)")
train one --set pipeline.stages=1
train two --set pipeline.stages=2
# The same config again, planning anew from another profile.
train two_again --set pipeline.stages=2 "${P[@]}"
train three --set pipeline.stages=3 "${P[@]}"
train no_dropout --set pipeline.stages=1 --set model.dropout=0 --set training.steps=1 --set logging.interval=1
train two_by_two --set pipeline.stages=2 --set pipeline.data_parallel=2 --set pipeline.microbatches=2 \
  --set optimizer.name=dist_adam --set optimizer.dist_adam.mode=hooks "${P[@]}"
# Zero-bubble: backward split into input and weight gradients, weight gradients
# deferred (DistAdam's hooks fire in the deferred half).
train zb --set pipeline.stages=2 --set pipeline.schedule=zb-h1 "${P[@]}"
# Interleaved 1F1B: 2 ranks x 2 stages each (the graph cut into 4 pieces).
train inter --set pipeline.stages=2 --set pipeline.schedule=interleaved "${P[@]}"
# Both: interleaved chunks with the split backward.
train inter_zb --set pipeline.stages=2 --set pipeline.schedule=interleaved-zb "${P[@]}"
# ZBV: 2 stages per rank in a V (rank 0 hosts stages 0 and 3, rank 1 stages 1 and 2, sending to itself between them).
train zbv --set pipeline.stages=2 --set pipeline.schedule=zbv "${P[@]}"
train auto --set pipeline.stages=2 --set pipeline.schedule=auto "${P[@]}" 2>&1 | tee "$TMP/auto.out"
train zb_two_by_two --set pipeline.stages=2 --set pipeline.data_parallel=2 --set pipeline.microbatches=2 \
  --set pipeline.schedule=zb-h1 --set optimizer.name=dist_adam --set optimizer.dist_adam.mode=hooks "${P[@]}"
# Gradient clipping: the norm is summed per parameter in one order on every rank (Note [bitwise
# norm], optim/GradClip.h), so 2 stages under zb-h1 clip bitwise like 1 stage.
train clip_one --set pipeline.stages=1 --set optimizer.clip_grad_norm=0.2
train clip_zb --set pipeline.stages=2 --set pipeline.schedule=zb-h1 --set optimizer.clip_grad_norm=0.2 "${P[@]}"
# bf16 (Note [bf16 by capture], models/ModelSetup.h): autocast's casts are graph nodes, so 2
# stages under zb-h1 run the 1-stage ops exactly; 2 x 2 (DistAdam) within 5e-5: the replica average
# rounds a float32 weight 1 ulp apart from one process's sum (~1e-7, as in float32), and the next
# forward's cast to bfloat16 can turn that into 1 bfloat16 ulp (2^-8) of the element, so the loss
# moves ~1e-5 where float32 moves ~1e-7.
PB=(--set pipeline.profile="$(shared_profile small_dropout_bf16)")
train bf16_one --set pipeline.stages=1 --set training.precision=bf16
train bf16_zb --set pipeline.stages=2 --set pipeline.schedule=zb-h1 --set training.precision=bf16 "${PB[@]}"
train bf16_two_by_two --set pipeline.stages=2 --set pipeline.data_parallel=2 --set pipeline.microbatches=2 \
  --set optimizer.name=dist_adam --set optimizer.dist_adam.mode=hooks --set training.precision=bf16 "${PB[@]}"
# pipeline.boundary_dtype: compute: the float32 activations and gradients crossing the cut travel
# in bfloat16 (rounded): half the point-to-point bytes, losses near but not bitwise 1 stage's
# (rounding each crossing value by up to 2^-9 relative moved the loss by 1.7e-5 over 10 steps; 1e-4 allowed).
train bf16_wire --set pipeline.stages=2 --set pipeline.schedule=zb-h1 --set training.precision=bf16 \
  --set pipeline.boundary_dtype=compute "${PB[@]}"

compare_losses "$TMP/one" "$TMP/two" 10 0
compare_losses "$TMP/bf16_one" "$TMP/bf16_zb" 10 0
compare_losses "$TMP/bf16_one" "$TMP/bf16_two_by_two" 10 5e-5
compare_losses "$TMP/bf16_one" "$TMP/bf16_wire" 10 1e-4
[ "$(losses "$TMP/bf16_one/metrics.jsonl" | tail -1)" != "$(losses "$TMP/bf16_wire/metrics.jsonl" | tail -1)" ] ||
  fail "boundary_dtype compute gives bf16_one's losses bitwise: nothing was rounded on the way"
# Point-to-point bytes per step sent by rank 0 (activations; the metrics report, in B/KiB/MiB).
sent() { sed -n 's/.*traffic per step: sent \([0-9.]*\) \([KMG]*i*B\),.*/\1 \2/p' "$TMP/$1/logs/rank_0.log" | tail -1 |
  awk '{ f = $2 == "KiB" ? 1024 : $2 == "MiB" ? 1048576 : $2 == "GiB" ? 1073741824 : 1; print $1 * f }'; }
awk -v wire="$(sent bf16_wire)" -v graph="$(sent bf16_zb)" 'BEGIN {
  r = wire / graph; printf "boundary_dtype compute: rank 0 sends %.0f B per step, graph dtype %.0f B (%.3fx)\n", wire, graph, r
  exit !(graph > 0 && r > 0.45 && r < 0.55) }' || fail "boundary_dtype compute did not halve the bytes rank 0 sends"
[ "$(losses "$TMP/one/metrics.jsonl" | sed -n 1p)" != "$(losses "$TMP/bf16_one/metrics.jsonl" | sed -n 1p)" ] ||
  fail "bf16 gives the float32 loss at step 0: no matrix product ran in bfloat16"
nodes() { sed -n 's/.*graph  *\([0-9]*\) nodes.*/\1/p' "$TMP/$1/logs/rank_0.log" | sed -n 1p; }
[ "$(nodes bf16_one)" -gt "$(nodes one)" ] || fail "the bf16 graph ($(nodes bf16_one) nodes) has no casts beyond float32's ($(nodes one))"
compare_losses "$TMP/clip_one" "$TMP/clip_zb" 10 0
diff <(jfields grad_norm "$TMP/clip_one/metrics.jsonl") <(jfields grad_norm "$TMP/clip_zb/metrics.jsonl") ||
  fail "clip_one and clip_zb log different grad_norm"
clipped=$(jfields grad_norm "$TMP/clip_one/metrics.jsonl" | awk '$2 > 0.2 { n++ } END { print n + 0 }')
[ "$clipped" -ge 5 ] || fail "clip_grad_norm 0.2 clipped only $clipped of 10 steps: the test needs a smaller norm"
[ "$(losses "$TMP/one/metrics.jsonl" | tail -1)" != "$(losses "$TMP/clip_one/metrics.jsonl" | tail -1)" ] ||
  fail "clip_grad_norm 0.2 did not change the losses"
compare_losses "$TMP/one" "$TMP/two_again" 10 0
compare_losses "$TMP/one" "$TMP/three" 10 0
compare_losses "$TMP/one" "$TMP/two_by_two" 10 1e-6
compare_losses "$TMP/one" "$TMP/zb" 10 0
compare_losses "$TMP/one" "$TMP/zb_two_by_two" 10 1e-6
[ "$(losses "$TMP/one/metrics.jsonl" | sed -n 1p)" != "$(losses "$TMP/no_dropout/metrics.jsonl" | sed -n 1p)" ] ||
  fail "dropout 0.1 and dropout 0 give the same first loss: the masks are not applied"
grep -q "schedule.*zb-h1" "$TMP/zb/logs/rank_0.log" || fail "the zb run did not use zb-h1"
# zb-h1's last stage also holds the output gradients its deferred W re-enters
# nodes with: the predicted peak (an upper bound) must cover the measured one.
read -r measured predicted < <(sed -n 's/.*stage 1 measured_peak_bytes=\([0-9]*\) predicted_peak_bytes=\([0-9]*\).*/\1 \2/p' \
  "$TMP/zb/logs/rank_1.log" | sed -n 1p)
[ -n "$predicted" ] && [ "$measured" -le "$predicted" ] ||
  fail "zb-h1 stage 1 measured peak $measured bytes above the predicted $predicted"
compare_losses "$TMP/one" "$TMP/inter" 10 0
grep -q "schedule.*interleaved, 2 stages per rank" "$TMP/inter/logs/rank_0.log" || fail "the inter run did not interleave"
grep -q "stage 3: nodes" "$TMP/inter/logs/rank_1.log" || fail "rank 1 of the inter run does not host stage 3"
# Every planned run ends with the cost model's compute per rank next to the measured one.
[ "$(grep -A3 "compute per micro-batch per rank" "$TMP/inter/logs/rank_0.log" | grep -cE "^ +[01] +[01] +[0-9.]+ +[0-9.]+ +-?[0-9]+%")" -eq 2 ] ||
  fail "the inter run did not print predicted vs measured compute for both ranks"
compare_losses "$TMP/one" "$TMP/inter_zb" 10 0
grep -q "schedule.*interleaved-zb, 2 stages per rank" "$TMP/inter_zb/logs/rank_0.log" ||
  fail "the inter_zb run did not run interleaved-zb"
# peaks_covered RUN: on both ranks, the predicted peaks (the schedule's own in-flight counts)
# cover the measured ones, and at least 2 stages reported both.
peaks_covered() {
  local r stage measured predicted
  for r in 0 1; do
    while read -r stage measured predicted; do
      [ "$measured" -le "$predicted" ] || fail "$1 stage $stage measured peak $measured above the predicted $predicted"
    done < <(sed -n 's/.*stage \([0-9]*\) measured_peak_bytes=\([0-9]*\) predicted_peak_bytes=\([0-9]*\).*/\1 \2 \3/p' \
      "$TMP/$1/logs/rank_$r.log")
  done
  [ "$(grep -c "measured_peak_bytes=" "$TMP/$1/logs/rank_"*.log | awk -F: '{ n += $2 } END { print n }')" -ge 2 ] ||
    fail "the $1 run reported no predicted vs measured peaks"
}
peaks_covered inter_zb
compare_losses "$TMP/one" "$TMP/zbv" 10 0
grep -q "schedule.*zbv, 2 stages per rank (in a V" "$TMP/zbv/logs/rank_0.log" || fail "the zbv run did not run zbv"
grep -q "stage 3: nodes" "$TMP/zbv/logs/rank_0.log" || fail "rank 0 of the zbv run does not host stage 3"
[ -s "$TMP/zbv/metrics.jsonl" ] || fail "the zbv run's rank 0 (the last stage's) wrote no metrics.jsonl"
peaks_covered zbv
compare_losses "$TMP/one" "$TMP/auto" 10 0
grep -q "pipeline.schedule auto chose .*(1f1b .* ms, zb-h1 .* ms, gpipe .* ms, interleaved x2 .* ms, interleaved-zb x2 .* ms, zbv x2 .* ms" "$TMP/auto.out" ||
  fail "schedule auto did not say what it chose and why"
grep -q '"tokens_per_s"' "$TMP/two/metrics.jsonl" || fail "metrics.jsonl lacks tokens_per_s"
grep -q "DistAdam (hooks) over 2 ranks" "$TMP/two_by_two/logs/rank_0.log" || fail "the 2x2 run did not use DistAdam"
echo "ok: with dropout, 2 and 3 stages, a second plan, zb-h1 (also clipping gradients, also in bf16), interleaved, interleaved-zb, zbv and auto give the 1-stage losses bitwise; 2x2 (1f1b, zb-h1) within 1e-6; bf16 boundaries in bfloat16: half the bytes, within 1e-4"
