// Byte counts in human-readable sizes (torch-free; the bytes of tensors: core/Tensors.h).
#pragma once

#include <cstdint>
#include <string>

namespace sluice {

// "1.25 MiB"
std::string formatBytes(int64_t bytes);
// "1.25 MiB (1310720 bytes)": for messages a user acts on.
std::string formatBytesExact(int64_t bytes);

}  // namespace sluice
