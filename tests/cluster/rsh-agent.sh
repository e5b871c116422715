#!/usr/bin/env bash
# An ssh stand-in for the test cluster (tests/cluster/lib.sh): mpirun's
# plm_rsh_agent runs `AGENT [options] HOST COMMAND...`; this enters HOST's
# namespaces and runs COMMAND with a shell, in a clean login-like environment
# (as ssh would: nothing of the caller's environment crosses).
set -euo pipefail
while [ $# -gt 0 ] && [ "${1#-}" != "$1" ]; do
  case "$1" in -o | -p | -l | -i) shift 2 ;; *) shift ;; esac
done
host=$1
shift
: "${SLUICE_CLUSTER_RUN:?not inside a test cluster (tests/cluster/lib.sh)}"
[ -f "$SLUICE_CLUSTER_RUN/$host.pid" ] || { echo "rsh-agent: no host $host in the test cluster" >&2; exit 255; }
exec nsenter --target "$(cat "$SLUICE_CLUSTER_RUN/$host.pid")" --net --mount --uts -- \
  env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME="${HOME:-/root}" \
  SLUICE_CLUSTER_RUN="$SLUICE_CLUSTER_RUN" /bin/sh -c "$*"
