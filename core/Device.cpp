#include "core/Device.h"

#include <mutex>

#include "core/Error.h"

#if SLUICE_CUDA
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include "core/NcclBackend.h"
#endif

namespace sluice {
namespace {

const std::vector<Choice<DeviceKind>> kKinds = {
    {DeviceKind::Cpu, "cpu", "this host's cores"},
    {DeviceKind::Cuda, "cuda", "one NVIDIA GPU per rank (LOCAL_RANK modulo the GPUs present); CUDA builds"},
};

struct CudaFacts {
  int devices = 0;
  std::string absent;
};

// Asked once: cudaGetDeviceCount says why there is none (no driver, no device)
// without LibTorch's warnings.
const CudaFacts& cudaFacts() {
  static const CudaFacts facts = [] {
    CudaFacts f;
#if SLUICE_CUDA
    int n = 0;
    const cudaError_t rc = cudaGetDeviceCount(&n);
    if (rc != cudaSuccess) {
      cudaGetLastError();  // clear it
      // Without a driver the runtime says its version is "insufficient": say what is missing.
      void* driver = rc == cudaErrorInsufficientDriver ? dlopen("libcuda.so.1", RTLD_LAZY) : nullptr;
      if (rc == cudaErrorInsufficientDriver && !driver) {
        f.absent = "no NVIDIA driver is installed (libcuda.so.1 cannot be loaded)";
      } else {
        f.absent = std::string("CUDA reports: ") + cudaGetErrorString(rc);
      }
      if (driver) dlclose(driver);
    } else if (n == 0) {
      f.absent = "no CUDA device is present";
    } else {
      f.devices = n;
    }
#else
    f.absent = "this build of Sluice has no CUDA (the CUDA toolkit was not found when it was configured)";
#endif
    return f;
  }();
  return facts;
}

}  // namespace

const std::vector<Choice<DeviceKind>>& deviceKinds() { return kKinds; }
const char* deviceKindName(DeviceKind kind) { return choiceName(kKinds, kind); }
DeviceKind parseDeviceKind(const std::string& name) { return parseChoice(kKinds, name, "device"); }

bool cudaBuilt() {
#if SLUICE_CUDA
  return true;
#else
  return false;
#endif
}

std::string cudaBuildText() {
#if SLUICE_CUDA
  int runtime = 0;
  cudaRuntimeGetVersion(&runtime);
  return "compiled in (CUDA runtime " + std::to_string(runtime / 1000) + "." + std::to_string(runtime % 1000 / 10) +
         ", NCCL " + ncclVersionText() + ")";
#else
  return "not compiled in";
#endif
}

int cudaDevices() { return cudaFacts().devices; }

std::string cudaAbsentReason() { return cudaFacts().absent; }

c10::Device rankDevice(DeviceKind kind, int localRank) {
  if (kind == DeviceKind::Cpu) return c10::Device(c10::kCPU);
  const int n = cudaDevices();
  SLUICE_CHECK(n > 0, ConfigError,
               "job.device is cuda but no GPU can be used here: " << cudaAbsentReason() << "; set job.device: cpu");
  return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(localRank % n));
}

void useDevice(const c10::Device& device) {
#if SLUICE_CUDA
  if (device.is_cuda()) c10::cuda::set_device(device.index());
#endif
}

void synchronize(const c10::Device& device) {
#if SLUICE_CUDA
  if (device.is_cuda()) c10::cuda::device_synchronize();
#endif
}

}  // namespace sluice
