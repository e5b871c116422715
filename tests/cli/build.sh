#!/usr/bin/env bash
# The binary as CI builds it. With the CUDA toolkit present the CUDA paths are
# compiled in (SLUICE_CUDA), yet the binary has no hard dependency on the GPU
# driver (libcuda.so.1), so it starts, and runs every CPU test, on a machine
# with no GPU or driver. `sluice --version` names LibTorch 2.11, the BLAS
# and CUDA (compiled in or not; the devices, or why there are none). A GPU
# job where no GPU can be used, and NCCL for CPU tensors, stop before any
# rank starts: a clear message, a non-zero exit, nothing written.
source "$(dirname "$0")/lib.sh"
readelf -d "$SLUICE" | grep NEEDED >"$TMP/needed" || fail "readelf -d $SLUICE"
if grep -q 'libcuda\.so' "$TMP/needed"; then cat "$TMP/needed"; fail "sluice needs the GPU driver (libcuda.so) to start"; fi
echo "ok: no libcuda.so among $(wc -l <"$TMP/needed") NEEDED libraries"
"$SLUICE" --version >"$TMP/version" 2>&1 || { cat "$TMP/version"; fail "sluice --version"; }
cat "$TMP/version"
grep -q '^LibTorch 2\.11' "$TMP/version" || fail "--version does not name LibTorch 2.11"
grep -q '^CUDA: ' "$TMP/version" || fail "--version does not say whether CUDA is compiled in"
if command -v nvcc >/dev/null; then
  grep -q '^CUDA: compiled in' "$TMP/version" || fail "the CUDA toolkit is here but CUDA is not compiled in"
  readelf -d "$SLUICE" | grep 'libnccl\.so\.2' >/dev/null || fail "sluice does not link NCCL"
  echo "ok: CUDA and NCCL compiled in and linked"
fi
expect_failure nccl_for_cpu_tensors "job.backend is nccl but job.device is cpu" "$TMP/nccl" -- \
  "$SLUICE" train "$ROOT/configs/quickstart.yaml" --set job.backend=nccl --set job.output_dir="$TMP/nccl"
expect_failure bad_device "job.device: unknown device 'tpu' (expected cpu | cuda)" "$TMP/tpu" -- \
  "$SLUICE" train "$ROOT/configs/quickstart.yaml" --set job.device=tpu --set job.output_dir="$TMP/tpu"
if grep -q '^CUDA: .*; no device' "$TMP/version"; then
  expect_failure cuda_without_gpu "job.device is cuda but no GPU can be used here" "$TMP/cuda" -- \
    "$SLUICE" train "$ROOT/configs/quickstart.yaml" --set job.device=cuda --set job.output_dir="$TMP/cuda"
fi
echo "PASS"
