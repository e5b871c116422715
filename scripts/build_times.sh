#!/usr/bin/env bash
# The slowest steps of the last build, from ninja's log (build/.ninja_log):
# seconds per translation unit (or link), the total and how many there were.
#   bash scripts/build_times.sh [N]     # the N slowest (default 25)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
log="$root/build/.ninja_log"
[ -f "$log" ] || { echo "build_times: no $log (build with scripts/build.sh first; ninja is used when installed)" >&2; exit 2; }
# The last entry of each output wins (a rebuild appends).
steps=$(awk 'NR > 1 { t[$4] = ($2 - $1) / 1000 } END { for (k in t) printf "%7.1f s  %s\n", t[k], k }' "$log" |
  sed 's|CMakeFiles/[a-z_]*\.dir/||' | sort -rn)
echo "$steps" | head -"${1:-25}"
echo "$steps" | awk '{ s += $1; n++ } END { printf "%7.1f s  in all, %d steps (CPU seconds; the build ran them on all cores)\n", s, n }'
