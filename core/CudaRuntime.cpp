// The CUDA runtime seam in a build with CUDA (core/CudaRuntime.h): the CUDA
// runtime, LibTorch's c10::cuda and its caching allocator.
#include "core/CudaRuntime.h"

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include "core/NcclBackend.h"

namespace sluice::cuda {

bool built() { return true; }

std::string buildText() {
  int runtime = 0;
  cudaRuntimeGetVersion(&runtime);
  return "compiled in (CUDA runtime " + std::to_string(runtime / 1000) + "." + std::to_string(runtime % 1000 / 10) +
         ", NCCL " + ncclVersionText() + ")";
}

// cudaGetDeviceCount says why there is none (no driver, no device).
Devices probe() {
  Devices d;
  int n = 0;
  const cudaError_t rc = cudaGetDeviceCount(&n);
  if (rc != cudaSuccess) {
    cudaGetLastError();  // clear it
    // Without a driver the runtime says its version is "insufficient": say what is missing.
    void* driver = rc == cudaErrorInsufficientDriver ? dlopen("libcuda.so.1", RTLD_LAZY) : nullptr;
    if (rc == cudaErrorInsufficientDriver && !driver) {
      d.absent = "no NVIDIA driver is installed (libcuda.so.1 cannot be loaded)";
    } else {
      d.absent = std::string("CUDA reports: ") + cudaGetErrorString(rc);
    }
    if (driver) dlclose(driver);
  } else if (n == 0) {
    d.absent = "no CUDA device is present";
  } else {
    d.count = n;
  }
  return d;
}

void setDevice(int index) { c10::cuda::set_device(static_cast<c10::DeviceIndex>(index)); }

void synchronizeDevice() { c10::cuda::device_synchronize(); }

AllocatorCounts allocatorCounts(int index) {
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(index));
  const auto& bytes = stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)];
  const auto& count = stats.allocation[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)];
  return {bytes.current, bytes.peak, count.allocated};
}

void resetPeak(int index) { c10::cuda::CUDACachingAllocator::resetPeakStats(static_cast<c10::DeviceIndex>(index)); }

int64_t totalBytes(int index) {
  c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(index));
  size_t freeBytes = 0, total = 0;
  if (cudaMemGetInfo(&freeBytes, &total) == cudaSuccess) return static_cast<int64_t>(total);
  return 0;
}

void setMemoryFraction(double fraction, int index) {
  c10::cuda::CUDACachingAllocator::setMemoryFraction(fraction, static_cast<c10::DeviceIndex>(index));
}

}  // namespace sluice::cuda
