// memory::CountingAllocator: every CPU tensor allocation, counted.
//
// installCountingAllocator() puts, once per process, an allocator in front
// of LibTorch's default CPU allocator (c10::SetCPUAllocator). Each block
// carries its size in a header just below it, so frees are counted without a
// table; blocks of 256 KiB or more start on a page (4 KiB) boundary, so the
// swap tier can move them with O_DIRECT.
// allocatorStats() then gives the bytes allocated now and at peak since the
// last resetPeak(): what CUDA calls memory_allocated / max_memory_allocated,
// for the host. Blocks allocated before installation are not counted (and
// are freed correctly). Thread-safe (atomics).
//
// setAllocationLimit(bytes) turns the count into a hard limit, as a GPU's
// memory is: an allocation that would take the current total above it throws
// MemoryError with an out-of-memory message naming `what` (e.g. "stage 1").
// 0 removes the limit.
//
//   sluice::memory::installCountingAllocator();
//   sluice::memory::resetPeak();
//   auto x = torch::empty({1024});                  // +4096 bytes
//   sluice::memory::allocatorStats().peakBytes;     // >= 4096
#pragma once

#include <cstdint>
#include <string>

namespace sluice::memory {

struct AllocatorStats {
  int64_t currentBytes = 0;  // allocated now
  int64_t peakBytes = 0;     // highest currentBytes since the last resetPeak()
  int64_t allocations = 0;   // blocks handed out since installation
};

void installCountingAllocator();
bool countingAllocatorInstalled();
AllocatorStats allocatorStats();
void resetPeak();
void setAllocationLimit(int64_t bytes, const std::string& what = "this process");
int64_t allocationLimit();

// The peak resident set of this process (VmHWM from /proc/self/status), bytes; 0 if unknown.
int64_t residentPeakBytes();

}  // namespace sluice::memory
