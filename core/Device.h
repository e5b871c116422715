// core::Device: where a job's tensors live (job.device) and the few CUDA
// facts the rest of Sluice asks about. Every function here works in a build
// without CUDA and on a machine without a GPU or driver (cudaDevices() is 0
// there and says why); nothing here initializes CUDA unless asked about it.
// The CUDA runtime is asked through its seam, core/CudaRuntime.h.
//
//   auto kind = parseDeviceKind("cuda");              // ConfigError for other names
//   auto device = rankDevice(kind, localRank);        // cuda:(localRank % devices)
//   auto x = torch::zeros({4}, torch::TensorOptions().device(device));
#pragma once

#include <c10/core/Device.h>

#include <string>
#include <vector>

#include "core/DeviceKind.h"

namespace sluice {

// True when this build has the CUDA paths (SLUICE_CUDA).
bool cudaBuilt();
// "compiled in (CUDA runtime 13.0, NCCL 2.28.9)" or "not compiled in".
std::string cudaBuildText();
// CUDA devices this process can use: 0 without a CUDA build, a driver or a device. Never throws.
int cudaDevices();
// Why cudaDevices() is 0 ("" when it is not), e.g. "this build has no CUDA" or the driver's error.
std::string cudaAbsentReason();

// This rank's device: CPU, or cuda:(localRank % cudaDevices()). Throws
// ConfigError naming the reason when cuda is asked for and none is present.
c10::Device rankDevice(DeviceKind kind, int localRank);
// Makes `device` the current CUDA device of this thread (no-op on CPU).
void useDevice(const c10::Device& device);
// Blocks the host until the device has finished what was enqueued so far
// (for timing and the end of a run; no-op on CPU).
void synchronize(const c10::Device& device);

}  // namespace sluice
