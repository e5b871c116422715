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

# `sluice launch` with bad hostfiles: the line or the arithmetic, exit 2, nothing written.
two=(--set pipeline.stages=2 --set job.output_dir="$out")
printf '' >"$TMP/empty_hosts"
printf 'h1 slots=1\nh2 slots=1\nh1 slots=1\n' >"$TMP/dup_hosts"
printf 'h1 slots=2\nh2 slots=0\n' >"$TMP/zero_hosts"
printf 'h1 slots=2 gpus=4\n' >"$TMP/key_hosts"
printf 'h1 slots=1\n' >"$TMP/small_hosts"
expect_failure hostfile_missing "hostfile error: $TMP/nope_hosts does not exist" "$out" -- \
  "$SLUICE" launch "$cfg" "${two[@]}" --hostfile "$TMP/nope_hosts" --dry-run
expect_failure hostfile_empty "hostfile error: $TMP/empty_hosts lists no hosts" "$out" -- \
  "$SLUICE" launch "$cfg" "${two[@]}" --hostfile "$TMP/empty_hosts"
expect_failure hostfile_duplicate "hostfile error: $TMP/dup_hosts:3: host h1 is listed twice" "$out" -- \
  "$SLUICE" launch "$cfg" "${two[@]}" --hostfile "$TMP/dup_hosts"
expect_failure hostfile_zero_slots "hostfile error: $TMP/zero_hosts:2: slots must be >= 1 for host h2, got 0" "$out" -- \
  "$SLUICE" launch "$cfg" "${two[@]}" --hostfile "$TMP/zero_hosts"
expect_failure hostfile_unknown_key "hostfile error: $TMP/key_hosts:1: unknown entry 'gpus=4'" "$out" -- \
  "$SLUICE" launch "$cfg" "${two[@]}" --hostfile "$TMP/key_hosts"
expect_failure hostfile_too_small "= 2 ranks, but the hostfile has 1 = 1 slots on 1 host" "$out" -- \
  "$SLUICE" launch "$cfg" "${two[@]}" --hostfile "$TMP/small_hosts"
expect_failure launch_without_hosts "mpirun needs the hosts: set cluster.hostfile or pass --hostfile" "$out" -- \
  "$SLUICE" launch "$cfg" "${two[@]}" --set cluster.launcher=mpirun
# A 2-host hostfile: --dry-run prints the exact mpirun command and writes nothing.
printf 'node1 slots=2\nnode2 slots=2\n' >"$TMP/hosts"
"$SLUICE" launch "$cfg" "${two[@]}" --hostfile "$TMP/hosts" --set cluster.interface=eth0 --dry-run >"$TMP/dry.out" 2>/dev/null ||
  fail "launch --dry-run failed"
expected="mpirun -np 2 --hostfile $TMP/hosts --map-by slot --bind-to none"
[ "$(id -u)" -eq 0 ] && expected+=" --allow-run-as-root"
expected+=" --mca plm_rsh_agent ssh --mca btl_tcp_if_include eth0 --mca oob_tcp_if_include eth0 -x MASTER_ADDR=node1"
expected+=" -x MASTER_PORT=29500 $(realpath "$SLUICE") worker $cfg --set pipeline.stages=2 --set job.output_dir=$out"
expected+=" --set cluster.interface=eth0 --set cluster.hostfile=$TMP/hosts"
[ "$(cat "$TMP/dry.out")" = "$expected" ] || { printf '%s\n%s\n' "$(cat "$TMP/dry.out")" "$expected"; fail "launch --dry-run: not the expected command"; }
[ ! -e "$out" ] || fail "launch --dry-run wrote $out"
echo "ok: launch --dry-run prints: $(cat "$TMP/dry.out")"
