#!/usr/bin/env bash
# Images through the pipeline: configs/fashion_mnist_cnn.yaml (the built-in
# CNN with BatchNorm on Debian's Fashion-MNIST, 2 stages, 1F1B) trained for
# 150 steps evaluates on the test split far above chance (10%); the same job
# with full recompute (BatchNorm replayed in backward) has bitwise the same
# losses and evaluation as keeping everything (the replay leaves the running
# statistics alone); 2 stages x 2 replicas evaluate every held-out sample
# once between them; interleaved (2 x 2 stages) trains and evaluates like
# 2 stages. Bad inputs: a data.path without the IDX files,
# evaluation without a held-out split, a CNN on text: a clear error, a
# non-zero exit, nothing written.
source "$(dirname "$0")/lib.sh"
CFG="$ROOT/configs/fashion_mnist_cnn.yaml"
# The runs plan from one profile (lib.sh shared_profile), as at start-up.
planned=(--set pipeline.profile="$(shared_profile fashion_mnist_cnn)")
train() {  # train NAME [--set ...]
  local name=$1
  shift
  OMPI_MCA_mpi_yield_when_idle=1 "$SLUICE" train "$CFG" "${planned[@]}" --set job.output_dir="$TMP/$name" "$@" >"$TMP/$name.log" 2>&1 ||
    { cat "$TMP/$name.log"; fail "train $name"; }
}
eval_line() { grep '"eval_loss"' "$TMP/$1/metrics.jsonl"; }

train short --set training.steps=150 --set training.eval_interval=150 --set training.eval_samples=2000
grep -q "eval after step 150  eval_loss [0-9.]*  eval_accuracy [0-9.]*%  (2000 samples" "$TMP/short.log" ||
  { cat "$TMP/short.log"; fail "no eval line on the console"; }
eval_line short | awk -F'"eval_accuracy": *' '{ split($2, a, ","); acc = a[1] + 0
  printf "fashion_mnist_cnn, 150 steps: test accuracy %.2f%% on 2000 images (chance 10%%)\n", 100 * acc; exit !(acc > 0.6) }' ||
  fail "accuracy after 150 steps is not clearly above chance"

run=(--set training.steps=20 --set training.eval_interval=10 --set training.eval_samples=512)
train keep "${run[@]}" --set memory.policy=none
train recompute "${run[@]}" --set memory.policy=full_recompute
grep -q "recomputed" "$TMP/recompute.log" || fail "full_recompute recomputed nothing"
cmp <(jfields 'loss\|eval_loss\|eval_accuracy' "$TMP/keep/metrics.jsonl") \
      <(jfields 'loss\|eval_loss\|eval_accuracy' "$TMP/recompute/metrics.jsonl") ||
  fail "full recompute changed the losses or the evaluation (BatchNorm statistics updated twice?)"
[ "$(eval_line keep | wc -l)" -eq 2 ] || fail "expected evaluations after steps 10 and 20"
echo "ok: full recompute: 20 losses and 2 evaluations bitwise equal to keeping everything"

# Interleaved 1F1B (2 ranks x 2 stages): the same losses and evaluations as 2 stages (BatchNorm statistics in
# micro-batch order on every stage; evaluation micro-batch by micro-batch through each rank's stages).
train inter "${run[@]}" --set memory.policy=none --set pipeline.schedule=interleaved
grep -q "interleaved, 2 stages per rank" "$TMP/inter/logs/rank_0.log" || fail "the inter run did not interleave"
paste <(jfields 'loss\|eval_loss\|eval_accuracy' "$TMP/keep/metrics.jsonl") \
      <(jfields 'loss\|eval_loss\|eval_accuracy' "$TMP/inter/metrics.jsonl") |
  awk '{ a = $2 + 0; b = $4 + 0; d = a - b; if (d < 0) d = -d; s = a < 0 ? -a : a; if ($1 != $3 || d > 1e-5 * s + 1e-12) bad = 1; n++ }
       END { exit bad || n != 24 }' || fail "interleaved changed the losses or the evaluation"
echo "ok: interleaved (2 x 2 stages): 20 losses and 2 evaluations equal to 2 stages"

train dp "${run[@]}" --set pipeline.data_parallel=2 --set optimizer.name=dist_adam --set pipeline.microbatches=2
eval_line dp | grep '"eval_samples": *512}' >/dev/null || { eval_line dp; fail "2 replicas did not evaluate all 512 samples"; }
echo "ok: 2 stages x 2 replicas: $(eval_line dp | tail -1)"

mkdir -p "$TMP/empty"
expect_failure no_idx_files "data.path '$TMP/empty' has no train-images-idx3-ubyte (nor train-images-idx3-ubyte.gz): install Debian's dataset-fashion-mnist" "$TMP/e1" -- \
  "$SLUICE" train "$CFG" --set data.path="$TMP/empty" --set job.output_dir="$TMP/e1"
# Data sets written here (one Python process): N random 28x28 images (idx files) in DIR, training split only.
"$PY" - "$TMP/none" 0 "$TMP/few" 5 "$TMP/train_only" 64 <<'PY'
import os, struct, sys, numpy as np
rng = np.random.default_rng(0)
for d, n in zip(sys.argv[1::2], map(int, sys.argv[2::2])):
    os.makedirs(d, exist_ok=True)
    open(f"{d}/train-images-idx3-ubyte", "wb").write(struct.pack(">IIII", 0x803, n, 28, 28) + rng.integers(0, 256, (n, 28, 28), dtype=np.uint8).tobytes())
    open(f"{d}/train-labels-idx1-ubyte", "wb").write(struct.pack(">II", 0x801, n) + rng.integers(0, 10, n, dtype=np.uint8).tobytes())
PY
expect_failure no_images "holds no images" "$TMP/e4" -- \
  "$SLUICE" train "$CFG" --set data.path="$TMP/none" --set training.eval_interval=0 --set job.output_dir="$TMP/e4"
expect_failure fewer_than_a_batch "holds 5 images, fewer than training.global_batch_size (64)" "$TMP/e5" -- \
  "$SLUICE" train "$CFG" --set data.path="$TMP/few" --set training.eval_interval=0 --set job.output_dir="$TMP/e5"
# Evaluation off: the test split's files are not needed.
"$SLUICE" train "$CFG" --set data.path="$TMP/train_only" --set training.eval_interval=0 --set training.steps=2 \
  --set pipeline.stages=1 --set job.output_dir="$TMP/train_only_run" >"$TMP/train_only.log" 2>&1 ||
  { cat "$TMP/train_only.log"; fail "training split only, evaluation off: the test files were demanded"; }
echo "ok: evaluation off trains from the training split alone"
expect_failure eval_without_split "training.eval_interval needs a dataset with a held-out split" "$TMP/e2" -- \
  "$SLUICE" train "$ROOT/configs/quickstart.yaml" --set training.eval_interval=10 --set job.output_dir="$TMP/e2"
expect_failure cnn_on_text "model.name=cnn needs data.name=fashion_mnist" "$TMP/e3" -- \
  "$SLUICE" train "$CFG" --set data.name=text --set data.path=/usr/share/games/fortunes --set job.output_dir="$TMP/e3"
