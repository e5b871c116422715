// Files written so that a reader never sees half of them.
#pragma once

#include <string>

namespace sluice {

// Writes `bytes` to `path` + ".tmp", then renames it to `path` (atomic on one
// file system). Throws Error naming the path when writing or renaming fails.
void writeFileAtomically(const std::string& path, const std::string& bytes);

}  // namespace sluice
