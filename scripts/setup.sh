#!/usr/bin/env bash
# Installs the Debian packages Sluice needs, when any is missing. Idempotent.
# (python3-torch: the PyTorch side of the TorchScript tests, models/export_example.py and the PyTorch peer in bench/)
set -euo pipefail
packages=(
  build-essential cmake ninja-build ccache
  libtorch-dev              # LibTorch 1.13 (CPU)
  libopenblas0-openmp       # fast BLAS behind LibTorch (the reference BLAS is ~5x slower)
  libopenmpi-dev openmpi-bin
  libprotobuf-dev protobuf-compiler
  libyaml-cpp-dev libgtest-dev
  fortunes                  # real text for the byte-level GPT
  dataset-fashion-mnist zlib1g-dev  # real images (gzipped IDX files) for the CNN
  python3-torch             # PyTorch 1.13 (Debian's): exporting TorchScript models, the reference loop in tests
  python3 python3-protobuf librsvg2-bin  # tests: reading trace.json and TensorBoard files, rendering the SVG
  e2fsprogs util-linux mount # tests: small file systems for the swap-directory errors
  iproute2                  # tests: the test cluster (network namespaces, veth, bridge)
  slurmctld slurmd slurm-client slurm-wlm-basic-plugins munge  # tests: Slurm on the test cluster
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all packages present"
  exit 0
fi
echo "setup: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
