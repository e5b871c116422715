#include "memory/DeviceMemory.h"

#include "core/Bytes.h"
#include "core/Error.h"

#if SLUICE_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>
#endif

namespace sluice::memory {

AllocatorStats deviceAllocatorStats(const c10::Device& device) {
#if SLUICE_CUDA
  if (device.is_cuda()) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
    const auto& bytes = stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)];
    const auto& count = stats.allocation[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)];
    return {bytes.current, bytes.peak, count.allocated};
  }
#endif
  return allocatorStats();
}

void resetDevicePeak(const c10::Device& device) {
#if SLUICE_CUDA
  if (device.is_cuda()) {
    c10::cuda::CUDACachingAllocator::resetPeakStats(device.index());
    return;
  }
#endif
  resetPeak();
}

int64_t deviceTotalBytes(const c10::Device& device) {
#if SLUICE_CUDA
  if (device.is_cuda()) {
    c10::cuda::CUDAGuard guard(device.index());
    size_t freeBytes = 0, total = 0;
    if (cudaMemGetInfo(&freeBytes, &total) == cudaSuccess) return static_cast<int64_t>(total);
  }
#endif
  return 0;
}

void setDeviceAllocationLimit(const c10::Device& device, int64_t bytes, const std::string& what) {
#if SLUICE_CUDA
  if (device.is_cuda()) {
    const int64_t total = deviceTotalBytes(device);
    SLUICE_CHECK(total > 0 && bytes <= total, MemoryError,
                 what << ": the memory limit " << formatBytesExact(bytes) << " exceeds " << device << "'s memory ("
                      << formatBytesExact(total) << ")");
    const double fraction = bytes > 0 ? static_cast<double>(bytes) / static_cast<double>(total) : 1.0;
    c10::cuda::CUDACachingAllocator::setMemoryFraction(fraction, device.index());
    return;
  }
#endif
  setAllocationLimit(bytes, what);
}

}  // namespace sluice::memory
