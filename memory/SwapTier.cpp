#include "memory/SwapTier.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "core/Bytes.h"
#include "core/Error.h"

#include <torch/types.h>

namespace sluice::memory {
namespace {

constexpr int64_t kAlign = 4096;

int64_t alignUp(int64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

bool isTmpfs(const std::string& dir) {
  struct statfs fs {};
  return statfs(dir.c_str(), &fs) == 0 && (fs.f_type == TMPFS_MAGIC || fs.f_type == RAMFS_MAGIC);
}

std::string errnoText() { return std::strerror(errno); }

}  // namespace

void checkSwapDir(const std::string& dir) {
  struct stat st {};
  SLUICE_CHECK(!dir.empty(), MemoryError, "memory.swap_dir is empty: name a directory on disk for swapped tensors");
  SLUICE_CHECK(::stat(dir.c_str(), &st) == 0, MemoryError,
               "swap directory " << dir << " does not exist: create it or set memory.swap_dir to a directory on disk");
  SLUICE_CHECK(S_ISDIR(st.st_mode), MemoryError,
               "swap directory " << dir << " is not a directory: set memory.swap_dir to a directory on disk");
  SLUICE_CHECK(::access(dir.c_str(), W_OK | X_OK) == 0, MemoryError,
               "swap directory " << dir << " is not writable (" << errnoText()
                                 << "): fix its permissions or set memory.swap_dir to another directory");
  SLUICE_CHECK(!isTmpfs(dir), MemoryError,
               "swap directory " << dir << " is on tmpfs (memory), so swapping there frees nothing: set memory.swap_dir "
                                 << "to a directory on disk, e.g. /var/tmp");
}

std::string defaultSwapDir() {
  std::string base = std::filesystem::temp_directory_path().string();
  if (isTmpfs(base)) base = "/var/tmp";
  return base;
}

constexpr int64_t kBounce = 1 << 20;

c10::Storage SwapTier::emptyStorage(int64_t bytes) {
  return torch::empty({bytes}, torch::kUInt8).storage();
}

std::unique_ptr<SwapTier> makeSwapTier(const c10::Device& device, const std::string& dir) {
  if (device.is_cpu()) return std::make_unique<FileSwapTier>(dir);
  if (device.is_cuda()) return makeDeviceSwapTier(device);
  throw MemoryError("swap: no swap tier for tensors on " + device.str());
}

FileSwapTier::FileSwapTier(const std::string& dir) : dir_(dir) {
  checkSwapDir(dir);
  std::string path = dir + "/sluice-swap-XXXXXX";
  std::vector<char> name(path.begin(), path.end());
  name.push_back('\0');
  fd_.reset(::mkostemp(name.data(), O_DIRECT));
  direct_ = fd_.valid();
  if (!fd_.valid()) fd_.reset(::mkstemp(name.data()));  // this file system refuses O_DIRECT
  SLUICE_CHECK(fd_.valid(), MemoryError, "cannot create a swap file in " << dir << ": " << errnoText());
  ::unlink(name.data());  // gone from the directory now; the space is freed when fd_ closes
  void* bounce = nullptr;
  SLUICE_CHECK(::posix_memalign(&bounce, kAlign, kBounce) == 0, MemoryError,
               "swap: cannot allocate a " << kBounce << "-byte bounce buffer");
  bounce_.reset(static_cast<char*>(bounce));
}

std::string FileSwapTier::describe() const {
  return "file in " + dir_ + (direct_ ? " (O_DIRECT)" : " (fdatasync + drop from page cache)");
}

// Moves `bytes` between memory and the file at `at` (4 KiB-aligned). With
// O_DIRECT the memory address and the length must be page-aligned too:
// aligned whole pages go directly, the rest through the bounce buffer (a
// partial last page is padded on write, and read whole into the buffer).
void FileSwapTier::transfer(bool write, char* data, int64_t bytes, int64_t at) {
  auto move = [&](char* p, int64_t n, int64_t where) {
    int64_t done = 0;
    while (done < n) {
      const ssize_t r = write ? ::pwrite(fd_.get(), p + done, static_cast<size_t>(n - done), where + done)
                              : ::pread(fd_.get(), p + done, static_cast<size_t>(n - done), where + done);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) {
        const int err = r < 0 ? errno : (write ? ENOSPC : EIO);
        throw MemoryError("swap directory " + dir_ + ": " + (write ? "writing " : "reading back ") +
                          formatBytesExact(bytes) + " failed (" + std::strerror(err) +
                          (err == ENOSPC ? "; the disk is full" : "") + ")" +
                          (write ? ": free space there, set memory.swap_dir to a larger disk, or raise memory.budget_mb"
                                 : ""));
      }
      done += r;
    }
  };
  if (!direct_) {
    move(data, bytes, at);
    return;
  }
  const bool aligned = reinterpret_cast<uintptr_t>(data) % kAlign == 0;
  const int64_t whole = aligned ? bytes / kAlign * kAlign : 0;
  if (whole > 0) move(data, whole, at);
  for (int64_t off = whole; off < bytes; off += kBounce) {
    const int64_t n = std::min(kBounce, bytes - off), padded = alignUp(n);
    if (write) {
      std::memcpy(bounce_.get(), data + off, n);
      std::memset(bounce_.get() + n, 0, padded - n);
      move(bounce_.get(), padded, at + off);
    } else {
      move(bounce_.get(), padded, at + off);
      std::memcpy(data + off, bounce_.get(), n);
    }
  }
}

int64_t FileSwapTier::allocate(int64_t bytes) {
  const int64_t need = alignUp(bytes);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second >= need) {
      const int64_t at = it->first, rest = it->second - need;
      free_.erase(it);
      if (rest > 0) free_[at + need] = rest;
      return at;
    }
  }
  const int64_t at = end_;
  end_ += need;
  return at;
}

int64_t FileSwapTier::write(const void* data, int64_t bytes, const std::shared_ptr<void>&) {
  const int64_t at = allocate(bytes);
  try {
    transfer(true, const_cast<char*>(static_cast<const char*>(data)), bytes, at);
  } catch (...) {
    release(at, bytes);
    throw;
  }
  return at;
}

void FileSwapTier::sync() {
  if (direct_) return;  // nothing in the page cache
  SLUICE_CHECK(::fdatasync(fd_.get()) == 0, MemoryError,
               "swap directory " << dir_ << ": fdatasync failed (" << errnoText()
                                 << "): free space there or set memory.swap_dir to another disk");
  ::posix_fadvise(fd_.get(), 0, 0, POSIX_FADV_DONTNEED);
}

void FileSwapTier::read(int64_t location, void* data, int64_t bytes) {
  transfer(false, static_cast<char*>(data), bytes, location);
  if (!direct_) ::posix_fadvise(fd_.get(), location, alignUp(bytes), POSIX_FADV_DONTNEED);
}

void FileSwapTier::release(int64_t location, int64_t bytes) {
  int64_t at = location, len = alignUp(bytes);
  // Merge with the neighbours so that the file does not fragment.
  auto next = free_.lower_bound(at);
  if (next != free_.end() && next->first == at + len) {
    len += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == at) {
      at = prev->first;
      len += prev->second;
      free_.erase(prev);
    }
  }
  if (at + len == end_) {
    end_ = at;
    // Give the space back to the file system too.
    if (::ftruncate(fd_.get(), end_) != 0) free_[at] = len, end_ = at + len;
  } else {
    free_[at] = len;
  }
}

}  // namespace sluice::memory
