// memory::SwapTier: a slower memory that swapped storages go to.
//
// A tier stores byte blocks. write() returns where the block went; read()
// copies it back; release() frees it. Tiers are used from one I/O thread
// (SwapEngine), never concurrently. Failures throw MemoryError naming the
// tier's location (for example a full disk).
//
// FileSwapTier (CPU builds): one file in a directory on disk, unlinked as
// soon as it is created (nothing is left behind, even after a crash). The
// directory must exist, be writable and not be tmpfs (memory-backed: swapping
// there frees nothing). Swapped bytes must really leave memory, so the file
// is opened with O_DIRECT: blocks go between the tensor's memory and the disk
// without the page cache (and without a copy; the counting allocator aligns
// large blocks to pages; small or unaligned ones go through a bounce buffer).
// Where O_DIRECT is refused, writes go to the page cache and sync() makes
// them durable (fdatasync) and drops them (posix_fadvise DONTNEED); reads
// drop their pages after copying. Blocks are placed at 4 KiB-aligned offsets;
// freed extents are reused first-fit. Not copyable (it owns the file).
//
// PinnedHostSwapTier (CUDA builds, memory/PinnedHostSwapTier.h) takes the
// storages of a GPU into pinned host memory behind the same interface
// (made by makeDeviceSwapTier). makeSwapTier picks the tier from the device.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/Storage.h>

#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>

#include "core/Files.h"

namespace sluice::memory {

class SwapTier {
 public:
  virtual ~SwapTier() = default;
  virtual std::string describe() const = 0;
  // The device whose storages this tier takes.
  virtual c10::Device device() const { return c10::Device(c10::kCPU); }
  // Compute thread, when a storage is queued for writing: what its write
  // must come after (CUDA: an event on the current stream, after the ops
  // that produced it). nullptr: nothing.
  virtual std::shared_ptr<void> orderAfterCompute() { return nullptr; }
  // Returns the block's location. `after`: orderAfterCompute()'s token.
  virtual int64_t write(const void* data, int64_t bytes, const std::shared_ptr<void>& after) = 0;
  // Makes every write so far durable and drops it from memory.
  virtual void sync() = 0;
  // A storage of `bytes` on device() that a block is read back into.
  virtual c10::Storage emptyStorage(int64_t bytes);
  // Returns once the bytes are in `data` (a pointer into emptyStorage's memory).
  virtual void read(int64_t location, void* data, int64_t bytes) = 0;
  virtual void release(int64_t location, int64_t bytes) = 0;
  // Compute thread, when a storage read back is handed over for use (CUDA:
  // recordStream on the current stream, as the I/O side stream allocated it).
  virtual void handOver(const c10::Storage& storage) {}
};

class FileSwapTier : public SwapTier {
 public:
  // Throws MemoryError when dir is missing, not a directory, not writable, or on tmpfs.
  explicit FileSwapTier(const std::string& dir);
  FileSwapTier(const FileSwapTier&) = delete;
  FileSwapTier& operator=(const FileSwapTier&) = delete;
  std::string describe() const override;
  int64_t write(const void* data, int64_t bytes, const std::shared_ptr<void>& after = nullptr) override;
  void sync() override;
  void read(int64_t location, void* data, int64_t bytes) override;
  void release(int64_t location, int64_t bytes) override;
  const std::string& dir() const { return dir_; }

 private:
  int64_t allocate(int64_t bytes);
  void transfer(bool write, char* data, int64_t bytes, int64_t at);
  std::string dir_;
  UniqueFd fd_;
  bool direct_ = false;
  // One aligned page-multiple buffer for unaligned pieces (posix_memalign'd).
  std::unique_ptr<char, void (*)(void*)> bounce_{nullptr, std::free};
  int64_t end_ = 0;                   // file size in use
  std::map<int64_t, int64_t> free_;   // offset -> length of free extents
};

// The tier for a device's storages: a FileSwapTier in dir on CPU,
// makeDeviceSwapTier(device) on CUDA (dir unused). Throws MemoryError as
// they do, and for any other device.
std::unique_ptr<SwapTier> makeSwapTier(const c10::Device& device, const std::string& dir);
// memory/'s CUDA seam (core/CudaRuntime.h says how the seams work): the tier
// for a CUDA device's storages. A PinnedHostSwapTier in a build with CUDA
// (defined in memory/PinnedHostSwapTier.cpp); without CUDA
// (memory/NoCuda.cpp) MemoryError "swap: no swap tier for tensors on <device>".
std::unique_ptr<SwapTier> makeDeviceSwapTier(const c10::Device& device);

// The default swap directory: a folder under the system temp dir when that is
// on disk, else under /var/tmp. Never tmpfs.
std::string defaultSwapDir();
// Throws MemoryError naming dir and what to do when FileSwapTier would refuse it.
void checkSwapDir(const std::string& dir);

}  // namespace sluice::memory
