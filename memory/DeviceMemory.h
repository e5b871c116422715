// memory::DeviceMemory: a device's allocated bytes, now and at peak, whatever
// the device: the counting allocator on CPU (memory/CountingAllocator.h), the
// CUDA caching allocator's statistics (allocated_bytes, as
// torch.cuda.memory_allocated / max_memory_allocated) on CUDA. The trainer,
// the profiler and the reports count memory through these, so a plan's
// bytes and the measured ones mean the same on every device.
//
// setDeviceAllocationLimit: CPU: the counting allocator's hard limit; CUDA:
// the caching allocator's per-process memory fraction (budget / the GPU's
// memory), so an allocation beyond it fails with CUDA's out-of-memory error.
#pragma once

#include <c10/core/Device.h>

#include <cstdint>
#include <string>

#include "memory/CountingAllocator.h"

namespace sluice::memory {

AllocatorStats deviceAllocatorStats(const c10::Device& device);
void resetDevicePeak(const c10::Device& device);
// 0 removes the limit. Throws MemoryError when the device has less memory than `bytes`.
void setDeviceAllocationLimit(const c10::Device& device, int64_t bytes, const std::string& what);
// The device's total memory (CUDA), or 0 on CPU.
int64_t deviceTotalBytes(const c10::Device& device);

}  // namespace sluice::memory
