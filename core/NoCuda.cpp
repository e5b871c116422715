// Every CUDA seam of core/ in a build without CUDA: what such a build lacks,
// in one file (CMake compiles it instead of core/CudaRuntime.cpp and the
// NCCL files; memory/NoCuda.cpp is memory/'s).
//   - core/CudaRuntime.h: no CUDA runtime. built() is false, probe() says
//     why; there is no CUDA device, so the rest are never asked about one
//     and do nothing, or answer 0.
//   - core/CommBackends.h: no device backend; CUDA tensors, if any, stay on
//     the host backend.
#include "core/CommBackends.h"
#include "core/CudaRuntime.h"

namespace sluice {

DeviceBackendFactory deviceBackendFactory(CommBackendKind) { return nullptr; }

namespace cuda {

bool built() { return false; }

std::string buildText() { return "not compiled in"; }

Devices probe() {
  return {0, "this build of Sluice has no CUDA (the CUDA toolkit was not found when it was configured)"};
}

void setDevice(int) {}
void synchronizeDevice() {}
AllocatorCounts allocatorCounts(int) { return {}; }
void resetPeak(int) {}
int64_t totalBytes(int) { return 0; }
void setMemoryFraction(double, int) {}

}  // namespace cuda
}  // namespace sluice
