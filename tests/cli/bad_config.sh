#!/usr/bin/env bash
# Malformed configs and degrees that do not divide: non-zero exit, a message
# naming the key, and nothing written to the output dir.
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
