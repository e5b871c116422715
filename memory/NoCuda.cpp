// memory/'s CUDA seam in a build without CUDA (memory/SwapTier.h; CMake
// compiles it instead of memory/PinnedHostSwapTier.cpp; core/NoCuda.cpp is
// core/'s): no swap tier for a GPU's storages.
#include "core/Error.h"
#include "memory/SwapTier.h"

namespace sluice::memory {

std::unique_ptr<SwapTier> makeDeviceSwapTier(const c10::Device& device) {
  throw MemoryError("swap: no swap tier for tensors on " + device.str());
}

}  // namespace sluice::memory
