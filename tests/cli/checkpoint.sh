#!/usr/bin/env bash
# Checkpoints on real ranks: a job killed (-9) mid-run restarts from its latest
# checkpoint and ends with the per-step losses of an uninterrupted run,
# bitwise (also under pipeline.schedule auto, reusing the plan auto chose); a stop on SIGTERM writes a checkpoint, exits 0 and resumes
# bitwise; a kill during a save leaves the previous checkpoint loadable;
# checkpoints load into another layout (2 stages -> 1 stage; 2 stages ->
# interleaved 2 x 2 -> 1 stage; 1 stage x 2 replicas -> 2 stages x 1,
# DistAdam) within relative 1e-6; broken or foreign
# checkpoints are refused with nothing written.
source "$(dirname "$0")/lib.sh"
cfg="$ROOT/configs/quickstart.yaml"
# Dropout on: a restart and a resume into another layout continue the same
# draws (Note [random streams]).
# Every run plans from one shared profile (lib.sh shared_profile; pipeline.profile), as
# a job profiling at start-up would: restarts and resumes must find the plan in the checkpoint.
small=("${SMALL[@]}" --set logging.interval=1 --set training.steps=150 --set model.dropout=0.1
       --set pipeline.profile="$(shared_profile small_dropout)")
N=150  # steps: enough (about 2 s) for a SIGTERM to arrive mid-run
S=12   # steps of the short reference: what a kill, a torn save or another layout needs
train() {
  local name=$1; shift
  timeout 300 "$SLUICE" train "$cfg" "${small[@]}" --set job.output_dir="$TMP/$name" "$@" >"$TMP/$name.log" 2>&1
}
steps() { losses "$TMP/$1/metrics.jsonl" | wc -l; }
# same REF RUN: bitwise-equal per-step losses, all of REF's steps.
same() {
  local n
  n=$(steps "$1")
  [ "$n" -gt 0 ] && [ "$(steps "$2")" -eq "$n" ] || fail "$1/$2: expected $n steps, got $(steps "$1") and $(steps "$2")"
  cmp -s <(losses "$TMP/$1/metrics.jsonl") <(losses "$TMP/$2/metrics.jsonl") ||
    { paste <(losses "$TMP/$1/metrics.jsonl") <(losses "$TMP/$2/metrics.jsonl"); fail "losses of $1 and $2 differ"; }
}
# close REF OTHER: OTHER's losses within relative 1e-6 of the last as many of REF's. Not
# bitwise: a 1-stage run has 2 intra-op threads where each of 2 ranks has 1 (threads_per_rank 0
# = cores / ranks), and 2 threads split reductions differently (measured: 1 vs 2 threads on
# 1 stage, 150 steps, max 6.3e-7, the first difference at step 14); DistAdam's replica average
# rounds differently from one process's sum (~1e-7).
close() {
  local n
  n=$(steps "$2")
  [ "$n" -gt 0 ] || fail "$2: no losses"
  paste <(losses "$TMP/$1/metrics.jsonl" | tail -n "$n") <(losses "$TMP/$2/metrics.jsonl") |
    awk -v a="$1" -v b="$2" '
      { d = $1 - $2; if (d < 0) d = -d; r = d / ($1 < 0 ? -$1 : $1); if (r > max) max = r; if (r > 1e-6) bad = 1 }
      END { printf "%s vs %s: max relative difference over %d steps: %g\n", a, b, NR, max; exit bad }' ||
    fail "losses of $1 and $2 differ beyond 1e-6"
}

# The references, no interruption (2 stages, cuts from the plan): N steps for the
# signals below, S steps for the kills and the other layouts (a checkpoint does
# not change the losses: Note [random streams]).
train straight || { cat "$TMP/straight.log"; fail "straight run failed"; }
train short --set training.steps=$S || { cat "$TMP/short.log"; fail "short run failed"; }

# kill -9 of rank 1 at step 7 with max_restarts 1 and a checkpoint every 5 steps.
SLUICE_FAULT=kill:rank=1:step=7 train killed --set training.steps=$S --set checkpoint.interval=5 --set cluster.max_restarts=1 ||
  { cat "$TMP/killed.log"; fail "killed run did not complete after its restart"; }
grep -q "sluice: restart 1 of 1 from the latest checkpoint after: rank 1 on .* died on signal 9" "$TMP/killed.log" ||
  { cat "$TMP/killed.log"; fail "the restart was not logged with its cause"; }
grep -q "resumed from .*step_00000005 at step 5 (same layout: exact)" "$TMP/killed.log" || fail "did not resume at step 5"
grep -q "plan: the one saved with" "$TMP/killed.log" || fail "the restart planned anew instead of reusing the plan"
same short killed
echo "ok: kill -9 of rank 1 at step 7, restarted from step 5: $S losses bitwise equal to the uninterrupted run"

# The same under pipeline.schedule auto: the restart reuses the schedule and
# plan auto chose (it used to compare the chosen schedule with "auto", plan
# anew, and could pick another schedule mid-run).
auto=(--set training.steps=$S --set pipeline.schedule=auto)
train short_auto "${auto[@]}" || { cat "$TMP/short_auto.log"; fail "short auto run failed"; }
chose=$(grep -o "pipeline.schedule auto chose [a-z0-9-]*" "$TMP/short_auto.log" | awk '{ print $NF }')
[ -n "$chose" ] || fail "auto did not say which schedule it chose"
SLUICE_FAULT=kill:rank=1:step=7 train killed_auto "${auto[@]}" --set checkpoint.interval=5 --set cluster.max_restarts=1 ||
  { cat "$TMP/killed_auto.log"; fail "killed auto run did not complete after its restart"; }
grep -q "resumed from .*step_00000005 at step 5 (same layout: exact)" "$TMP/killed_auto.log" || fail "auto: did not resume at step 5"
grep -q "plan: the one saved with" "$TMP/killed_auto.log" ||
  { grep "plan:" "$TMP/killed_auto.log"; fail "under auto, the restart planned anew instead of reusing the plan"; }
[ "$(grep -c "pipeline.schedule auto chose" "$TMP/killed_auto.log")" -eq 1 ] || fail "under auto, the restart chose again"
same short_auto killed_auto
echo "ok: under pipeline.schedule auto ($chose), kill -9 and restart reused the plan: $S losses bitwise equal"

# SIGTERM, or Ctrl-C (SIGINT), to `sluice train`: the ranks finish their step,
# checkpoint and exit 0; resuming is bitwise exact.
# (Not under `timeout`: it would signal the whole process group, mpirun and the ranks too.)
stop_and_resume() {  # stop_and_resume SIGNAL NAME [stop-only]
  local sig=$1 name=$2 only=${3:-} pid rc stopped
  "$SLUICE" train "$cfg" "${small[@]}" --set job.output_dir="$TMP/$name" >"$TMP/$name.log" 2>&1 &
  pid=$!
  for _ in $(seq 1500); do grep -q "step 3/$N" "$TMP/$name.log" && break; sleep 0.1; done
  grep -q "step 3/$N" "$TMP/$name.log" || { kill -9 $pid; cat "$TMP/$name.log"; fail "SIG$sig run did not reach step 3"; }
  kill -"$sig" $pid
  rc=0; wait $pid || rc=$?
  [ "$rc" -eq 0 ] || { cat "$TMP/$name.log"; fail "SIG$sig: exit $rc, expected 0"; }
  grep -q "sluice: stopped on request after writing a checkpoint; resume with: sluice train" "$TMP/$name.log" ||
    { cat "$TMP/$name.log"; fail "SIG$sig: no resume line"; }
  stopped=$(grep -o "stopped on request after step [0-9]*" "$TMP/$name/logs/rank_0.log" | grep -o "[0-9]*$")
  [ -f "$TMP/$name/checkpoints/step_$(printf %08d "$stopped")/manifest.yaml" ] || fail "SIG$sig: no checkpoint of step $stopped"
  [ "$(steps "$name")" -eq "$stopped" ] || fail "SIG$sig: metrics.jsonl has $(steps "$name") steps, the checkpoint $stopped"
  if [ -n "$only" ]; then echo "ok: SIG$sig after step $stopped: checkpoint, exit 0"; return; fi
  train "$name" || { cat "$TMP/$name.log"; fail "resume after SIG$sig failed"; }
  grep -q "resumed from .* at step $stopped (same layout: exact)" "$TMP/$name/logs/rank_0.log" || fail "did not resume"
  same straight "$name"
  echo "ok: SIG$sig after step $stopped: checkpoint, exit 0; the resumed run's $N losses are bitwise equal (metrics appended)"
}
stop_and_resume TERM term
stop_and_resume INT int stop-only  # the resume is SIGTERM's, above

# SIGTERM right after mpirun starts, before the ranks have their handlers:
# the supervisor holds the stop until every rank says it can take it, so no
# rank dies on SIGUSR1 (signal 10); the job stops at its first step boundary.
"$SLUICE" train "$cfg" "${small[@]}" --set job.output_dir="$TMP/early" >"$TMP/early.log" 2>&1 &
pid=$!
for _ in $(seq 1500); do grep -q "sluice: starting 2 ranks" "$TMP/early.log" && break; sleep 0.01; done
kill -TERM $pid
rc=0; wait $pid || rc=$?
[ "$rc" -eq 0 ] || { cat "$TMP/early.log"; fail "SIGTERM at start-up: exit $rc, expected 0"; }
! grep -q "signal 10" "$TMP/early.log" || { cat "$TMP/early.log"; fail "SIGTERM at start-up: a rank died on SIGUSR1"; }
grep -q "sluice: stopped on request" "$TMP/early.log" || { cat "$TMP/early.log"; fail "SIGTERM at start-up: no stop line"; }
echo "ok: SIGTERM as mpirun starts: $(grep -o "stopped on request after step [0-9]*" "$TMP/early/logs/rank_0.log"), exit 0"

# kill -9 of `sluice train` alone: mpirun and the ranks end at once (Note
# [no orphans]), instead of training on unsupervised.
"$SLUICE" train "$cfg" "${small[@]}" --set training.steps=100000 --set job.output_dir="$TMP/orphan" >"$TMP/orphan.log" 2>&1 &
pid=$!
for _ in $(seq 1500); do grep -q "step 3/" "$TMP/orphan.log" && break; sleep 0.1; done
grep -q "step 3/" "$TMP/orphan.log" || { kill -9 $pid; cat "$TMP/orphan.log"; fail "orphan run did not reach step 3"; }
pgrep -f "job.output_dir=$TMP/orphan( |$)" >/dev/null || fail "orphan: no ranks found while running"
kill -9 $pid
wait $pid 2>/dev/null || true
for _ in $(seq 100); do pgrep -f "job.output_dir=$TMP/orphan( |$)" >/dev/null || break; sleep 0.1; done
! pgrep -f "job.output_dir=$TMP/orphan( |$)" >/dev/null ||
  { pkill -9 -f "job.output_dir=$TMP/orphan( |$)"; fail "orphan: ranks still running 10 s after the launcher died"; }
echo "ok: kill -9 of the launcher: mpirun and the ranks gone within 10 s"

# A kill (-9) while the checkpoint of step 8 is written: step 4's stays the latest and loads.
rc=0
SLUICE_FAULT=kill_in_checkpoint:rank=1:step=8 train torn --set training.steps=$S --set checkpoint.interval=4 || rc=$?
[ "$rc" -ne 0 ] || fail "kill during a save: exit 0"
[ "$(cat "$TMP/torn/checkpoints/latest")" = "step_00000004" ] || fail "latest moved to an incomplete checkpoint"
[ ! -e "$TMP/torn/checkpoints/step_00000008/manifest.yaml" ] || fail "the torn checkpoint has a manifest"
ck4="$TMP/ck4" && cp -r "$TMP/torn/checkpoints/step_00000004" "$ck4"  # for the layout tests below (keep_latest_k removes it)
train torn --set training.steps=$S --set checkpoint.interval=4 || { cat "$TMP/torn.log"; fail "resume after a torn save failed"; }
grep -q "resumed from .*step_00000004 at step 4" "$TMP/torn/logs/rank_0.log" || fail "did not resume from step 4"
same short torn
echo "ok: killed while saving step 8: step 4's checkpoint stays latest and resumes bitwise"

# Another layout: 2 stages -> 1 stage, from step 4 of the torn run.
train one --set pipeline.stages=1 --set training.steps=$S --set checkpoint.resume="$ck4" ||
  { cat "$TMP/one.log"; fail "2 -> 1 stage failed"; }
grep -q "another layout: stages 2 x data_parallel 1 before" "$TMP/one/logs/rank_0.log" || fail "2 -> 1: not resumed"
[ "$(steps one)" -eq $((S - 4)) ] || fail "2 -> 1: expected steps 4..$((S - 1)), got $(steps one) lines"
close short one
echo "ok: a 2-stage checkpoint resumes on 1 stage"

# Interleaved (2 ranks x 2 stages each, 4 pieces) from the 2-stage checkpoint of step 4, and
# its own checkpoint of step 8 (each rank's file holds both its stages) on 1 stage.
train inter --set pipeline.schedule=interleaved --set training.steps=$S --set checkpoint.interval=8 \
  --set checkpoint.resume="$ck4" || { cat "$TMP/inter.log"; fail "2 stages -> interleaved 2 x 2 failed"; }
grep -q "another layout: stages 2 x data_parallel 1 before" "$TMP/inter/logs/rank_0.log" || fail "-> interleaved: not resumed"
close short inter
train inter_one --set pipeline.stages=1 --set training.steps=$S --set checkpoint.resume="$TMP/inter/checkpoints/step_00000008" ||
  { cat "$TMP/inter_one.log"; fail "interleaved -> 1 stage failed"; }
[ "$(steps inter_one)" -eq $((S - 8)) ] || fail "interleaved -> 1: expected steps 8..$((S - 1)), got $(steps inter_one)"
close short inter_one
echo "ok: a 2-stage checkpoint resumes interleaved (2 x 2), and an interleaved one on 1 stage"

# 1 stage x 2 replicas (DistAdam) -> 2 stages x 1 (DistAdam): the sharded state regathered and resharded.
dist=(--set optimizer.name=dist_adam --set optimizer.dist_adam.mode=hooks)
train dp2 "${dist[@]}" --set pipeline.stages=1 --set pipeline.data_parallel=2 --set pipeline.microbatches=2 \
  --set training.steps=$S --set checkpoint.interval=6 || { cat "$TMP/dp2.log"; fail "1x2 run failed"; }
train pp2 "${dist[@]}" --set pipeline.stages=2 --set training.steps=$S \
  --set checkpoint.resume="$TMP/dp2/checkpoints/step_00000006" || { cat "$TMP/pp2.log"; fail "1x2 -> 2x1 failed"; }
grep -q "another layout: stages 1 x data_parallel 2 before" "$TMP/pp2/logs/rank_0.log" || fail "1x2 -> 2x1: not resumed"
[ "$(steps pp2)" -eq $((S - 6)) ] || fail "1x2 -> 2x1: expected steps 6..$((S - 1)), got $(steps pp2) lines"
close dp2 pp2
echo "ok: a 1x2 DistAdam checkpoint resumes on 2x1"

# Broken or foreign checkpoints: a clear message, non-zero exit, nothing written.
bad="$TMP/bad" && cp -r "$ck4" "$bad"
truncate -s -100 "$bad/rank_1.tensors"
expect_failure truncated "rank_1.tensors is truncated" "$TMP/out_truncated" -- \
  "$SLUICE" train "$cfg" "${small[@]}" --set job.output_dir="$TMP/out_truncated" --set checkpoint.resume="$bad"
rm -rf "$bad" && cp -r "$ck4" "$bad"
printf '\x55' | dd of="$bad/rank_0.tensors" bs=1 seek=2000 conv=notrunc status=none
expect_failure corrupted "rank_0.tensors is corrupted: checksum" "$TMP/out_corrupted" -- \
  "$SLUICE" train "$cfg" "${small[@]}" --set job.output_dir="$TMP/out_corrupted" --set checkpoint.resume="$bad"
expect_failure other_model "was made for another model: model.embd is 64 there and 32 in this config" "$TMP/out_other" -- \
  "$SLUICE" train "$cfg" "${small[@]}" --set model.embd=32 --set job.output_dir="$TMP/out_other" \
  --set checkpoint.resume="$ck4"
expect_failure incomplete "is incomplete or not a checkpoint (no manifest.yaml)" "$TMP/out_incomplete" -- \
  "$SLUICE" train "$cfg" "${small[@]}" --set job.output_dir="$TMP/out_incomplete" \
  --set checkpoint.resume="$TMP/torn"
before=$(cd "$TMP/torn" && find . -type f ! -name .sluice.lock -exec md5sum {} + | sort | md5sum)  # the lock names its last holder
# checkpoint.resume: auto in the run's own folder, with the model changed:
expect_failure other_model_auto "model.heads is 4 there and 8 in this config" "$TMP/none" -- \
  "$SLUICE" train "$cfg" "${small[@]}" --set model.heads=8 --set job.output_dir="$TMP/torn"
after=$(cd "$TMP/torn" && find . -type f ! -name .sluice.lock -exec md5sum {} + | sort | md5sum)
[ "$before" = "$after" ] || fail "a refused resume changed the run's files"
echo "ok: truncated, corrupted, foreign and incomplete checkpoints are refused; nothing written or overwritten"
