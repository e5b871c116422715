# Helpers for the CLI tests (sourced). Usage in a test: source lib.sh; then
# SLUICE, ROOT and TMP are set and TMP is removed on exit.
set -euo pipefail
SLUICE=$1
ROOT=$2
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

fail() { echo "FAIL: $*" >&2; exit 1; }

# losses FILE: one loss per line, in step order.
losses() { grep -o '"loss": [^,}]*' "$1" | awk '{print $2}'; }

# expect_failure NAME EXPECTED_TEXT OUTPUT_DIR -- command...: the command must exit
# non-zero, print EXPECTED_TEXT, and leave OUTPUT_DIR absent.
expect_failure() {
  local name=$1 text=$2 outdir=$3
  shift 4
  local log="$TMP/$name.log" rc=0
  "$@" >"$log" 2>&1 || rc=$?
  [ "$rc" -ne 0 ] || fail "$name: exited 0"
  grep -qF -- "$text" "$log" || { cat "$log" >&2; fail "$name: message lacks '$text'"; }
  [ ! -e "$outdir" ] || fail "$name: wrote $outdir"
  echo "ok: $name (exit $rc): $(grep -F -- "$text" "$log" | head -1)"
}
