# Shared by the benchmarks, sourced first: source "$(dirname "$0")/lib.sh".
# Sets strict mode, $root (the checkout), the environment (scripts/env.sh) and
# $sluice, built when missing.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$root/scripts/env.sh"
sluice="${SLUICE_BIN:-$root/build/launcher/sluice}"  # SLUICE_BIN: another build (scripts/gpu/check.sh)
[ -x "$sluice" ] || bash "$root/scripts/build.sh" sluice

# median: the median of the numbers on stdin, one per line (nothing for none).
median() {
  sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) exit; if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# median_step_time METRICS_JSONL: median step_time_s after 3 warm-up steps.
# jfields KEYS FILE: the "key": value pairs of a metrics.jsonl whose key
# matches KEYS (a grep alternation, e.g. 'loss\|eval_loss'), one per line,
# printed as `"key": value` whatever the file's spacing.
jfields() { grep -o "\"\\($1\\)\": *[^,}]*" "$2" | sed 's/": */": /'; }
median_step_time() {
  jfields step_time_s "$1" | awk '{print $2}' | tail -n +4 | median
}
