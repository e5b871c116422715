# A test cluster on this machine (sourced by the cluster tests, after
# tests/cli/lib.sh): N "hosts" h1..hN, each a network namespace with its own
# address on a bridge (in a namespace of its own) and a mount + UTS namespace
# with its own hostname, /tmp, /dev/shm and /etc/hosts. Without a private
# /tmp and /dev/shm, ranks on two "hosts" would share Open MPI's session
# directory and shared-memory segment names and crash. Everything is removed
# on exit, also when a test fails.
#
#   cluster_up N       make the hosts (needs root: ip netns, unshare, nsenter)
#   on_host H CMD...   run CMD on host H (its network, mounts and hostname)
#   host_bytes H       "tx rx" bytes counted on host H's eth0 so far
#   AGENT              an rsh agent for mpirun (plm_rsh_agent) that enters a host
#   WORK               a directory every host sees (not /tmp, which is private)
[ "$(id -u)" -eq 0 ] || fail "the cluster tests need root (network and mount namespaces)"
for tool in ip unshare nsenter; do command -v $tool >/dev/null || fail "$tool is missing (scripts/setup.sh installs it)"; done

CLUSTER_ID=$(( $$ % 100000 ))
NS="slc${CLUSTER_ID}"                       # namespace names: ${NS}h1.., ${NS}br
CLUSTER_RUN="/run/sluice-cluster-${CLUSTER_ID}"
SUBNET="10.231.$(( CLUSTER_ID % 250 ))"     # addresses exist only inside these namespaces
AGENT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/rsh-agent.sh"
WORK=$(mktemp -d -p /var/tmp sluice-cluster.XXXXXX)
CLUSTER_HOSTS=()
CLUSTER_CLEANUPS=()

cluster_down() {
  local i h pid
  for (( i = ${#CLUSTER_CLEANUPS[@]} - 1; i >= 0; i-- )); do eval "${CLUSTER_CLEANUPS[$i]}" >/dev/null 2>&1 || true; done
  CLUSTER_CLEANUPS=()
  for h in "${CLUSTER_HOSTS[@]}"; do
    # Anything still running on a host (ranks, daemons, its holder) dies with it.
    for pid in $(ip netns pids "${NS}$h" 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
    ip netns del "${NS}$h" 2>/dev/null || true
  done
  ip netns del "${NS}br" 2>/dev/null || true
  rm -rf "$CLUSTER_RUN" "$WORK"
}
trap 'cluster_down; rm -rf "$TMP"' EXIT

# Host H's namespaces are those of its holder, a process that sleeps in them;
# on_host and the rsh agent enter them by its pid ($CLUSTER_RUN/H.pid).
cluster_up() {
  local n=$1 i d
  mkdir -p "$CLUSTER_RUN"
  CLUSTER_SHARED_TMP=""
  for d in "$ROOT" "$(dirname "$SLUICE")"; do
    d=$(realpath "$d")
    case "$d" in /tmp/*) CLUSTER_SHARED_TMP+=" $d" ;; esac
  done
  printf '127.0.0.1 localhost\n' >"$CLUSTER_RUN/hosts"
  for (( i = 1; i <= n; i++ )); do printf '%s.%d h%d\n' "$SUBNET" $((i + 1)) "$i" >>"$CLUSTER_RUN/hosts"; done
  ip netns add "${NS}br" && ip -n "${NS}br" link add br0 type bridge && ip -n "${NS}br" link set br0 up &&
    ip -n "${NS}br" link set lo up || fail "cannot make the bridge namespace"
  for (( i = 1; i <= n; i++ )); do
    local h="h$i" a="${NS}a$i" b="${NS}b$i"
    CLUSTER_HOSTS+=("$h")
    ip netns add "${NS}$h" || fail "ip netns add ${NS}$h"
    ip link add "$a" type veth peer name "$b" &&
      ip link set "$a" netns "${NS}$h" && ip -n "${NS}$h" link set "$a" name eth0 &&
      ip link set "$b" netns "${NS}br" && ip -n "${NS}br" link set "$b" master br0 up &&
      ip -n "${NS}$h" addr add "$SUBNET.$((i + 1))/24" dev eth0 &&
      ip -n "${NS}$h" link set eth0 up && ip -n "${NS}$h" link set lo up || fail "cannot wire $h"
    mkfifo "$CLUSTER_RUN/$h.ready"
    # The private /tmp still shows the shared folders that live under /tmp
    # (the project and build, when cloned there), as a shared file system
    # would: bound aside, /tmp covered, bound back at the same path.
    {
    nsenter --net="/run/netns/${NS}$h" unshare --mount --uts --propagation private sh -c "
      set -e
      hostname $h
      i=0; for d in $CLUSTER_SHARED_TMP; do
        mkdir -p $CLUSTER_RUN/$h.keep\$i; mount --bind \$d $CLUSTER_RUN/$h.keep\$i; i=\$((i + 1)); done
      mount -t tmpfs -o mode=1777 tmpfs /tmp
      i=0; for d in $CLUSTER_SHARED_TMP; do
        mkdir -p \$d; mount --move $CLUSTER_RUN/$h.keep\$i \$d; i=\$((i + 1)); done
      mount -t tmpfs -o mode=1777 tmpfs /dev/shm
      mount --bind $CLUSTER_RUN/hosts /etc/hosts
      echo \$\$ >$CLUSTER_RUN/$h.pid
      echo ready >$CLUSTER_RUN/$h.ready
      exec sleep infinity" </dev/null >"$CLUSTER_RUN/$h.holder.log" 2>&1
    } </dev/null >/dev/null 2>&1 &
    disown $!  # the holder writes its pid (it becomes the sleep); killed by cluster_down, unreported
    local state
    state=$(timeout 20 cat "$CLUSTER_RUN/$h.ready") || true  # nothing comes when the holder failed
    [ "$state" = ready ] || { cat "$CLUSTER_RUN/$h.holder.log"; fail "cannot make $h's mounts and hostname"; }
  done
  # Every host is who it says, and knows every other by name.
  for (( i = 1; i <= n; i++ )); do
    [ "$(on_host "h$i" hostname)" = "h$i" ] || fail "h$i has the hostname $(on_host "h$i" hostname)"
    on_host h1 getent hosts "h$i" >/dev/null || fail "h1 cannot resolve h$i"
  done
}

on_host() {
  local h=$1
  shift
  nsenter --target "$(cat "$CLUSTER_RUN/$h.pid")" --net --mount --uts --wd="$WORK" -- "$@"
}

host_bytes() {
  ip netns exec "${NS}$1" sh -c 'echo "$(cat /sys/class/net/eth0/statistics/tx_bytes) $(cat /sys/class/net/eth0/statistics/rx_bytes)"'
}

# Where the holders' pids are, for the rsh agent (mpirun runs it, not this shell).
export SLUICE_CLUSTER_RUN="$CLUSTER_RUN"

# The cluster tests' job: the quickstart GPT made small, 2 stages x 2 replicas
# (DistAdam), against one process on this machine (reference_run).
since() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }
CFG="$ROOT/configs/quickstart.yaml"
STEPS=10
small=(--set training.steps=$STEPS --set logging.interval=5 --set model.layers=2 --set model.embd=64
       --set model.heads=4 --set model.block_size=32)
# Cut between the two blocks (node 33 of 65): what is tested here is where
# the ranks run and how they end, not the plan.
twobytwo=(--set pipeline.stages=2 --set pipeline.data_parallel=2 --set pipeline.microbatches=2
          --set optimizer.name=dist_adam --set "pipeline.cuts=[33]")
reference_run() {
  "$SLUICE" train "$CFG" "${small[@]}" --set pipeline.stages=1 --set job.output_dir="$WORK/one" >"$TMP/one.log" 2>&1 ||
    { cat "$TMP/one.log"; fail "1-process run"; }
}

# killed_run LABEL LAUNCH_ARGS...: `sluice launch` from h1 with rank 3 (on h3)
# SIGKILLed at step 3; it must exit non-zero (not by timeout) within 30 s of
# the kill, leaving no rank on any host. Sets rc and kill_to_exit; the output,
# each line prefixed with its time, is in $TMP/killed.log.
killed_run() {
  local label=$1 killed_at ended_at h
  shift
  set +e
  on_host h1 timeout 60 "$SLUICE" launch "$CFG" "${small[@]}" "${twobytwo[@]}" "$@" --set job.output_dir="$WORK/killed" \
    --set "cluster.env={OMPI_MCA_mpi_yield_when_idle: '1', SLUICE_FAULT: 'kill:rank=3:step=3'}" 2>&1 |
    while IFS= read -r line; do echo "$(date +%s.%N) $line"; done >"$TMP/killed.log"
  rc=${PIPESTATUS[0]}
  set -e
  [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || { cat "$TMP/killed.log"; fail "$label: exit $rc"; }
  killed_at=$(grep -m1 "SLUICE_FAULT: this rank dies" "$TMP/killed.log" | cut -d' ' -f1)
  ended_at=$(tail -1 "$TMP/killed.log" | cut -d' ' -f1)
  kill_to_exit=$(awk -v a="$killed_at" -v b="$ended_at" 'BEGIN { printf "%.1f", b - a }')
  awk -v t="$kill_to_exit" 'BEGIN { exit !(t <= 30) }' || fail "$label: the job took $kill_to_exit s to end"
  for h in h1 h2 h3; do
    ! on_host "$h" pgrep -f "job.output_dir=$WORK/killed" >/dev/null || fail "$label: ranks left running on $h"
  done
}
