#!/usr/bin/env bash
# Sets up, builds and runs the whole test suite (unit, multi-rank, CLI).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bash "$root/scripts/setup.sh"
bash "$root/scripts/build.sh"
source "$root/scripts/env.sh"
cd "$root/build"
ctest --output-on-failure --timeout 900 "$@"
