// Files written so that a reader never sees half of them.
#pragma once

#include <cstdint>
#include <string>

namespace sluice {

// Writes `bytes` to `path` + ".tmp", then renames it to `path` (atomic on one
// file system). Throws Error naming the path and the system's reason (e.g.
// "No space left on device") when writing or renaming fails, and leaves no
// ".tmp" file behind.
void writeFileAtomically(const std::string& path, const std::string& bytes);
// The same, and durable: the temp file is fsynced before the rename and the
// directory after it, so after a crash `path` holds the old or the new bytes.
void writeFileDurably(const std::string& path, const std::string& bytes);
// ConfigError unless `path` is a readable regular file: "WHAT 'PATH' does not
// exist / is a directory / is not a regular file (a FIFO, ...)".
void requireRegularFile(const std::string& path, const std::string& what);
// Reads a whole file; throws Error naming it when it cannot.
std::string readFile(const std::string& path);
// FNV-1a, 64 bits, as 16 hex digits.
std::string checksum(const std::string& bytes);

}  // namespace sluice
