#!/usr/bin/env bash
# Installs what Sluice needs, when anything is missing. Idempotent; says what it does.
#
# 1. Debian packages (apt-get): compilers, Open MPI, protobuf, yaml-cpp, GoogleTest,
#    data sets, and the tools the tests use.
# 2. LibTorch 2.11 and the matching Python torch: PyPI's `torch==2.11.*` (the
#    CUDA 13.0 build) in a virtual environment OUTSIDE the checkout, keyed by the
#    torch version: ${SLUICE_PREFIX:-/opt/sluice}/torch-2.11. It is ~3 GB, so it is
#    installed once per machine and reused by every clone (CI clones afresh).
#    CMake finds LibTorch through it (scripts/env.sh, scripts/build.sh), and the
#    tests and benches use its python as the PyTorch reference.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/scripts/env.sh"

packages=(
  build-essential cmake ninja-build ccache
  libopenmpi-dev openmpi-bin
  libprotobuf-dev protobuf-compiler
  libyaml-cpp-dev libgtest-dev
  libcli11-dev nlohmann-json3-dev  # the CLI's subcommands and flags; JSON (metrics, traces)
  fortunes                  # real text for the byte-level GPT
  dataset-fashion-mnist zlib1g-dev  # real images (gzipped IDX files) for the CNN
  python3 python3-venv      # the virtual environment that holds torch 2.11
  librsvg2-bin              # tests: rendering the trace SVG
  e2fsprogs util-linux mount # tests: small file systems for the swap-directory errors
  iproute2                  # tests: the test cluster (network namespaces, veth, bridge)
  slurmctld slurmd slurm-client slurm-wlm-basic-plugins munge  # tests: Slurm on the test cluster
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all Debian packages present"
else
  echo "setup: installing Debian packages: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# Python packages in the torch environment. torch: LibTorch + the reference;
# numpy: torch's tensor <-> array paths; protobuf (4.x: the runtime for code
# from Debian's protoc 3.21): the tests read TensorBoard event files; PyYAML;
# tokenizers: scripts/tokenize.py's byte-level BPE (data.name: tokens); lizard:
# the function lengths tests/layout/check_layout.py checks; safetensors: the
# reader the tests check `sluice export --format safetensors` against;
# transformers: Hugging Face models for models/export_hf.py and tests/cli/hf.sh.
python_packages=("torch==${SLUICE_TORCH_VERSION}.*" numpy "protobuf>=4.21,<5" pyyaml tokenizers lizard safetensors "transformers>=5,<6")
stamp="$SLUICE_TORCH_ENV/.sluice-complete"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "${python_packages[*]}" ]; then
  echo "setup: torch ${SLUICE_TORCH_VERSION} present in $SLUICE_TORCH_ENV ($("$SLUICE_PYTHON" -c 'import torch; print(torch.__version__)'))"
  exit 0
fi
start=$(date +%s)
if [ -f "$stamp" ]; then
  # A complete environment with another package list: bring it up to this one.
  echo "setup: updating $SLUICE_TORCH_ENV to: ${python_packages[*]}"
else
  echo "setup: installing ${python_packages[*]} into $SLUICE_TORCH_ENV (once per machine; ~3 GB for the CUDA build)"
  $SUDO mkdir -p "$(dirname "$SLUICE_TORCH_ENV")"
  # A half-made environment (an interrupted install) is rebuilt from scratch.
  [ -d "$SLUICE_TORCH_ENV" ] && $SUDO rm -rf "$SLUICE_TORCH_ENV"
  $SUDO /usr/bin/python3 -m venv "$SLUICE_TORCH_ENV"
fi
$SUDO "$SLUICE_PYTHON" -m pip install --no-input --progress-bar off "${python_packages[@]}"
"$SLUICE_PYTHON" -c 'import torch; print("setup: torch", torch.__version__, "CUDA", torch.version.cuda)'
echo "${python_packages[*]}" | $SUDO tee "$stamp" >/dev/null
echo "setup: torch environment ready in $(( $(date +%s) - start )) s"
