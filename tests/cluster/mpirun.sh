#!/usr/bin/env bash
# `sluice launch` with mpirun from a head host (h1) onto two other hosts (h2,
# h3) of a test cluster (lib.sh: network namespaces on a bridge, each with its
# own hostname, /tmp and /dev/shm; an rsh agent in place of ssh):
#  (a) 2 stages x 2 replicas (DistAdam), 2 ranks per host, train with the
#      per-step losses of 1 process (relative 1e-5); the data-parallel
#      reductions crossed the hosts' links (their byte counters grew by at
#      least the parameters' bytes each step); the settings table and the
#      rank logs name the hosts and the torchrun variables;
#  (c) a rank killed (SIGKILL) on h3 ends the job on both hosts,
#      non-zero, with that host and rank named, within 30 s.
source "$(dirname "$0")/../cli/lib.sh"
source "$(dirname "$0")/lib.sh"

# The reference: one process, on this machine.
reference_run

t0=$(date +%s.%N)
cluster_up 3
echo "cluster of 3 hosts up in $(since "$t0") s"
printf '# the test cluster: ranks on h2 and h3, launched from h1\nh2 slots=2\nh3 slots=2\n' >"$WORK/hostfile"
launch=(--hostfile "$WORK/hostfile" --set cluster.interface=eth0 --set cluster.rsh_agent="$AGENT"
        --set "cluster.env={OMPI_MCA_mpi_yield_when_idle: '1'}")

# --dry-run prints the command and runs nothing.
on_host h1 "$SLUICE" launch "$CFG" "${small[@]}" "${twobytwo[@]}" "${launch[@]}" --set job.output_dir="$WORK/dry" \
  --dry-run >"$TMP/dry.out" 2>"$TMP/dry.err" || { cat "$TMP/dry.err"; fail "dry run"; }
grep -q "^mpirun -np 4 --hostfile $WORK/hostfile --map-by slot .*--mca plm_rsh_agent $AGENT --mca btl_tcp_if_include eth0 --mca oob_tcp_if_include eth0 -x MASTER_ADDR=h2 .* worker $CFG " \
  "$TMP/dry.out" || { cat "$TMP/dry.out"; fail "dry run: not the expected mpirun command"; }
[ ! -e "$WORK/dry" ] || fail "dry run wrote $WORK/dry"
echo "ok: --dry-run prints: $(cut -c1-160 "$TMP/dry.out")..."

# (a) 2 x 2 on two hosts.
read -r tx1 rx1 < <(host_bytes h2)
read -r tx2 rx2 < <(host_bytes h3)
t0=$(date +%s.%N)
on_host h1 "$SLUICE" launch "$CFG" "${small[@]}" "${twobytwo[@]}" "${launch[@]}" --set job.output_dir="$WORK/two_hosts" \
  >"$TMP/two_hosts.log" 2>&1 || { cat "$TMP/two_hosts.log"; fail "2 x 2 on two hosts"; }
took=$(since "$t0")
read -r tx1b rx1b < <(host_bytes h2)
read -r tx2b rx2b < <(host_bytes h3)
compare_losses "$WORK/one" "$WORK/two_hosts" $STEPS
log0="$WORK/two_hosts/logs/rank_0.log"
grep -qE "host h2 +\(stage 0, replica 0\) \(stage 1, replica 0\)" "$log0" &&
  grep -qE "host h3 +\(stage 0, replica 1\) \(stage 1, replica 1\)" "$log0" || { cat "$log0"; fail "the settings table does not place the stages on the hosts"; }
grep -q "rank 3 of 4 on host h3 (node 1 of 2, local rank 1 of 2; started by mpirun)" "$WORK/two_hosts/logs/rank_3.log" &&
  grep -q "RANK=3 LOCAL_RANK=1 WORLD_SIZE=4 LOCAL_WORLD_SIZE=2 NODE_RANK=1 GROUP_RANK=1 MASTER_ADDR=h2 MASTER_PORT=29500" \
    "$WORK/two_hosts/logs/rank_3.log" || { head -3 "$WORK/two_hosts/logs/rank_3.log"; fail "rank 3's log does not name its host and torchrun variables"; }
grep -q "^\[rank 2 on h3\]" "$TMP/two_hosts.log" || fail "console lines do not name the host"
# Each step, each replica's stages reduce-scatter and all-gather their
# gradients and parameters with the other host: half of them each way, twice,
# so each host sends at least the parameters' bytes per step.
param_bytes=$(grep -ho "parameter tensors ([0-9.]* [KM]iB)" "$WORK/two_hosts/logs/rank_0.log" "$WORK/two_hosts/logs/rank_1.log" |
  awk '{ v = substr($3, 2); u = $4; m = (u ~ /KiB/) ? 1024 : 1048576; s += v * m } END { printf "%d", s }')
sent1=$((tx1b - tx1)); sent2=$((tx2b - tx2)); need=$((STEPS * param_bytes * 9 / 10))
echo "traffic on the links: h2 sent $sent1 B, received $((rx1b - rx1)) B; h3 sent $sent2 B, received $((rx2b - rx2)) B; parameters $param_bytes B x $STEPS steps"
[ "$sent1" -ge "$need" ] && [ "$sent2" -ge "$need" ] || fail "less traffic crossed the links than the reductions need ($need B per host)"
echo "ok: 2 stages x 2 replicas on 2 hosts (launched from a third) in $took s (launch to exit), losses equal to 1 process"

# (c) SIGKILL of rank 3 (on h3) at step 3: every rank on both hosts ends, with h3 and rank 3 named.
killed_run "killed rank" "${launch[@]}"
grep -qE "sluice: the job failed: rank 3 on h3 died on signal 9 \(Killed\)" "$TMP/killed.log" ||
  { cat "$TMP/killed.log"; fail "killed rank: the message does not name rank 3 on h3"; }
! grep -qE "unexpectedly disconnected|ORTE_ERROR_LOG|MPI_ABORT" "$TMP/killed.log" || { cat "$TMP/killed.log"; fail "Open MPI noise printed"; }
echo "ok: rank 3 killed on h3: the job ended on both hosts $kill_to_exit s later (exit $rc): $(grep -o 'sluice: the job failed.*' "$TMP/killed.log")"
