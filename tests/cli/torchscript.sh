#!/usr/bin/env bash
# Bring a PyTorch model. First a transformer defined in Python (nn.Embedding,
# nn.TransformerEncoderLayer, nn.Linear; models/export_example.py) and saved
# as TorchScript by PyTorch 2.11 (scripts/setup.sh's environment) is trained by Sluice on 1 stage and
# on 2 stages x 2 replicas with DistAdam, and by PyTorch's own loop
# (torch.optim.AdamW, the same data order and micro-batches;
# torchscript_reference.py) from the same file: per-step losses equal within
# relative 1e-5 over 10 steps. The model.pt Sluice writes, loaded in Python,
# gives the reference model's outputs, and Sluice started from it computes
# the loss Python computes with it; `sluice export` gives the checkpoints'
# weights. The same with tied input and output embeddings, and with gradient clipping. Then a CNN with BatchNorm on Fashion-MNIST the same way, with
# evaluation compared to PyTorch's. Then the errors: a wrong model.path, a
# file that is not TorchScript, inputs that do not match forward, a forward
# whose control flow depends on tensor values: a clear message, a non-zero
# exit, nothing written.
# PyTorch runs in two processes (a torch import is 2-4 s): one writes every
# model first, one runs every reference and the checks that load what Sluice
# wrote, after Sluice's runs.
source "$(dirname "$0")/lib.sh"
TEXT=/usr/share/games/fortunes/fortunes
FMNIST=/usr/share/datasets/fashion-mnist
[ -e $FMNIST/train-images-idx3-ubyte.gz ] || fail "Fashion-MNIST is needed (scripts/setup.sh installs dataset-fashion-mnist)"
BLOCK=32 SEED=7 STEPS=10 LR=0.002 WD=0.01
# The models (models/export_example.py): the transformer, tied, computing its own loss, and the
# CNN; two modules Sluice must refuse (TorchScript compiles from source files, so they are written
# to one first); model.pt with a tensor record cut short inside a well-formed archive.
cat >"$TMP/bad_modules.py" <<'PY'
import torch
class Two(torch.nn.Module):
    def forward(self, tokens, positions):
        return tokens.float() + positions.float()
class Branchy(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(256, 8)
    def forward(self, tokens):
        x = self.emb(tokens)
        if x.sum() > 0:
            x = x * 2
        return x
PY
"$PY" - "$ROOT/models" "$TMP" $BLOCK >"$TMP/export.log" 2>&1 <<'PY' ||
import sys, zipfile
import torch
sys.path[:0] = [sys.argv[1], sys.argv[2]]
import export_example as ex
import bad_modules
d, common = sys.argv[2], ["--block", sys.argv[3], "--embd", "32", "--heads", "4", "--layers", "2"]
ex.main([f"{d}/model.pt"] + common)
ex.main([f"{d}/tied.pt", "--tie"] + common)
ex.main([f"{d}/with_loss.pt", "--with-loss"] + common)
ex.main([f"{d}/cnn.pt", "--model", "cnn", "--channels", "8"])
torch.jit.script(bad_modules.Two()).save(f"{d}/two.pt")
torch.jit.script(bad_modules.Branchy()).save(f"{d}/branchy.pt")
src, dst = zipfile.ZipFile(f"{d}/model.pt"), zipfile.ZipFile(f"{d}/truncated.pt", "w", compression=zipfile.ZIP_STORED)
for info in src.infolist():
    data = src.read(info.filename)
    dst.writestr(info, data[:16] if info.filename.endswith("/data/0") else data)
dst.close()
PY
  { cat "$TMP/export.log"; fail "writing the models (torch for $PY is needed: scripts/setup.sh installs it)"; }
{ cat <<YAML
job: {name: ts, output_dir: $TMP/unused, seed: $SEED}
model:
  name: torchscript
  path: $TMP/model.pt
  inputs: [{name: tokens, shape: [$BLOCK], dtype: int64}]
  targets: {shape: [$BLOCK], dtype: int64}
  loss: cross_entropy
YAML
  lm_yaml_tail; } >"$TMP/ts.yaml"
cat >"$TMP/cnn.yaml" <<YAML
job: {name: cnn, output_dir: $TMP/unused, seed: $SEED}
model:
  name: torchscript
  path: $TMP/cnn.pt
  inputs: [{name: images, shape: [1, 28, 28], dtype: float32}]
  targets: {shape: [], dtype: int64}
  loss: cross_entropy
data: {name: fashion_mnist, path: $FMNIST}
training: {steps: $STEPS, global_batch_size: 16, micro_batch_size: 4, eval_interval: $STEPS, eval_samples: 256}
pipeline: {stages: 1, microbatches: 4}
optimizer: {name: adamw, lr: 0.003, weight_decay: $WD, schedule: constant}
logging: {interval: 5}
YAML
train_on() {  # train_on CONFIG NAME [--set ...]
  local config=$1 name=$2
  shift 2
  OMPI_MCA_mpi_yield_when_idle=1 "$SLUICE" train "$config" --set job.output_dir="$TMP/$name" "$@" \
    >"$TMP/$name.log" 2>&1 || { cat "$TMP/$name.log"; fail "train $name"; }
}
train() { train_on "$TMP/ts.yaml" "$@"; }
train_cnn() { train_on "$TMP/cnn.yaml" "$@"; }
# Two stages cut where the tied embedding's readers fall on both ranks (node 40
# of the transformer's graph; where a model is cut does not change its losses).
two_by_two=(--set pipeline.stages=2 --set "pipeline.cuts=[40]" --set pipeline.data_parallel=2 --set pipeline.microbatches=2
            --set optimizer.name=dist_adam)

# Sluice's runs (compared with PyTorch's further down).
train one --set checkpoint.interval=5
train two_by_two "${two_by_two[@]}"
grep -q "model: $TMP/one/model.pt" "$TMP/one.log" || fail "no model.pt line"
# Tied input and output embeddings (head.weight = tok.weight, as in GPT-2 and
# Llama): read on the first and the last stage, each holds it and their
# gradients are summed before every update (Trainer.h, Note [tied
# parameters]). On 1 stage and on 2 stages x 2 replicas (DistAdam): PyTorch's
# losses, and the model.pt written back keeps the two tied.
train tied_one --set model.path="$TMP/tied.pt"
train tied_two_by_two --set model.path="$TMP/tied.pt" "${two_by_two[@]}"
grep -q "tied parameters: tok.weight on pipeline ranks 0 1" "$TMP/tied_two_by_two/logs/rank_0.log" ||
  { cat "$TMP/tied_two_by_two.log"; fail "tied_two_by_two: tok.weight is not held by both stages"; }
# optimizer.clip_grad_norm (optim/GradClip.h) against torch.nn.utils.clip_grad_norm_ in PyTorch's loop:
# 2 stages x 2 replicas (DistAdam: the norm over shards) of the plain and the tied model (the tied
# weight counted once, as model.parameters() does): losses and the logged grad_norm within relative
# 1e-5 over 10 steps. The norms here are about 1.0-1.2, so 0.5 clips every step (checked on the
# reference's norms), and the clipped reference's losses differ from the unclipped ones (so a run
# that ignored the setting would fail).
CLIP=0.5
for model in model tied; do
  train clip_$model --set model.path="$TMP/$model.pt" "${two_by_two[@]}" --set optimizer.clip_grad_norm=$CLIP
done
# model.loss: none: the same transformer computing its own loss (forward(tokens, targets); the targets
# travel through the pipeline as a second data input), on 2 stages: PyTorch's losses again.
train own_loss --set model.path="$TMP/with_loss.pt" --set model.loss=none --set pipeline.stages=2 \
  --set "pipeline.cuts=[40]" --set "model.inputs=[{name: tokens, shape: [$BLOCK], dtype: int64}]"
# Sluice from its own model.pt (its step-0 loss is compared with Python's below).
train again --set model.path="$TMP/one/model.pt" --set training.steps=1 --set logging.interval=1
# sluice export from the checkpoints: the latest (step 10), step 5, and the latest as safetensors.
"$SLUICE" export "$TMP/ts.yaml" --checkpoint "$TMP/one/checkpoints" -o "$TMP/exported10.pt" >"$TMP/export10.log" 2>&1 ||
  { cat "$TMP/export10.log"; fail "sluice export (latest)"; }
grep -q "wrote $TMP/exported10.pt: .* (step 10)" "$TMP/export10.log" || { cat "$TMP/export10.log"; fail "export: no step 10"; }
"$SLUICE" export "$TMP/ts.yaml" --checkpoint "$TMP/one/checkpoints/step_00000005" -o "$TMP/exported5.pt" >"$TMP/export5.log" 2>&1 ||
  { cat "$TMP/export5.log"; fail "sluice export (step_5)"; }
"$SLUICE" export "$TMP/ts.yaml" --checkpoint "$TMP/one/checkpoints" --format safetensors -o "$TMP/st10" \
  >"$TMP/st10.log" 2>&1 || { cat "$TMP/st10.log"; fail "sluice export --format safetensors"; }
# A CNN with BatchNorm (models/export_example.py --model cnn) on Fashion-MNIST, against PyTorch the same
# way: 1 stage, 2 stages, 2 stages x 2 replicas (DistAdam). Evaluation (eval mode: BatchNorm's running
# statistics) on the first 256 test images after the last step: with one replica, Sluice's eval_loss and
# eval_accuracy equal PyTorch's eval of its own trained model (so the running statistics, updated per
# micro-batch on whichever stage holds the BatchNorm, equal one process's), and model.pt's eval-mode
# outputs equal the reference model's.
cnn_cut=(--set "pipeline.cuts=[5]")  # before the second conv block (of 12 nodes)
train_cnn cnn_one
train_cnn cnn_two --set pipeline.stages=2 "${cnn_cut[@]}"
train_cnn cnn_2x2 --set pipeline.stages=2 "${cnn_cut[@]}" --set pipeline.data_parallel=2 --set pipeline.microbatches=2 \
  --set optimizer.name=dist_adam

# PyTorch, in one process: the five reference trainings (tests/cli/torchscript_reference.py),
# then what loads Sluice's files: the tied model.pt keeps head.weight = tok.weight; `sluice
# export` of step 10 equals model.pt and step 5's differs; the safetensors export, read by
# Python's safetensors, equals model.pt's state_dict bitwise (and from model.pt's weights
# it writes the files the model.weights runs below read: the weights, one transposed, one
# missing).
"$PY" - "$ROOT/tests/cli" "$TMP" $TEXT $FMNIST $SEED $STEPS $LR $WD $BLOCK $CLIP <<'PY' || fail "PyTorch's references and checks"
import json, sys
import torch
from safetensors.torch import load_file, save_file
sys.path.insert(0, sys.argv[1])
import torchscript_reference as ref
d, text, fmnist, seed, steps, lr, wd, block, clip = sys.argv[2:]
lm = ["--data", "text", "--path", text, "--seed", seed, "--steps", steps, "--global", "8", "--micro", "2",
      "--lr", lr, "--wd", wd, "--block", block]
ref.run(["--model", f"{d}/model.pt", *lm, "--out", f"{d}/ref.json", "--exported", f"{d}/one/model.pt"])
ref.run(["--model", f"{d}/tied.pt", *lm, "--out", f"{d}/tied_ref.json", "--exported", f"{d}/tied_two_by_two/model.pt"])
for model in ("model", "tied"):
    ref.run(["--model", f"{d}/{model}.pt", *lm, "--clip", clip, "--out", f"{d}/clip_{model}_ref.json"])
ref.run(["--model", f"{d}/cnn.pt", "--data", "fashion_mnist", "--path", fmnist, "--seed", seed, "--steps", steps,
         "--global", "16", "--micro", "4", "--lr", "0.003", "--wd", wd, "--out", f"{d}/cnn_ref.json",
         "--exported", f"{d}/cnn_one/model.pt", "--eval-samples", "256"])

r = json.load(open(f"{d}/tied_ref.json"))
for run in ("tied_one", "tied_two_by_two"):
    m = torch.jit.load(f"{d}/{run}/model.pt")
    assert m.tok.weight.data_ptr() == m.head.weight.data_ptr(), f"{run}: model.pt unties the embeddings"
assert r["exported_vs_reference"] < 1e-4, ("tied model.pt", r)
print(f"ok: tied model.pt keeps head.weight = tok.weight; 2x2's vs PyTorch's: max |logit difference| "
      f"{r['exported_vs_reference']:.3g}")

final, e10, e5 = (dict(torch.jit.load(f"{d}/{n}.pt").state_dict()) for n in ("one/model", "exported10", "exported5"))
assert final.keys() == e10.keys() == e5.keys()
assert all(torch.equal(final[k], e10[k]) for k in final), "export of step 10 differs from model.pt"
assert any(not torch.equal(final[k], e5[k]) for k in final), "export of step 5 equals step 10"
print(f"ok: sluice export: step 10 equals model.pt in all {len(final)} tensors; step 5 differs")

st = load_file(f"{d}/st10/model.safetensors")
assert set(st) == set(final), ("safetensors export", sorted(set(st) ^ set(final)))
assert all(st[k].dtype == final[k].dtype and torch.equal(st[k], final[k]) for k in final), "safetensors export differs"
save_file({k: v.contiguous() for k, v in final.items()}, f"{d}/weights.safetensors")
two_d = next(k for k, v in final.items() if v.dim() == 2 and v.shape[0] != v.shape[1])
save_file({k: (v.t() if k == two_d else v).contiguous() for k, v in final.items()}, f"{d}/bad_shape.safetensors")
save_file({k: v.contiguous() for k, v in final.items() if k != two_d}, f"{d}/missing.safetensors")
print(f"ok: export --format safetensors equals model.pt in all {len(final)} tensors (safetensors.torch.load_file)")
PY

# Each run against its reference.
reference_losses "$TMP/ref.json" >"$TMP/ref.losses"
for run in one two_by_two; do same_as_reference "$TMP/ref.losses" $run; done
reference_losses "$TMP/tied_ref.json" >"$TMP/tied_ref.losses"
for run in tied_one tied_two_by_two; do same_as_reference "$TMP/tied_ref.losses" $run; done
for model in model tied; do
  run=clip_$model
  unclipped="$TMP/ref.json"
  [ $model = model ] || unclipped="$TMP/tied_ref.json"
  "$PY" - "$TMP/${run}_ref.json" "$unclipped" "$TMP/$run/metrics.jsonl" $CLIP $run <<'PY' || fail "$run vs PyTorch's clip_grad_norm_"
import json, sys
ref, plain = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
lines = [json.loads(l) for l in open(sys.argv[3]) if '"loss"' in l]
clip, run = float(sys.argv[4]), sys.argv[5]
assert len(lines) == len(ref["losses"]) == 10, (len(lines), len(ref["losses"]))
rel = lambda a, b: abs(a - b) / abs(b)
loss_diff = max(rel(l["loss"], r) for l, r in zip(lines, ref["losses"]))
norm_diff = max(rel(l["grad_norm"], r) for l, r in zip(lines, ref["grad_norms"]))
clipped = sum(n > clip for n in ref["grad_norms"])
effect = max(rel(a, b) for a, b in zip(ref["losses"], plain["losses"]))
assert loss_diff <= 1e-5 and norm_diff <= 1e-5, (loss_diff, norm_diff)
assert clipped >= len(lines) / 2, f"clipping active on only {clipped} of {len(lines)} steps"
assert effect > 10 * 1e-5, f"clipping changes PyTorch's losses by only {effect}"
print(f"ok: {run} (2x2, DistAdam, clip_grad_norm {clip}) vs PyTorch's clip_grad_norm_: max relative loss "
      f"difference {loss_diff:.3g}, grad_norm {norm_diff:.3g}; clipped {clipped} of {len(lines)} steps "
      f"(clipping moves PyTorch's losses by up to {effect:.3g})")
PY
done
same_as_reference "$TMP/ref.losses" own_loss "own_loss (model.loss: none, 2 stages)"
# model.pt in Python: the reference model's logits (not the initial file's), and Sluice from model.pt
# computes the loss Python computes with it.
"$PY" - "$TMP/ref.json" <<'PY' || fail "model.pt outputs"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["exported_vs_reference"] < 1e-4, r
assert r["initial_vs_reference"] > 100 * r["exported_vs_reference"], r
print(f"ok: model.pt vs the PyTorch-trained model: max |logit difference| {r['exported_vs_reference']:.3g} "
      f"(initial file: {r['initial_vs_reference']:.3g})")
PY
"$PY" -c "import json, sys; print(repr(json.load(open(sys.argv[1]))['exported_loss_step0']))" "$TMP/ref.json" >"$TMP/exported.loss"
paste "$TMP/exported.loss" <(losses "$TMP/again/metrics.jsonl") | awk '
  { d = $1 - $2; if (d < 0) d = -d; r = d / $1; printf "model.pt step-0 loss: Python %s, Sluice %s (relative %g)\n", $1, $2, r; exit (r > 1e-5) }' ||
  fail "Sluice and Python disagree on model.pt"
reference_losses "$TMP/cnn_ref.json" >"$TMP/cnn_ref.losses"
for run in cnn_one cnn_two cnn_2x2; do same_as_reference "$TMP/cnn_ref.losses" $run; done
"$PY" - "$TMP/cnn_ref.json" "$TMP/cnn_one/metrics.jsonl" "$TMP/cnn_two/metrics.jsonl" <<'PY' || fail "cnn evaluation / model.pt"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["exported_vs_reference"] < 1e-4 and r["initial_vs_reference"] > 100 * r["exported_vs_reference"], r
for path in sys.argv[2:]:
    ev = [json.loads(l) for l in open(path) if "eval_loss" in l]
    assert len(ev) == 1 and ev[0]["eval_samples"] == 256, ev
    rel = abs(ev[0]["eval_loss"] - r["eval_loss"]) / r["eval_loss"]
    assert rel < 1e-5 and abs(ev[0]["eval_accuracy"] - r["eval_accuracy"]) < 1e-6, (path, ev, r)
    print(f"ok: {path.split('/')[-2]}: eval_loss {ev[0]['eval_loss']} vs PyTorch {r['eval_loss']:.9g} (relative {rel:.2g}), "
          f"eval_accuracy {ev[0]['eval_accuracy']} vs {r['eval_accuracy']}")
print(f"ok: cnn model.pt vs the PyTorch-trained model (eval mode): max |logit difference| {r['exported_vs_reference']:.3g}")
PY

# model.weights: a run from the initial model.path with the safetensors file Python wrote from
# model.pt's weights computes at step 0 the loss Python computes with them; then the refusals: a
# wrong shape, a missing parameter, a file that is not safetensors.
train from_weights --set model.weights="$TMP/weights.safetensors" --set training.steps=1 --set logging.interval=1
paste "$TMP/exported.loss" <(losses "$TMP/from_weights/metrics.jsonl") | awk '
  { d = $1 - $2; if (d < 0) d = -d; r = d / $1; printf "model.weights step-0 loss: Python %s, Sluice %s (relative %g)\n", $1, $2, r; exit (r > 1e-5) }' ||
  fail "Sluice from model.weights and Python disagree"
for bad in bad_shape:"but the model's is" missing:"lacks 1 of the model's" model:"not safetensors"; do
  file=${bad%%:*}
  ext=safetensors
  [ "$file" = model ] && ext=pt
  expect_failure "weights_$file" "${bad#*:}" "$TMP/weights_$file" -- \
    "$SLUICE" train "$TMP/ts.yaml" --set job.output_dir="$TMP/weights_$file" --set model.weights="$TMP/$file.$ext"
done
expect_failure export_other_model "model.path" "$TMP/other.pt" -- \
  "$SLUICE" export "$TMP/ts.yaml" --set model.path="$TMP/exported5.pt" --checkpoint "$TMP/one/checkpoints" -o "$TMP/other.pt"
expect_failure tied_with_hooks "is read by stages on several pipeline ranks (tied weights)" "$TMP/e6" -- \
  "$SLUICE" train "$TMP/ts.yaml" --set model.path="$TMP/tied.pt" "${two_by_two[@]}" --set optimizer.dist_adam.mode=hooks \
  --set job.output_dir="$TMP/e6"

# Errors.
expect_failure missing_path "model.path '$TMP/nope.pt' is not a file" "$TMP/e1" -- \
  "$SLUICE" train "$TMP/ts.yaml" --set model.path="$TMP/nope.pt" --set job.output_dir="$TMP/e1"
expect_failure not_torchscript "model.path '$TEXT' is not a TorchScript file" "$TMP/e2" -- \
  "$SLUICE" train "$TMP/ts.yaml" --set model.path="$TEXT" --set job.output_dir="$TMP/e2"
# A tensor record cut short inside a well-formed archive: refused at load, naming the tensor, not a crash.
expect_failure truncated_record "no tensor record in the file holds that many (a record is truncated or corrupted)" "$TMP/e5" -- \
  "$SLUICE" train "$TMP/ts.yaml" --set model.path="$TMP/truncated.pt" --set job.output_dir="$TMP/e5"
expect_failure wrong_inputs "forward of '$TMP/two.pt' takes 2 arguments (tokens: Tensor, positions: Tensor), model.inputs declares 1" "$TMP/e3" -- \
  "$SLUICE" train "$TMP/ts.yaml" --set model.path="$TMP/two.pt" --set job.output_dir="$TMP/e3"
expect_failure data_dependent_branch "whose condition depends on tensor values" "$TMP/e4" -- \
  "$SLUICE" train "$TMP/ts.yaml" --set model.path="$TMP/branchy.pt" --set job.output_dir="$TMP/e4"
