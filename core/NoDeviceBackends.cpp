// The device-backend seam in a build without CUDA (core/CommBackends.h):
// no device backend; CUDA tensors, if any, stay on the host backend.
#include "core/CommBackends.h"

namespace sluice {

DeviceBackendFactory deviceBackendFactory(CommBackendKind) { return nullptr; }

}  // namespace sluice
