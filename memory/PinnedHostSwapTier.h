// memory::PinnedHostSwapTier (CUDA builds): a GPU's swapped storages in
// pinned host memory.
//
// Contract (beyond memory/SwapTier.h)
// - Copies run on a side stream of the tier's own (from LibTorch's pool),
//   so they overlap the compute stream. A write first makes the side stream
//   wait for the event orderAfterCompute() recorded on the compute thread's
//   current stream when the storage was queued: the bytes copied are those
//   the forward produced. sync() waits for the side stream (the I/O thread
//   blocks, never the compute thread), after which the device memory may go.
// - Reads land in device memory allocated with the side stream current, and
//   return once the copy is done; handOver() records the storage on the
//   compute thread's current stream (recordStream), so the caching allocator
//   does not give the block back to the side stream while compute uses it.
// - Host blocks come from LibTorch's pinned (page-locked) host allocator,
//   which caches them; released blocks go back to it.
// - Copies go through the dispatcher (Tensor::copy_) under TransferScope
//   Swap: the transfer guard counts them as the swap tier's.
#pragma once

#include <ATen/core/Tensor.h>

#include <map>

#include "memory/SwapTier.h"

namespace sluice::memory {

class PinnedHostSwapTier final : public SwapTier {
 public:
  // Throws MemoryError when `device` is not a CUDA device present here.
  explicit PinnedHostSwapTier(c10::Device device);
  ~PinnedHostSwapTier() override;
  PinnedHostSwapTier(const PinnedHostSwapTier&) = delete;
  PinnedHostSwapTier& operator=(const PinnedHostSwapTier&) = delete;

  std::string describe() const override;
  c10::Device device() const override { return device_; }
  std::shared_ptr<void> orderAfterCompute() override;
  int64_t write(const void* data, int64_t bytes, const std::shared_ptr<void>& after) override;
  void sync() override;
  c10::Storage emptyStorage(int64_t bytes) override;
  void read(int64_t location, void* data, int64_t bytes) override;
  void release(int64_t location, int64_t bytes) override;
  void handOver(const c10::Storage& storage) override;
  // Pinned host bytes held now.
  int64_t hostBytes() const { return hostBytes_; }

 private:
  struct Impl;
  c10::Device device_;
  std::unique_ptr<Impl> impl_;
  std::map<int64_t, at::Tensor> blocks_;  // location -> pinned host block
  int64_t next_ = 0, hostBytes_ = 0;
};

}  // namespace sluice::memory
