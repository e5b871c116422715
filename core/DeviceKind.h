// core::DeviceKind: job.device's choice, parsed once by the config (torch-free,
// as Config.h is); core/Device.h places tensors on it.
#pragma once

#include <string>
#include <vector>

#include "core/Choice.h"

namespace sluice {

enum class DeviceKind { Cpu, Cuda };

// One row per device kind (core/Choice.h); defined in core/Device.cpp.
const std::vector<Choice<DeviceKind>>& deviceKinds();
const char* deviceKindName(DeviceKind kind);
// Throws ConfigError listing the names.
DeviceKind parseDeviceKind(const std::string& name);

}  // namespace sluice
