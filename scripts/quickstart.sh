#!/usr/bin/env bash
# Sets up, builds and trains configs/quickstart.yaml (a byte-level GPT on the
# fortunes text, 2 pipeline stages, 1F1B; about a minute on 2 cores).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bash "$root/scripts/setup.sh"
bash "$root/scripts/build.sh" sluice
source "$root/scripts/env.sh"
cd "$root"
build/cli/sluice train configs/quickstart.yaml "$@"
echo "metrics: runs/quickstart/metrics.jsonl"
