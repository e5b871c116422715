#!/usr/bin/env bash
# Runs gtests by name, each on the rank counts it declares (tests/Ranks.h),
# as CTest would: brings build/tests/sluice_tests up to date first (seconds
# when little changed; SLUICE_NO_BUILD=1 skips that), then runs it directly
# for 1 rank and under mpirun -np N for more.
#
#   bash scripts/gtest.sh Capture.ProtobufRoundTrip             # one test, 1 rank
#   bash scripts/gtest.sh Communicator.P2PRingWithShapeCheck    # mpirun -np 2, then -np 3
#   bash scripts/gtest.sh 'Equivalence.*' 'Split.*'             # gtest patterns (* and ?)
#   bash scripts/gtest.sh Capture.ProtobufRoundTrip -- --gtest_repeat=3   # after --: to the binary
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/scripts/env.sh"
patterns=() extra=()
while [ $# -gt 0 ]; do
  if [ "$1" = "--" ]; then shift; extra=("$@"); break; fi
  patterns+=("$1"); shift
done
[ ${#patterns[@]} -gt 0 ] || { sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
if [ "${SLUICE_NO_BUILD:-0}" != 1 ]; then
  [ -f "$root/build/CMakeCache.txt" ] || bash "$root/scripts/build.sh" sluice_tests >/dev/null
  cmake --build "$root/build" --target sluice_tests >/dev/null
fi
list="$root/build/tests/sluice_tests.list"
bin="$root/build/tests/sluice_tests"
[ -f "$list" ] || { echo "gtest: $list is missing: build sluice_tests (scripts/build.sh sluice_tests)" >&2; exit 2; }

# The tests each pattern selects, grouped by rank count: "RANKS TEST" lines.
declare -A byRanks=()
while read -r suite test ranks; do
  for p in "${patterns[@]}"; do
    # shellcheck disable=SC2053
    if [[ "$suite.$test" == $p ]]; then
      for r in ${ranks//,/ }; do byRanks[$r]+="${byRanks[$r]:+:}$suite.$test"; done
      break
    fi
  done
done <"$list"
[ ${#byRanks[@]} -gt 0 ] || { echo "gtest: no test matches ${patterns[*]} (see $list)" >&2; exit 2; }

export OMP_NUM_THREADS=1 OMPI_MCA_mpi_yield_when_idle=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
export SLUICE_SOURCE_DIR="$root"
rc=0
for r in $(printf '%s\n' "${!byRanks[@]}" | sort -n); do
  filter=${byRanks[$r]}
  echo "== $r rank(s): $filter"
  if [ "$r" -eq 1 ]; then
    "$bin" --gtest_filter="$filter" "${extra[@]}" || rc=1
  else
    mpirun -np "$r" --oversubscribe --bind-to none "$bin" --gtest_filter="$filter" "${extra[@]}" || rc=1
  fi
done
exit $rc
