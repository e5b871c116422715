#!/usr/bin/env bash
# `sluice export --format safetensors` for the built-in language models with
# their default settings (issue 53): gpt and llama, with attention fused by
# capture (the default; the fused graph never reads GPT's causal-mask
# buffer, so no checkpoint holds it) and unfused. Each exports a 2-step
# checkpoint; the file holds every parameter and buffer:
# - gpt: loads strictly into the same model in PyTorch (bench/gpt_torch.py,
#   module paths and shapes alike), its mask equal to tril(ones);
# - both: start a new Sluice run as model.weights (every parameter checked
#   by name, shape and dtype; buffers by name too);
# - the fused runs resume unfused and with model.weights set: neither makes
#   the checkpoint "another model".
source "$(dirname "$0")/lib.sh"
[ -x "$PY" ] || fail "$PY is needed (scripts/setup.sh makes it)"
CFG="$ROOT/configs/quickstart.yaml"
for model in gpt llama; do
  for fuse in true false; do
    name=${model}_fuse_$fuse
    args=("${SMALL[@]}" --set model.name=$model --set model.fuse_attention=$fuse --set pipeline.stages=1
          --set training.steps=2 --set checkpoint.interval=2 --set logging.interval=1)
    [ $model = llama ] && args+=(--set model.kv_heads=2)
    "$SLUICE" train "$CFG" "${args[@]}" --set job.output_dir="$TMP/$name" >"$TMP/$name.log" 2>&1 ||
      { cat "$TMP/$name.log"; fail "$name: training"; }
    "$SLUICE" export "$CFG" "${args[@]}" --set job.output_dir="$TMP/$name" --checkpoint "$TMP/$name/checkpoints" \
      --format safetensors -o "$TMP/$name.safetensors" >"$TMP/$name.export.log" 2>&1 ||
      { cat "$TMP/$name.export.log"; fail "$name: sluice export --format safetensors"; }
    "$SLUICE" train "$CFG" "${args[@]}" --set model.weights="$TMP/$name.safetensors" --set training.steps=1 \
      --set checkpoint.interval=0 --set job.output_dir="$TMP/${name}_again" >"$TMP/${name}_again.log" 2>&1 ||
      { cat "$TMP/${name}_again.log"; fail "$name: model.weights from the export"; }
    "$PY" - "$ROOT/bench" "$model" "$TMP/$name.safetensors" <<'PY' || fail "$name: the export"
import sys, types
import torch
from safetensors.torch import load_file
sys.path.insert(0, sys.argv[1])
weights = load_file(sys.argv[3])
if sys.argv[2] == "gpt":
    from gpt_torch import GPT
    model = GPT(types.SimpleNamespace(vocab=256, block=32, embd=64, heads=4, layers=2))
    model.load_state_dict(weights, strict=True)
    for layer in range(2):
        assert torch.equal(weights[f"h.{layer}.attn.mask"], torch.tril(torch.ones(32, 32)).view(1, 1, 32, 32))
PY
    if [ $fuse = true ]; then
      # Resuming is not refused as "another model" when only capture's fusion or the starting weights' file
      # differ (issue 53): the run goes on from its checkpoint, the unfused graph's mask the model's own.
      "$SLUICE" train "$CFG" "${args[@]}" --set model.fuse_attention=false --set model.weights="$TMP/$name.safetensors" \
        --set training.steps=3 --set job.output_dir="$TMP/$name" >"$TMP/${name}_resume.log" 2>&1 ||
        { cat "$TMP/${name}_resume.log"; fail "$name: resume unfused, with model.weights"; }
      grep -q "resumed from $TMP/$name/checkpoints/step_00000002 at step 2" "$TMP/${name}_resume.log" ||
        { cat "$TMP/${name}_resume.log"; fail "$name: did not resume"; }
    fi
    echo "ok: $name: exported with $(grep -o "the [0-9]* parameters and buffers" "$TMP/$name.export.log")"
  done
done
