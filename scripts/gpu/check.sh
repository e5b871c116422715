#!/usr/bin/env bash
# On the lent GPU machine (through the device tool), from the repository root
# with .gpukit carried (scripts/gpu/kit.sh made it here):
#   bash scripts/gpu/check.sh [STEP...]    steps: env plan exported cli gtests bench trace suspects gpu
#                                          (default: env cli gtests)
# Unpacks the kit under /tmp/gpukit, links in only the libraries and Open MPI
# paths that machine lacks, points /opt/sluice/torch-2.11 (the path the
# binaries were built against) at its own Python's torch, then runs the CUDA
# tests: the Cuda* gtests on 1 and 2 ranks, tests/cli/cuda.sh and (step bench)
# bench/precision_gpu.sh. Each step
# writes its log under $OUT (or /tmp/gpukit/out) and the script ends with a
# summary line per step; it exits non-zero if any step failed.
set -uo pipefail
root=$(pwd)
out=${OUT:-/tmp/gpukit/out}
mkdir -p "$out" /tmp/gpukit/lib /tmp/gpukit/bin
[ -f .gpukit/root.tar ] || { echo "check: .gpukit/root.tar missing: run scripts/gpu/kit.sh and carry .gpukit" >&2; exit 2; }
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(env cli gtests)

# The kit's files, and links from the paths Debian's Open MPI was built for (absent there).
sysroot=/tmp/gpukit/root
mkdir -p "$sysroot" && tar -xf .gpukit/root.tar -C "$sysroot" --transform "s,^lib/,usr/lib/,"
for p in /usr/lib/x86_64-linux-gnu/openmpi /usr/lib/x86_64-linux-gnu/pmix2 /usr/share/openmpi /usr/share/pmix \
         /etc/openmpi /usr/bin/orted /usr/bin/orterun /usr/share/games/fortunes; do
  [ -e "$p" ] || { [ -e "$sysroot$p" ] && mkdir -p "$(dirname "$p")" && ln -s "$sysroot$p" "$p"; }
done
ln -sf /usr/bin/orterun /tmp/gpukit/bin/mpirun
ln -sf /usr/bin/orterun /tmp/gpukit/bin/mpiexec
# Only sonames the machine's loader does not know already.
known=$(ldconfig -p | awk '{print $1}')
for f in "$sysroot"/usr/lib/x86_64-linux-gnu/*.so.* "$sysroot"/usr/lib/x86_64-linux-gnu/openmpi/lib/*.so.*; do
  name=$(basename "$f")
  grep -qxF "$name" <<<"$known" || ln -sf "$f" "/tmp/gpukit/lib/$name"
done
py=$(command -v python3)
site=$("$py" -c "import torch, os; print(os.path.dirname(os.path.dirname(torch.__file__)))")
# Where the binaries look for LibTorch (their RUNPATH) and the tests for
# PyTorch: made only where absent (never over a setup.sh environment). A
# wrapper, not a link: a virtual environment's python finds its packages
# through the path it was started by.
env=/opt/sluice/torch-2.11
if [ ! -e "$env" ]; then
  mkdir -p "$env/lib/python3.11" "$env/bin"
  ln -s "$site" "$env/lib/python3.11/site-packages"
  printf '#!/bin/sh\nexec %s "$@"\n' "$py" >"$env/bin/python" && chmod +x "$env/bin/python"
fi
nvlibs=$(ls -d "$site"/nvidia/*/lib "$site"/nvidia/cu13/lib 2>/dev/null | tr '\n' ':')
export LD_LIBRARY_PATH=/tmp/gpukit/lib:$site/torch/lib:${nvlibs}/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PATH=/tmp/gpukit/bin:$PATH SLUICE_PYTHON=/opt/sluice/torch-2.11/bin/python
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1 \
  OMPI_MCA_btl_vader_single_copy_mechanism=none OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1
bin=$root/.gpukit/bin
mpirun=(mpirun -np 2 --oversubscribe --bind-to none)
summary=()
run() {  # run NAME TIMEOUT command...: its output in $out/NAME.log, its result in the summary
  local name=$1 limit=$2 rc=0 t0=$SECONDS
  shift 2
  echo "=== $name: $*"
  timeout -k 10 "$limit" "$@" >"$out/$name.log" 2>&1 || rc=$?
  tail -n 25 "$out/$name.log"
  summary+=("$name: rc=$rc in $((SECONDS - t0)) s")
}
for step in "${steps[@]}"; do
  case $step in
    env)
      run env 60 bash -c "nvidia-smi -L; $py -c 'import torch; print(torch.__version__, torch.cuda.get_device_name())';
        ldd $bin/sluice | grep -E 'not found|mpi|yaml|protobuf|torch_cuda|nccl|cudart'; mpirun --version | head -1" ;;
    gtests)
      run gtest_cuda 240 "$bin/sluice_tests" --gtest_filter='Cuda*:-CudaEquivalence.*:CudaMemoryPlanExactness.*:CudaStaging.*'
      run gtest_cuda_np2 240 "${mpirun[@]}" "$bin/sluice_tests" \
        --gtest_filter='CudaEquivalence.*:CudaMemoryPlanExactness.*:CudaStaging.*' ;;
    plan)  # the GPU memory-plan test alone in its own processes, with C++ stack traces
      run gtest_plan_alone 240 env TORCH_SHOW_CPP_STACKTRACES=1 "${mpirun[@]}" "$bin/sluice_tests" \
        --gtest_filter='CudaMemoryPlanExactness.*' ;;
    exported)  # a Hugging Face GPT-2 (torch.export, dropout 0.1; kit.sh made it) on the GPU: 1 stage vs 2 within 1e-5
      run exported 300 bash -c "set -e; for s in 1 2; do $bin/sluice train .gpukit/hf/hf.yaml --set pipeline.stages=\$s \
          --set job.output_dir=/tmp/gpukit/exp\$s; grep -o '\"loss\": *[0-9.e-]*' /tmp/gpukit/exp\$s/metrics.jsonl |
          cut -d: -f2 >/tmp/gpukit/exp\$s.losses; done
        paste /tmp/gpukit/exp1.losses /tmp/gpukit/exp2.losses | awk '{ d = \$1 - \$2; if (d < 0) d = -d; r = d / \$1;
          if (r > m) m = r; n++; print } END { printf \"exported on cuda: 1 vs 2 stages, %d steps, max relative %g\\n\", n, m;
          exit !(n == 10 && m <= 1e-5) }'" ;;
    cli)
      run cli_cuda 420 bash tests/cli/cuda.sh "$bin/sluice" "$root" ;;
    bench)
      run bench_precision 300 env SLUICE_BIN="$bin/sluice" bash bench/precision_gpu.sh ;;
    trace)  # a traced bf16 step of the 12 x 768 GPT: device trace lines; trace.json to $out
      run trace 240 bash scripts/gpu/suspects.sh "$bin/sluice" trace "$out" ;;
    suspects)  # as built, NaN fill on, transfer guard off: step time, loss, GPU utilisation
      run suspects 300 bash scripts/gpu/suspects.sh "$bin/sluice" suspects "$out" ;;
    gpu)
      run bench_gpu 540 env SLUICE_BIN="$bin/sluice" bash bench/gpu.sh 2 12 ;;
    *) echo "check: unknown step '$step' (env plan exported cli gtests bench trace suspects gpu)" >&2; exit 2 ;;
  esac
done
echo "=== summary"
printf '%s\n' "${summary[@]}" | tee "$out/summary.txt"
! grep -qv 'rc=0 ' "$out/summary.txt"
