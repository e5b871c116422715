#!/usr/bin/env bash
# Sets up, builds and runs the whole test suite (unit, multi-rank, CLI),
# then says where the time went: the build, the tests, the ten slowest.
# Arguments go to ctest (e.g. `-R cli_memory`, `-L np2`, `-j1`). Tests run side
# by side as far as the cores allow: each asks CTest for as many processors as
# it has ranks (tests/CMakeLists.txt), so a 2-core machine runs two 1-rank
# gtest suites at once and every multi-rank or CLI test alone.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bash "$root/scripts/setup.sh"
start=$(date +%s)
bash "$root/scripts/build.sh"
built=$(date +%s)
source "$root/scripts/env.sh"
cd "$root/build"
log="$root/build/Testing/ctest-output.log"
mkdir -p "$(dirname "$log")"
rc=0
ctest --output-on-failure --timeout 900 -j "$(nproc)" "$@" 2>&1 | tee "$log" || rc=${PIPESTATUS[0]}
done=$(date +%s)
echo
echo "time: build $((built - start)) s, tests $((done - built)) s, in all $((done - start)) s (ctest exit $rc)"
echo "the ten slowest tests:"
sed -n 's/^ *[0-9]*\/[0-9]* Test *#[0-9]*: \([^ ]*\) .* \([0-9.]*\) sec$/\2 \1/p' "$log" | sort -rn | head -10 |
  awk '{ printf "  %8.1f s  %s\n", $1, $2 }'
exit "$rc"
