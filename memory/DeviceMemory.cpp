#include "memory/DeviceMemory.h"

#include "core/Bytes.h"
#include "core/CudaRuntime.h"
#include "core/Error.h"

namespace sluice::memory {
namespace {

// A CUDA device whose memory the caching allocator counts; in a build
// without CUDA every device is counted as the host's.
bool onCuda(const c10::Device& device) { return device.is_cuda() && cuda::built(); }

}  // namespace

AllocatorStats deviceAllocatorStats(const c10::Device& device) {
  if (onCuda(device)) {
    const auto counts = cuda::allocatorCounts(device.index());
    return {counts.currentBytes, counts.peakBytes, counts.allocations};
  }
  return allocatorStats();
}

void resetDevicePeak(const c10::Device& device) {
  if (onCuda(device)) {
    cuda::resetPeak(device.index());
    return;
  }
  resetPeak();
}

int64_t deviceTotalBytes(const c10::Device& device) {
  return onCuda(device) ? cuda::totalBytes(device.index()) : 0;
}

void setDeviceAllocationLimit(const c10::Device& device, int64_t bytes, const std::string& what) {
  if (onCuda(device)) {
    const int64_t total = deviceTotalBytes(device);
    SLUICE_CHECK(total > 0 && bytes <= total, MemoryError,
                 what << ": the memory limit " << formatBytesExact(bytes) << " exceeds " << device << "'s memory ("
                      << formatBytesExact(total) << ")");
    const double fraction = bytes > 0 ? static_cast<double>(bytes) / static_cast<double>(total) : 1.0;
    cuda::setMemoryFraction(fraction, device.index());
    return;
  }
  setAllocationLimit(bytes, what);
}

}  // namespace sluice::memory
