#!/usr/bin/env bash
# `sluice launch` under Slurm across two hosts of a test cluster (lib.sh):
# munged and slurmctld on the head host h1 (where jobs are submitted), a
# slurmd on each compute host h2 and h3 (entered with nsenter, so
# /sys/fs/cgroup stays visible to Slurm 22.05), all with their own files and
# ports under the cluster's run directory. 2 stages x 2 replicas (DistAdam)
# started by `srun --mpi=pmix` train with the per-step losses of 1 process
# (relative 1e-5), with the hosts named from Slurm's variables; the batch
# script written by `sluice launch --sbatch`, submitted with `sbatch --wait`,
# trains the same.
source "$(dirname "$0")/../cli/lib.sh"
source "$(dirname "$0")/lib.sh"
for tool in slurmctld slurmd srun sbatch sinfo munged; do
  command -v $tool >/dev/null || fail "$tool is missing (scripts/setup.sh installs slurm-wlm and munge)"
done

reference_run

t0=$(date +%s.%N)
cluster_up 3
S="$CLUSTER_RUN/slurm"
mkdir -p "$S/state" "$S/munge"
chmod 700 "$S/munge"
dd if=/dev/urandom of="$S/munge/munge.key" bs=1024 count=1 status=none && chmod 400 "$S/munge/munge.key"
on_host h1 munged --force --socket="$S/munge/socket" --key-file="$S/munge/munge.key" --pid-file="$S/munge/munged.pid" \
  --seed-file="$S/munge/seed" --log-file="$S/munge/munged.log" || { cat "$S/munge/munged.log"; fail "munged"; }
port=$(( 20000 + CLUSTER_ID % 20000 ))
cat >"$S/slurm.conf" <<CONF
ClusterName=sluicetest
SlurmctldHost=h1($SUBNET.2)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$port
SlurmdPort=$((port + 1))
AuthType=auth/munge
AuthInfo=socket=$S/munge/socket
CredType=cred/munge
StateSaveLocation=$S/state
SlurmdSpoolDir=$S/spool-%n
SlurmctldPidFile=$S/slurmctld.pid
SlurmdPidFile=$S/slurmd-%n.pid
SlurmctldLogFile=$S/slurmctld.log
SlurmdLogFile=$S/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
NodeName=h2 NodeAddr=$SUBNET.3 CPUs=2 State=UNKNOWN
NodeName=h3 NodeAddr=$SUBNET.4 CPUs=2 State=UNKNOWN
PartitionName=test Nodes=h2,h3 Default=YES MaxTime=INFINITE State=UP
CONF
export SLURM_CONF="$S/slurm.conf"
on_host h1 slurmctld -i || { cat "$S/slurmctld.log" 2>/dev/null; fail "slurmctld"; }
on_host h2 slurmd -N h2 || { cat "$S/slurmd-h2.log" 2>/dev/null; fail "slurmd on h2"; }
on_host h3 slurmd -N h3 || { cat "$S/slurmd-h3.log" 2>/dev/null; fail "slurmd on h3"; }
# Wait (bounded) for both nodes to register as idle.
for (( i = 0; i < 60; i++ )); do
  [ "$(on_host h1 sinfo -h -N -o '%T' 2>/dev/null | grep -c '^idle')" -eq 2 ] && break
  on_host h1 sinfo -h -N -o '%N %T' >"$TMP/sinfo" 2>&1 || true
  sleep 0.5  # polling the nodes' state (bounded), not waiting in their place
done
[ "$(on_host h1 sinfo -h -N -o '%T' | grep -c '^idle')" -eq 2 ] || { cat "$TMP/sinfo" "$S/slurmctld.log"; fail "the Slurm nodes did not come up"; }
echo "Slurm cluster up (head h1, compute h2 and h3) in $(since "$t0") s"

# --dry-run: the srun command.
launch=(--set cluster.launcher=slurm --set cluster.nodes=2 --set cluster.interface=eth0
        --set "cluster.env={OMPI_MCA_mpi_yield_when_idle: '1'}")
on_host h1 "$SLUICE" launch "$CFG" "${small[@]}" "${twobytwo[@]}" "${launch[@]}" --set job.output_dir="$WORK/dry" \
  --dry-run >"$TMP/dry.out" 2>"$TMP/dry.err" || { cat "$TMP/dry.err"; fail "dry run"; }
grep -q "^srun --mpi=pmix -N 2 -n 4 --kill-on-bad-exit=1 --export=ALL,MASTER_PORT=29500,OMPI_MCA_btl_tcp_if_include=eth0,OMPI_MCA_mpi_yield_when_idle=1 $SLUICE worker $CFG " \
  "$TMP/dry.out" || { cat "$TMP/dry.out"; fail "dry run: not the expected srun command"; }
echo "ok: --dry-run prints: $(cut -c1-150 "$TMP/dry.out")..."

t0=$(date +%s.%N)
on_host h1 "$SLUICE" launch "$CFG" "${small[@]}" "${twobytwo[@]}" "${launch[@]}" --set job.output_dir="$WORK/srun" \
  >"$TMP/srun.log" 2>&1 || { cat "$TMP/srun.log" "$S/slurmd-h3.log"; fail "2 x 2 under srun"; }
took=$(since "$t0")
compare_losses "$WORK/one" "$WORK/srun" $STEPS
grep -q "rank 3 of 4 on host h3 (node 1 of 2, local rank 1 of 2; started by slurm)" "$WORK/srun/logs/rank_3.log" &&
  grep -q "RANK=3 LOCAL_RANK=1 WORLD_SIZE=4 LOCAL_WORLD_SIZE=2 NODE_RANK=1 GROUP_RANK=1 MASTER_ADDR=h2 MASTER_PORT=29500" \
    "$WORK/srun/logs/rank_3.log" || { head -3 "$WORK/srun/logs/rank_3.log"; fail "rank 3's log does not name its host and torchrun variables"; }
echo "ok: 2 stages x 2 replicas under srun --mpi=pmix on 2 hosts in $took s (launch to exit), losses equal to 1 process"

# The batch script, submitted and waited for.
on_host h1 "$SLUICE" launch "$CFG" "${small[@]}" "${twobytwo[@]}" --set cluster.interface=eth0 \
  --set "cluster.env={OMPI_MCA_mpi_yield_when_idle: '1'}" --set job.output_dir="$WORK/batch" --set cluster.nodes=2 \
  --sbatch "$WORK/job.sbatch" >"$TMP/sbatch.out" 2>&1 || { cat "$TMP/sbatch.out"; fail "--sbatch"; }
grep -q "^#SBATCH --nodes=2" "$WORK/job.sbatch" && grep -q "^#SBATCH --ntasks=4" "$WORK/job.sbatch" &&
  grep -q "^exec $SLUICE launch $CFG --set cluster.launcher=slurm" "$WORK/job.sbatch" || { cat "$WORK/job.sbatch"; fail "the batch script"; }
t0=$(date +%s.%N)
on_host h1 sbatch --wait "$WORK/job.sbatch" >"$TMP/sbatch.log" 2>&1 ||
  { cat "$TMP/sbatch.log" "$WORK"/batch/slurm-*.out; fail "sbatch --wait of the written script"; }
compare_losses "$WORK/one" "$WORK/batch" $STEPS
echo "ok: the script from --sbatch ran under sbatch in $(since "$t0") s, losses equal to 1 process"

# A rank killed (SIGKILL) on h3: srun ends every task on both hosts; the message names h3 and rank 3.
killed_run "killed rank under srun" "${launch[@]}"
grep -qE "sluice: the job failed: rank 3 on h3: Killed" "$TMP/killed.log" ||
  { cat "$TMP/killed.log"; fail "killed rank under srun: the message does not name rank 3 on h3"; }
echo "ok: rank 3 killed on h3 under srun: the job ended on both hosts $kill_to_exit s later (exit $rc): $(grep -o 'sluice: the job failed.*' "$TMP/killed.log")"
