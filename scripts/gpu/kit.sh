#!/usr/bin/env bash
# Packs what the lent GPU machine lacks for running Sluice's CUDA checks
# (scripts/gpu/check.sh) into .gpukit/ (ignored): the sluice and sluice_tests
# binaries built here (CUDA on, against the same PyPI torch 2.11 + cu130 the
# GPU machine's Python holds), and the files of the Debian packages they and
# Open MPI need at run time (Open MPI with its plugins and PMIx, yaml-cpp,
# protobuf, hwloc, libevent, ...) plus the fortunes text. That machine has
# no network and no Debian packages; check.sh links in only what it lacks.
# Usage: bash scripts/gpu/kit.sh [BUILD_DIR]   (default build/; run scripts/build.sh first)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
kit=$root/.gpukit
for b in cli/sluice tests/sluice_tests; do
  [ -x "$build/$b" ] || { echo "kit: $build/$b is missing: run bash scripts/build.sh sluice sluice_tests" >&2; exit 1; }
done
grep -qxF /.gpukit/ "$root/.git/info/exclude" 2>/dev/null || echo /.gpukit/ >>"$root/.git/info/exclude"
rm -rf "$kit" && mkdir -p "$kit/bin"
cp "$build/cli/sluice" "$build/tests/sluice_tests" "$kit/bin/"
# Every shared library the binaries, Open MPI's launcher and daemons and
# their plugins load, by owning Debian package.
objects=("$kit/bin/sluice" "$kit/bin/sluice_tests" /usr/bin/orted /usr/bin/orterun
         /usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3/*.so /usr/lib/x86_64-linux-gnu/pmix2/lib/pmix/*.so)
libs=$(for o in "${objects[@]}"; do ldd "$o" 2>/dev/null | awk '/=> \// {print $3}'; done | sort -u)
packages=$(for l in $libs; do dpkg -S "$(readlink -f "$l")" 2>/dev/null || dpkg -S "$l" 2>/dev/null || true; done |
  cut -d: -f1 | sort -u)
# The C runtime and what every Linux has stay behind (an older copy would shadow the machine's own).
base='^(libc6|libstdc\+\+6|libgcc-s1|zlib1g|libzstd1|liblzma5|libudev1|libcap2|libsystemd0|libgcrypt20|libgpg-error0|liblz4-1|libselinux1|libpcre2-8-0|libcrypt1|libbz2-1.0)$'
packages=$(printf '%s\n' $packages openmpi-bin openmpi-common libopenmpi3 libpmix2 fortunes fortunes-min | sort -u | grep -Ev "$base")
list=$(for p in $packages; do dpkg -L "$p" | while read -r f; do [ -f "$f" ] || [ -L "$f" ] && echo "$f"; done; done |
  grep -Ev '^/usr/share/(doc|man|lintian|info)/' | sort -u)
tar -cf "$kit/root.tar" --no-recursion $list 2>/dev/null
# A Hugging Face GPT-2 (dropout 0.1) as a torch.export program, for check.sh's
# step exported (that machine has no transformers).
py=${SLUICE_PYTHON:-/opt/sluice/torch-2.11/bin/python}
if "$py" -c "import transformers" 2>/dev/null; then
  HF_HUB_OFFLINE=1 "$py" "$root/models/export_hf.py" "$kit/hf" --arch gpt2 --vocab 256 --block 32 --embd 32 --layers 2 \
    --heads 4 --batch 2 --dropout 0.1 >/dev/null 2>&1 && echo "kit: $kit/hf/model.pt2 (GPT-2 through torch.export)"
  cat >"$kit/hf/hf.yaml" <<YAML
job: {name: exported, device: cuda, seed: 7}
model: {name: exported, path: .gpukit/hf/model.pt2}
data: {name: text, path: /usr/share/games/fortunes}
training: {steps: 10, global_batch_size: 8, micro_batch_size: 2}
pipeline: {microbatches: 4}
logging: {interval: 5}
YAML
fi
echo "kit: $(echo "$packages" | wc -w) packages ($(echo "$packages" | tr '\n' ' ')), $(echo "$list" | wc -l) files"
du -sh "$kit"
