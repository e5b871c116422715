# Helpers for the CLI tests (sourced). Usage in a test: source lib.sh; then
# SLUICE, ROOT and TMP are set and TMP is removed on exit.
set -euo pipefail
# With pipefail, a reader that stops early (head -1, grep -q) can kill its
# writer with SIGPIPE and fail the pipeline, and set -e then ends the test
# silently. Take a first line with sed -n 1p and test a match with
# grep >/dev/null: both read all their input.
SLUICE=$1
ROOT=$2
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

fail() { echo "FAIL: $*" >&2; exit 1; }

# The small GPT most scripts train: configs/quickstart.yaml at 2 layers of 64, block 32.
SMALL=(--set model.layers=2 --set model.embd=64 --set model.heads=4 --set model.block_size=32)

# shared_profile NAME: the path of a profile (`sluice profile`) of a config
# (configs/quickstart.yaml unless said) that the runs of scripts plan from (pipeline.profile or
# `sluice partition --profile`), made on first use: once per ctest run in
# $SLUICE_TEST_PROFILES (the fixture cli_profiles empties it first; flock
# keeps two scripts from making one twice), or in $TMP for a script run alone.
# A profile depends on the graph only: the model, micro-batch shape, dropout
# and precision, not steps, schedule, stages or data parallelism.
#   small                 SMALL
#   small_dropout         SMALL, dropout 0.1
#   small_dropout_bf16    SMALL, dropout 0.1, bf16
#   quickstart            the quickstart GPT (no dropout: its attention is fused)
#   quickstart_dropout    the quickstart GPT, dropout 0.1
#   fashion_mnist_cnn     configs/fashion_mnist_cnn.yaml
shared_profile() {
  local name=$1 dir=${SLUICE_TEST_PROFILES:-$TMP/profiles} args=() config=quickstart
  case $name in
    small) args=("${SMALL[@]}") ;;
    small_dropout) args=("${SMALL[@]}" --set model.dropout=0.1) ;;
    small_dropout_bf16) args=("${SMALL[@]}" --set model.dropout=0.1 --set training.precision=bf16) ;;
    quickstart) ;;
    quickstart_dropout) args=(--set model.dropout=0.1) ;;
    fashion_mnist_cnn) config=fashion_mnist_cnn ;;
    *) fail "shared_profile: no profile named $name" ;;
  esac
  mkdir -p "$dir"
  (
    flock 9
    if [ ! -s "$dir/$name.pb" ]; then
      "$SLUICE" profile "$ROOT/configs/$config.yaml" "${args[@]}" -o "$dir/$name.pb" >"$dir/$name.log" 2>&1 ||
        { cat "$dir/$name.log" >&2; rm -f "$dir/$name.pb"; fail "shared_profile $name: sluice profile failed"; }
    fi
  ) 9>"$dir/$name.lock" || exit 1
  echo "$dir/$name.pb"
}

# The Python with torch 2.11 (the reference), protobuf and PyYAML: the
# environment scripts/setup.sh makes (CTest passes SLUICE_PYTHON; else
# scripts/env.sh's default).
PY=${SLUICE_PYTHON:-/opt/sluice/torch-2.11/bin/python}

# losses FILE: one loss per line, in step order.
# jfields KEYS FILE: the "key": value pairs of a metrics.jsonl whose key
# matches KEYS (a grep alternation, e.g. 'loss\|eval_loss'), one per line,
# printed as `"key": value` whatever the file's spacing.
jfields() { grep -o "\"\\($1\\)\": *[^,}]*" "$2" | sed 's/": */": /'; }
losses() { jfields loss "$1" | awk '{print $2}'; }

# compare_losses REF_DIR OTHER_DIR STEPS [TOLERANCE]: both runs' metrics.jsonl
# have STEPS losses, equal to a relative TOLERANCE (1e-5; prints the largest difference).
compare_losses() {
  local a=$1 b=$2 steps=$3 tol=${4:-1e-5} n1 n2
  n1=$(losses "$a/metrics.jsonl" | wc -l)
  n2=$(losses "$b/metrics.jsonl" | wc -l)
  [ "$n1" -eq "$steps" ] && [ "$n2" -eq "$steps" ] || fail "expected $steps steps each, got $n1 ($a) and $n2 ($b)"
  paste <(losses "$a/metrics.jsonl") <(losses "$b/metrics.jsonl") |
    awk -v a="$(basename "$a")" -v b="$(basename "$b")" -v tol="$tol" '
    { d = $1 - $2; if (d < 0) d = -d; r = d / ($1 < 0 ? -$1 : $1); if (r > max) max = r;
      if (r > tol + 0) { printf "step %d: %s %s vs %s %s (relative %g)\n", NR - 1, a, $1, b, $2, r; bad = 1 } }
    END { printf "%s vs %s: max relative difference over %d steps: %g\n", a, b, NR, max; exit bad }' ||
    fail "losses of $a and $b differ"
}

# reference_losses REF_JSON: the per-step losses a PyTorch reference wrote
# (tests/cli/torchscript_reference.py), one per line.
reference_losses() { "$PY" -c "import json, sys; print('\n'.join(repr(l) for l in json.load(open(sys.argv[1]))['losses']))" "$1"; }
# same_as_reference REF_LOSSES RUN [LABEL]: RUN's per-step losses (STEPS of
# them) equal the reference's within relative 1e-5.
same_as_reference() {
  paste "$1" <(losses "$TMP/$2/metrics.jsonl") | awk -v run="${3:-$2}" -v steps=$STEPS '
    { d = $1 - $2; if (d < 0) d = -d; r = d / $1; if (r > max) max = r; if (r > 1e-5) bad = 1; n++ }
    END { printf "%s vs PyTorch: %d steps, max relative difference %g\n", run, n, max; exit (bad || n != steps) }' ||
    fail "$2: losses differ from PyTorch's"
}

# lm_yaml_tail: the data, training, pipeline, optimizer and logging lines of
# a small language-model config (TEXT, STEPS, LR, WD set by the test).
lm_yaml_tail() {
  cat <<YAML
data: {name: text, path: $TEXT}
training: {steps: $STEPS, global_batch_size: 8, micro_batch_size: 2}
pipeline: {stages: 1, microbatches: 4}
optimizer: {name: adamw, lr: $LR, weight_decay: $WD, schedule: constant}
logging: {interval: 5}
YAML
}

# expect_failure NAME EXPECTED_TEXT OUTPUT_DIR -- command...: the command must exit
# non-zero, print EXPECTED_TEXT, and leave OUTPUT_DIR absent. Its exit code is left in FAILURE_RC.
expect_failure() {
  local name=$1 text=$2 outdir=$3
  shift 4
  local log="$TMP/$name.log" rc=0
  "$@" >"$log" 2>&1 || rc=$?
  FAILURE_RC=$rc
  [ "$rc" -ne 0 ] || fail "$name: exited 0"
  grep -qF -- "$text" "$log" || { cat "$log" >&2; fail "$name: message lacks '$text'"; }
  [ ! -e "$outdir" ] || fail "$name: wrote $outdir"
  echo "ok: $name (exit $rc): $(grep -F -- "$text" "$log" | sed -n 1p)"
}
