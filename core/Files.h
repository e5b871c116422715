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

// Owns a file descriptor: closes it when destroyed or reset; move-only, so
// an owner cannot close it twice, and a constructor that throws after
// opening it leaks nothing.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { reset(); }
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  // Closes the descriptor held (if any) and holds `fd` instead.
  void reset(int fd = -1) noexcept;
  int release() noexcept {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_ = -1;
};

}  // namespace sluice
