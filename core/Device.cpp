#include "core/Device.h"

#include "core/CudaRuntime.h"
#include "core/Error.h"

namespace sluice {
namespace {

const std::vector<Choice<DeviceKind>> kKinds = {
    {DeviceKind::Cpu, "cpu", "this host's cores"},
    {DeviceKind::Cuda, "cuda", "one NVIDIA GPU per rank (LOCAL_RANK modulo the GPUs present); CUDA builds"},
};

// Asked once: the runtime is probed on the first question (core/CudaRuntime.h).
const cuda::Devices& cudaFacts() {
  static const cuda::Devices facts = cuda::probe();
  return facts;
}

}  // namespace

const std::vector<Choice<DeviceKind>>& deviceKinds() { return kKinds; }
const char* deviceKindName(DeviceKind kind) { return choiceName(kKinds, kind); }
DeviceKind parseDeviceKind(const std::string& name) { return parseChoice(kKinds, name, "device"); }

bool cudaBuilt() { return cuda::built(); }

std::string cudaBuildText() { return cuda::buildText(); }

int cudaDevices() { return cudaFacts().count; }

std::string cudaAbsentReason() { return cudaFacts().absent; }

c10::Device rankDevice(DeviceKind kind, int localRank) {
  if (kind == DeviceKind::Cpu) return c10::Device(c10::kCPU);
  const int n = cudaDevices();
  SLUICE_CHECK(n > 0, ConfigError,
               "job.device is cuda but no GPU can be used here: " << cudaAbsentReason() << "; set job.device: cpu");
  return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(localRank % n));
}

void useDevice(const c10::Device& device) {
  if (device.is_cuda()) cuda::setDevice(device.index());
}

void synchronize(const c10::Device& device) {
  if (device.is_cuda()) cuda::synchronizeDevice();
}

}  // namespace sluice
