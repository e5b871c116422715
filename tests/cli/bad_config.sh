#!/usr/bin/env bash
# Malformed or empty configs, degrees that do not divide, models too large
# for the machine, probes with bad input (duplicate keys, empty values,
# out-of-range numbers, a FIFO or a directory as the config, options another
# command takes, unknown commands), outputs that cannot work (a checkpoint.dir
# that is a file, a directory another job holds, a full disk): non-zero exit,
# a message naming the key or file, no hang, and nothing written to the
# output dir (or, for the full disk, nothing left half-written).
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
expect_failure missing_file "config file '$TMP/nope.yaml' does not exist" "$out" -- "$SLUICE" train "$TMP/nope.yaml"
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

# Probes with bad input: each a clear error naming the key, flag or file.
cat >"$TMP/dup_key.yaml" <<YAML
job: {output_dir: $out}
training:
  steps: 5
  steps: 7
YAML
expect_failure duplicate_key "'training.steps' is given twice (lines 3 and 4)" "$out" -- "$SLUICE" train "$TMP/dup_key.yaml"
cat >"$TMP/dup_section.yaml" <<YAML
job: {output_dir: $out}
training: {steps: 5}
training: {steps: 7}
YAML
expect_failure duplicate_section "'training' is given twice (lines 2 and 3)" "$out" -- "$SLUICE" train "$TMP/dup_section.yaml"
expect_failure empty_value "training.steps has no value" "$out" -- \
  "$SLUICE" train "$cfg" --set job.output_dir="$out" --set training.steps=
expect_failure empty_output_dir "job.output_dir has no value" "runs/sluice" -- "$SLUICE" train "$cfg" --set job.output_dir=
expect_failure huge_budget "memory.budget_mb must be at most" "$out" -- \
  "$SLUICE" train "$cfg" --set job.output_dir="$out" --set memory.budget_mb=1e300
expect_failure huge_window "memory.swap_window_mb must be at most" "$out" -- \
  "$SLUICE" train "$cfg" --set job.output_dir="$out" --set memory.swap_window_mb=1e300
expect_failure huge_bucket "optimizer.dist_adam.bucket_mb must be at most" "$out" -- \
  "$SLUICE" train "$cfg" --set job.output_dir="$out" --set optimizer.dist_adam.bucket_mb=1e300
expect_failure infinite_lr "optimizer.lr: expected a finite number, got '.inf'" "$out" -- \
  "$SLUICE" train "$cfg" --set job.output_dir="$out" --set optimizer.lr=.inf
expect_failure too_many_threads "job.threads_per_rank is 100000, more than this host's" "$out" -- \
  timeout 60 "$SLUICE" train "$cfg" --set job.output_dir="$out" --set job.threads_per_rank=100000
expect_failure train_takes_no_budget "sluice: train does not take --budget-mb (another command does" "$out" -- \
  "$SLUICE" train "$cfg" --set job.output_dir="$out" --budget-mb 10
expect_failure train_takes_no_output "sluice: train does not take -o" "$out" -- \
  "$SLUICE" train "$cfg" --set job.output_dir="$out" -o "$out/x.pb"
# Each command's help names its own flags, headed by the command as typed.
"$SLUICE" partition --help >"$TMP/help.txt"
grep '^Usage: sluice partition ' "$TMP/help.txt" >/dev/null && grep -e '--budget-mb' "$TMP/help.txt" >/dev/null ||
  { cat "$TMP/help.txt"; fail "sluice partition --help lacks its usage line or its flags"; }
! grep -e '--trace' "$TMP/help.txt" >/dev/null || fail "sluice partition --help lists train's --trace"
echo "ok: sluice partition --help"
cat >"$TMP/mlp.yaml" <<YAML
job: {output_dir: $out}
model: {name: mlp, input_dim: 32, hidden: 64, mlp_layers: 1, classes: 4}
data: {name: synthetic}
training: {steps: 2, global_batch_size: 48, micro_batch_size: 4}
pipeline: {stages: 12, microbatches: 12}
YAML
expect_failure mlp_too_many_stages "has 5 ops, so it splits into at most 5 pieces; pipeline.stages (12)" "$out" -- \
  "$SLUICE" train "$TMP/mlp.yaml"
expect_failure unknown_command "sluice: unknown command 'frobnicate'" "$out" -- "$SLUICE" frobnicate "$cfg"
expect_failure config_is_directory "config file '$TMP' is a directory, not a file" "$out" -- "$SLUICE" train "$TMP"
mkfifo "$TMP/fifo.yaml"
expect_failure config_is_fifo "config file '$TMP/fifo.yaml' is not a regular file" "$out" -- \
  timeout 20 "$SLUICE" train "$TMP/fifo.yaml"
expect_failure trace_missing "the trace '$TMP/nope.json' does not exist" "$out" -- \
  "$SLUICE" trace show "$TMP/nope.json" -o "$TMP/t.svg"
: >"$TMP/a_file"
expect_failure checkpoint_dir_is_file "checkpoint.dir '$TMP/a_file' is a file, not a directory" "$out" -- \
  "$SLUICE" train "$cfg" --set job.output_dir="$out" --set checkpoint.interval=5 --set checkpoint.dir="$TMP/a_file"

tiny=(--set model.layers=1 --set model.embd=16 --set model.heads=2 --set model.block_size=8 --set pipeline.stages=1
      --set logging.interval=1)
# Two jobs, one output_dir: the second is refused with the holder, the first's outputs untouched.
"$SLUICE" train "$cfg" "${tiny[@]}" --set training.steps=100000 --set job.output_dir="$TMP/held" >"$TMP/held.log" 2>&1 &
holder=$!
for _ in $(seq 600); do [ -s "$TMP/held/metrics.jsonl" ] && break; kill -0 $holder 2>/dev/null || break; sleep 0.1; done
[ -s "$TMP/held/metrics.jsonl" ] || { kill -9 $holder; cat "$TMP/held.log"; fail "the first job wrote no metrics"; }
rc=0
"$SLUICE" train "$cfg" "${tiny[@]}" --set training.steps=3 --set job.output_dir="$TMP/held" >"$TMP/second.log" 2>&1 || rc=$?
kill -TERM $holder; wait $holder || true
[ "$rc" -eq 2 ] || { cat "$TMP/second.log"; fail "second job on a held output_dir: exit $rc"; }
grep -q "job.output_dir '$TMP/held' is in use by another sluice job (pid $holder on host " "$TMP/second.log" ||
  { cat "$TMP/second.log"; fail "second job: the holder is not named"; }
[ "$(losses "$TMP/held/metrics.jsonl" | wc -l)" -gt 3 ] || fail "the first job's metrics were overwritten"
echo "ok: a second job on a held output_dir: $(grep -o "is in use by another sluice job ([^)]*)" "$TMP/second.log")"

# A disk that fills: during the run (metrics and log lines) and at start-up.
# Non-zero exit with the system's reason, no *.tmp left behind.
full="$TMP/full"
mkdir -p "$full"
mount -t tmpfs -o size=1m tmpfs "$full"
trap 'umount "$full" 2>/dev/null; rm -rf "$TMP"' EXIT
dd if=/dev/zero of="$full/filler" bs=1k count=960 status=none
rc=0
timeout 300 "$SLUICE" train "$cfg" "${tiny[@]}" --set training.steps=20000 --set job.output_dir="$full/run" \
  >"$TMP/full.log" 2>&1 || rc=$?
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || { tail -5 "$TMP/full.log"; fail "disk full during the run: exit $rc"; }
grep -qE "writing (metrics|log) file $full/run/.* failed: No space left on device" "$TMP/full.log" ||
  { tail -5 "$TMP/full.log"; fail "disk full during the run: no message naming the file and the reason"; }
echo "ok: disk full during the run (exit $rc): $(grep -oE "writing (metrics|log) file .* failed: No space left on device" "$TMP/full.log" | sed -n 1p)"
rm -rf "$full/run"
dd if=/dev/zero of="$full/filler2" bs=1k count=64 status=none 2>/dev/null || true
rc=0
timeout 120 "$SLUICE" train "$cfg" "${tiny[@]}" --set training.steps=5 --set job.output_dir="$full/start" \
  >"$TMP/full_start.log" 2>&1 || rc=$?
[ "$rc" -ne 0 ] || fail "disk full at start-up: exit 0"
grep -q "No space left on device" "$TMP/full_start.log" || { cat "$TMP/full_start.log"; fail "disk full at start-up: no reason"; }
[ -z "$(find "$full" -name '*.tmp')" ] || fail "disk full: left $(find "$full" -name '*.tmp')"
echo "ok: disk full at start-up (exit $rc): $(grep -o "[^:]*: No space left on device" "$TMP/full_start.log" | sed -n 1p)"
