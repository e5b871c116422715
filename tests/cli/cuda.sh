#!/usr/bin/env bash
# `sluice train` on a GPU, end to end (exits 77, which CTest counts as
# skipped, where PyTorch sees no GPU). Every rank shares the one GPU (ranks
# wrap around the GPUs), so boundary tensors travel over MPI through host
# staging; kernels are deterministic on CUDA (the Trainer turns PyTorch's
# deterministic algorithms on), dropout is on. The quickstart's GPT, small:
# - fp32: 2 stages (1F1B) give bitwise the 1-stage losses, as on the CPU;
# - pipeline.execution: graphs (Note [graphed stages], pipeline/StageGraphs.h):
#   1 stage, and 2 stages under 1F1B and zb-h1, bitwise the eager losses;
# - bf16 (CUDA autocast captured, Note [bf16 by capture]): 2 stages under
#   zb-h1 bitwise equal 1 stage;
# - fp16 with dynamic loss scaling (Note [fp16 loss scaling],
#   optim/LossScaler.h): 2 stages (1F1B and zb-h1) bitwise equal 1 stage;
#   2 stages x 2 replicas (DistAdam) within 5e-5 (the replica average rounds
#   float32 masters 1 ulp apart, which a float16 cast can turn into 1 float16
#   ulp, as bf16 on the CPU); the first loss differs from fp32's;
# - an injected non-finite gradient (SLUICE_FAULT nan, on the last stage's
#   rank) skips the step on every rank and halves the loss scale, alike on 1
#   process and on 2 stages (bitwise the same losses after it); the scale
#   doubles after training.loss_scale_window good steps;
# - fp16 resumed from a checkpoint continues bitwise, loss scale included.
source "$(dirname "$0")/lib.sh"
if ! "$PY" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  echo "SKIPPED: no GPU can be used here (PyTorch at $PY sees none); this test runs on a machine with one"
  exit 77
fi
small=(--set training.steps=10 --set logging.interval=5 --set model.layers=2 --set model.embd=64
       --set model.heads=4 --set model.block_size=32 --set model.dropout=0.1 --set job.threads_per_rank=1
       --set job.device=cuda)
train() { local name=$1; shift; "$SLUICE" train "$ROOT/configs/quickstart.yaml" "${small[@]}" --set job.output_dir="$TMP/$name" "$@" \
  >"$TMP/$name.log" 2>&1 || { cat "$TMP/$name.log"; fail "train $name"; }; }
field() { jfields "$2" "$TMP/$1/metrics.jsonl" | awk '{printf "%.17g\n", $2}'; }

train f32_one --set pipeline.stages=1
train f32_two --set pipeline.stages=2
grep -q "device: cuda:0" "$TMP/f32_one.log" || { cat "$TMP/f32_one.log"; fail "f32_one did not say it runs on cuda"; }
compare_losses "$TMP/f32_one" "$TMP/f32_two" 10 0

train bf16_one --set pipeline.stages=1 --set training.precision=bf16
train bf16_zb --set pipeline.stages=2 --set pipeline.schedule=zb-h1 --set training.precision=bf16
compare_losses "$TMP/bf16_one" "$TMP/bf16_zb" 10 0

fp16=(--set training.precision=fp16)
train fp16_one --set pipeline.stages=1 "${fp16[@]}"
train fp16_two --set pipeline.stages=2 "${fp16[@]}"
train fp16_zb --set pipeline.stages=2 --set pipeline.schedule=zb-h1 "${fp16[@]}"
train fp16_two_by_two --set pipeline.stages=2 --set pipeline.data_parallel=2 --set pipeline.microbatches=2 \
  --set optimizer.name=dist_adam --set optimizer.dist_adam.mode=hooks "${fp16[@]}"
compare_losses "$TMP/fp16_one" "$TMP/fp16_two" 10 0
compare_losses "$TMP/fp16_one" "$TMP/fp16_zb" 10 0
compare_losses "$TMP/fp16_one" "$TMP/fp16_two_by_two" 10 5e-5
[ "$(losses "$TMP/f32_one/metrics.jsonl" | sed -n 1p)" != "$(losses "$TMP/fp16_one/metrics.jsonl" | sed -n 1p)" ] ||
  fail "fp16 gives the float32 loss at step 0: no matrix product ran in float16"
[ "$(field fp16_one loss_scale | sed -n 1p)" = 65536 ] || fail "fp16_one's first loss_scale is $(field fp16_one loss_scale | sed -n 1p), not 65536"

# An overflow at step 3, on the last stage's rank; the window of 2 doubles the scale after 2 good steps.
scaled=("${fp16[@]}" --set training.nan_policy=abort --set training.loss_scale=1024 --set training.loss_scale_window=2)
SLUICE_FAULT=nan:rank=0:step=3 train nan_one --set pipeline.stages=1 "${scaled[@]}"
SLUICE_FAULT=nan:rank=1:step=3 train nan_two --set pipeline.stages=2 "${scaled[@]}"
compare_losses "$TMP/nan_one" "$TMP/nan_two" 10 0
diff <(field nan_one loss_scale) <(field nan_two loss_scale) || fail "nan_one and nan_two log different loss scales"
# Step 0: 1024; 2 good steps -> 2048 at step 2; the overflow at step 3 -> 1024 at 4; 2 good -> 2048 at 6, 4096 at 8.
[ "$(field nan_one loss_scale | tr '\n' ' ')" = "1024 1024 2048 2048 1024 1024 2048 2048 4096 4096 " ] ||
  fail "loss scales $(field nan_one loss_scale | tr '\n' ' ')are not 1024 1024 2048 2048 1024 1024 2048 2048 4096 4096"
[ "$(grep -c '"skipped": *true' "$TMP/nan_two/metrics.jsonl")" = 1 ] && grep -q '"step": *3,.*"skipped": *true' "$TMP/nan_two/metrics.jsonl" ||
  fail "nan_two did not skip step 3 (and only it)"
grep -q "step 3: gradients overflowed at loss scale 2048, update skipped; loss scale now 1024" "$TMP/nan_two/logs/rank_0.log" ||
  fail "nan_two's log does not say why step 3 was skipped"

# Resume: a checkpoint at step 5 (loss scale 1024, one good step since the overflow) continues bitwise.
SLUICE_FAULT=nan:rank=1:step=3 train ckpt --set pipeline.stages=2 "${scaled[@]}" --set checkpoint.interval=5
grep -q "loss_scale: 1024" "$TMP/ckpt/checkpoints/step_00000005/manifest.yaml" || fail "the checkpoint lacks its loss scale"
train resumed --set pipeline.stages=2 "${scaled[@]}" --set checkpoint.resume="$TMP/ckpt/checkpoints/step_00000005"
diff <(losses "$TMP/ckpt/metrics.jsonl" | tail -5) <(losses "$TMP/resumed/metrics.jsonl") >/dev/null ||
  fail "the resumed fp16 run's losses differ from the uninterrupted run's"
diff <(field ckpt loss_scale | tail -5) <(field resumed loss_scale) || fail "the resumed run's loss scales differ"
echo "ok: on $("$PY" -c 'import torch; print(torch.cuda.get_device_name())'): fp32 and bf16 layouts bitwise; fp16 with loss scaling: 2 stages (1f1b, zb-h1) bitwise, 2x2 within 5e-5, an overflow skipped alike on every layout, scale halved and regrown, resume bitwise"

# pipeline.execution: graphs last, so that a failure here leaves the checks above run.
graphs=(--set pipeline.execution=graphs)
train graphs_one --set pipeline.stages=1 "${graphs[@]}"
train graphs_two --set pipeline.stages=2 "${graphs[@]}"
train graphs_zb --set pipeline.stages=2 --set pipeline.schedule=zb-h1 "${graphs[@]}"
compare_losses "$TMP/f32_one" "$TMP/graphs_one" 10 0
compare_losses "$TMP/f32_one" "$TMP/graphs_two" 10 0
compare_losses "$TMP/f32_one" "$TMP/graphs_zb" 10 0
grep -q "stage 0 CUDA graphs: [1-9][0-9]* captured for 2 micro-batch slots" "$TMP/graphs_two/logs/rank_0.log" ||
  { cat "$TMP/graphs_two/logs/rank_0.log"; fail "graphs_two: stage 0 did not capture graphs for its 2 slots"; }
echo "ok: pipeline.execution: graphs: 1 stage, and 2 stages under 1f1b and zb-h1, bitwise eager with dropout"
