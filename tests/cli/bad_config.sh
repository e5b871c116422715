#!/usr/bin/env bash
# A bad config or command line on the real binary (exit 2, the message,
# nothing written), errors raised on the ranks (a world of the wrong size, a
# cut that cannot be, a model too large for the machine), a FIFO as the
# config, `sluice launch` with a bad hostfile or none, its --dry-run, a
# directory another job holds and a disk that fills: non-zero exit, a message
# naming the key or file, no hang, and nothing written to the output dir (or,
# for the full disk, nothing left half-written).
source "$(dirname "$0")/lib.sh"
# The messages of every config, command-line, hostfile and output check are
# unit cases (tests/config/ConfigTest.cpp's MalformedConfig rows,
# CommandLineTest.cpp, ModelSetupTest.cpp); here, what needs the real binary:
# exit 2 with the message printed and nothing written, errors raised on the
# ranks (mpirun), a FIFO as the config (no hang), `sluice launch`, a held
# output directory and a full disk.
cfg="$ROOT/configs/quickstart.yaml"
out="$TMP/out"
cat >"$TMP/unknown.yaml" <<YAML
job: {output_dir: $out}
pipeline: {stages: 2, stagez: 3}
YAML
expect_failure unknown_key "unknown key 'pipeline.stagez'" "$out" -- "$SLUICE" train "$TMP/unknown.yaml"
[ "$FAILURE_RC" -eq 2 ] || fail "unknown_key: exit $FAILURE_RC, expected 2 (a config error)"
expect_failure unknown_command "sluice: unknown command 'frobnicate'" "$out" -- "$SLUICE" frobnicate "$cfg"
[ "$FAILURE_RC" -eq 2 ] || fail "unknown_command: exit $FAILURE_RC, expected 2"
expect_failure world_mismatch "ranks but MPI started 3" "$out" -- \
  mpirun -np 3 --oversubscribe --bind-to none "$SLUICE" worker "$cfg" --set job.output_dir="$out"
expect_failure bad_cut "would send a non-tensor value" "$out" -- \
  "$SLUICE" train "$cfg" --set job.output_dir="$out" --set pipeline.stages=2 \
  --set "pipeline.cuts=[9]" --set training.steps=1
# block_size 100000: refused on the ranks too (`sluice worker` skips the launcher's check).
expect_failure model_too_large_worker "this model needs about" "$out" -- \
  mpirun -np 2 --oversubscribe --bind-to none "$SLUICE" worker "$cfg" --set job.output_dir="$out" \
  --set model.block_size=100000

# `sluice launch`: a bad hostfile (the line, exit 2, nothing written), no hosts at all,
# and --dry-run printing the exact mpirun command.
two=(--set pipeline.stages=2 --set job.output_dir="$out")
printf 'h1 slots=1\nh2 slots=1\nh1 slots=1\n' >"$TMP/dup_hosts"
expect_failure hostfile_duplicate "hostfile error: $TMP/dup_hosts:3: host h1 is listed twice" "$out" -- \
  "$SLUICE" launch "$cfg" "${two[@]}" --hostfile "$TMP/dup_hosts"
[ "$FAILURE_RC" -eq 2 ] || fail "hostfile_duplicate: exit $FAILURE_RC, expected 2"
printf 'h1 slots=1\n' >"$TMP/small_hosts"
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

mkfifo "$TMP/fifo.yaml"
expect_failure config_is_fifo "config file '$TMP/fifo.yaml' is not a regular file" "$out" -- \
  timeout 20 "$SLUICE" train "$TMP/fifo.yaml"

tiny=(--set model.layers=1 --set model.embd=16 --set model.heads=2 --set model.block_size=8 --set pipeline.stages=1
      --set logging.interval=1)
# Two jobs, one output_dir: the second is refused with the holder, the first's outputs untouched.
"$SLUICE" train "$cfg" "${tiny[@]}" --set training.steps=100000 --set job.output_dir="$TMP/held" >"$TMP/held.log" 2>&1 &
holder=$!
for _ in $(seq 600); do [ -s "$TMP/held/metrics.jsonl" ] && break; kill -0 $holder 2>/dev/null || break; sleep 0.1; done
[ -s "$TMP/held/metrics.jsonl" ] || { kill -9 $holder; cat "$TMP/held.log"; fail "the first job wrote no metrics"; }
rc=0
"$SLUICE" train "$cfg" "${tiny[@]}" --set training.steps=3 --set job.output_dir="$TMP/held" >"$TMP/second.log" 2>&1 || rc=$?
# Issue 53: a job whose checkpoint.dir lies inside the held output_dir is refused too (it took a lock of its own).
rc_inside=0
"$SLUICE" train "$cfg" "${tiny[@]}" --set training.steps=3 --set job.output_dir="$TMP/other" \
  --set checkpoint.dir="$TMP/held/checkpoints" >"$TMP/inside.log" 2>&1 || rc_inside=$?
kill -TERM $holder; wait $holder || true
[ "$rc_inside" -eq 2 ] && grep -q "checkpoint.dir '$TMP/held/checkpoints' is inside '$TMP/held', which another sluice job is using" \
  "$TMP/inside.log" || { cat "$TMP/inside.log"; fail "a checkpoint.dir inside a held output_dir: exit $rc_inside"; }
[ ! -e "$TMP/other" ] || fail "the refused job wrote $TMP/other"
echo "ok: a checkpoint.dir inside another job's output_dir: $(grep -o "is inside .*" "$TMP/inside.log" | cut -c1-90)..."
# The first job has ended (its SIGTERM stop wrote a checkpoint); a new run there that would start afresh is refused
# and leaves its metrics and checkpoints as they were.
[ -f "$TMP/held/checkpoints/latest" ] || fail "the stopped job wrote no checkpoint"
before=$(cd "$TMP/held" && find . -type f ! -name .sluice.lock -exec md5sum {} + | sort)
expect_failure afresh_over_a_run "holds an earlier run ($TMP/held/metrics.jsonl and checkpoints in $TMP/held/checkpoints)" \
  "$TMP/none" -- "$SLUICE" train "$cfg" "${tiny[@]}" --set training.steps=3 --set job.output_dir="$TMP/held" \
  --set checkpoint.resume=none
[ "$(cd "$TMP/held" && find . -type f ! -name .sluice.lock -exec md5sum {} + | sort)" = "$before" ] ||
  fail "the refused run changed the earlier run's files"
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
