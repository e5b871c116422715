#!/usr/bin/env bash
# Malformed or empty configs, degrees that do not divide and models too large
# for the machine: non-zero exit, a message naming the key, and nothing
# written to the output dir.
source "$(dirname "$0")/lib.sh"
cfg="$ROOT/configs/quickstart.yaml"
out="$TMP/out"
cat >"$TMP/unknown.yaml" <<YAML
job: {output_dir: $out}
pipeline: {stages: 2, stagez: 3}
YAML
expect_failure unknown_key "unknown key 'pipeline.stagez'" "$out" -- "$SLUICE" train "$TMP/unknown.yaml"
expect_failure batch_does_not_divide "training.global_batch_size (15) must equal" "$out" -- \
  "$SLUICE" train "$cfg" --set job.output_dir="$out" --set training.global_batch_size=15
expect_failure bad_value "pipeline.stages: expected an integer, got 'two'" "$out" -- \
  "$SLUICE" train "$cfg" --set job.output_dir="$out" --set pipeline.stages=two
expect_failure missing_file "cannot read config file" "$out" -- "$SLUICE" train "$TMP/nope.yaml"
expect_failure world_mismatch "ranks but MPI started 3" "$out" -- \
  mpirun -np 3 --oversubscribe --bind-to none "$SLUICE" worker "$cfg" --set job.output_dir="$out"
expect_failure bad_cut "would send a non-tensor value" "$out" -- \
  "$SLUICE" train "$cfg" --set job.output_dir="$out" --set pipeline.stages=2 \
  --set "pipeline.cuts=[9]" --set training.steps=1
: >"$TMP/empty.yaml"
expect_failure empty_config "is empty: give at least the model and training sections" "$out" -- \
  "$SLUICE" train "$TMP/empty.yaml"
# block_size 100000: attention maps and causal masks of block_size^2, refused from the config before anything
# is allocated, naming the keys that drive the largest part.
expect_failure model_too_large "the largest part is one micro-batch's activations (training.micro_batch_size, model.block_size" \
  "$out" -- "$SLUICE" train "$cfg" --set job.output_dir="$out" --set model.block_size=100000
expect_failure model_too_large_worker "this model needs about" "$out" -- \
  mpirun -np 2 --oversubscribe --bind-to none "$SLUICE" worker "$cfg" --set job.output_dir="$out" \
  --set model.block_size=100000
