// core::CudaRuntime: THE seam between Sluice and the CUDA runtime. Every
// CUDA fact or action the portable code needs is declared here, in plain
// types; the portable code (core/Device.h, memory/DeviceMemory.h, ...) asks
// these and nothing of CUDA itself.
//
// Contract
// - Two definitions, one per build; CMake picks which is compiled
//   (core/CMakeLists.txt): core/CudaRuntime.cpp where the build has CUDA
//   (SLUICE_CUDA), core/NoCuda.cpp where it does not. NoCuda.cpp is every
//   CUDA seam of core/ without CUDA (this one and deviceBackendFactory,
//   core/CommBackends.h), so one file lists what a build without CUDA lacks;
//   memory/NoCuda.cpp is memory/'s (makeDeviceSwapTier, memory/SwapTier.h).
// - Only the files CMake compiles under SLUICE_CUDA alone (and the headers
//   only they include, e.g. core/NcclChannel.h) include CUDA headers
//   (c10/cuda/, ATen/cuda/, cuda_runtime, cuda.h, nccl.h). No source
//   outside tests/ tests `#if SLUICE_CUDA`: the layout check
//   (tests/layout/check_layout.py) refuses both.
// - Without CUDA: built() is false, buildText() "not compiled in", probe()
//   says the build has no CUDA; the rest are never reached with a CUDA
//   device there (none can be present) and do nothing, or answer 0.
// - Devices are CUDA device indices (c10::Device::index()). Nothing here
//   initializes CUDA unless called; probe() never throws.
#pragma once

#include <cstdint>
#include <string>

namespace sluice::cuda {

// True in a build with CUDA (SLUICE_CUDA).
bool built();
// "compiled in (CUDA runtime 13.0, NCCL 2.28.9)" or "not compiled in".
std::string buildText();

// The CUDA devices this process can use, or why there is none.
struct Devices {
  int count = 0;
  std::string absent;  // "" when count > 0
};
// Asks the runtime (cudaGetDeviceCount), without LibTorch's warnings. Not
// cached: core/Device.cpp asks once. Never throws.
Devices probe();

// Makes `index` the current device of this thread.
void setDevice(int index);
// Blocks the host until the current device has finished its queued work.
void synchronizeDevice();

// The caching allocator's statistics for device `index` (allocated_bytes
// and allocation counts, aggregate over pools: torch.cuda.memory_allocated,
// max_memory_allocated).
struct AllocatorCounts {
  int64_t currentBytes = 0;
  int64_t peakBytes = 0;
  int64_t allocations = 0;
};
AllocatorCounts allocatorCounts(int index);
// Resets the caching allocator's peak statistics of device `index`.
void resetPeak(int index);
// Device `index`'s total memory (cudaMemGetInfo), or 0 when the runtime cannot say.
int64_t totalBytes(int index);
// The caching allocator's per-process memory fraction of device `index`
// (0 < fraction <= 1): an allocation beyond it fails with CUDA's out-of-memory error.
void setMemoryFraction(double fraction, int index);

}  // namespace sluice::cuda
