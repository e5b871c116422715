// Saved-tensor hooks for LibTorch 1.13 (which has no C++ saved_tensors_hooks).
//
// installSavedTensorEngine() replaces autograd's default engine (through
// set_default_engine_stub) with a subclass whose
// get_default_saved_variable_hooks() asks the calling thread's active
// SavedTensorScope, if any, for a SavedVariableHooks object. Every tensor
// autograd saves for backward while a scope is active on a thread goes
// through that object: pack when saved, unpack when backward reads it.
// Installed once per process, before the first backward that should be seen;
// installing is idempotent and thread-safe. Scopes nest (innermost wins).
//
//   SavedBytesCounter counter;            // counts unique saved storages
//   { SavedTensorScope scope(counter.factory());
//     auto y = torch::matmul(a, b); }     // a and b are saved
//   counter.bytes();                      // a.nbytes() + b.nbytes()
#pragma once

#include <torch/torch.h>
#include <torch/csrc/autograd/saved_variable_hooks.h>

#include <functional>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

namespace sluice::memory {

using HooksFactory = std::function<std::unique_ptr<torch::autograd::SavedVariableHooks>()>;

void installSavedTensorEngine();

class SavedTensorScope {
 public:
  explicit SavedTensorScope(HooksFactory factory);
  ~SavedTensorScope();
  SavedTensorScope(const SavedTensorScope&) = delete;
  SavedTensorScope& operator=(const SavedTensorScope&) = delete;

 private:
  HooksFactory previous_;
};

// Keeps saved tensors as they are and counts them: bytes of distinct storages
// (a tensor saved by two ops counts once), optionally excluding storages that
// are not activations (parameters), and how often backward unpacked them.
class SavedBytesCounter {
 public:
  HooksFactory factory();
  // Storages never counted (e.g. the parameters' own storages).
  void exclude(const torch::Tensor& tensor);
  int64_t bytes() const;
  int64_t packs() const;
  int64_t unpacks() const;
  void reset();
  // Keep a reference to every packed tensor until reset(). Deduplication is by
  // storage address, so a caller that frees autograd graphs while counting
  // (the profiler) must hold them, or a reused address would be miscounted.
  void holdPackedTensors(bool hold);

 private:
  friend class CountingHooks;
  void onPack(const at::Tensor& t);
  void onUnpack();
  mutable std::mutex mutex_;
  std::unordered_set<const void*> seen_, excluded_;
  int64_t bytes_ = 0, packs_ = 0, unpacks_ = 0;
  bool hold_ = false;
  std::vector<at::Tensor> held_;
};

// Keeps saved tensors as they are and tracks the bytes of distinct activation
// storages alive in autograd graphs: a storage counts from its first pack
// until the last saved variable holding it is freed (after its backward), so
// peakBytes() is the high-water mark of saved activations, in-flight
// micro-batches included. Thread-safe.
class LiveSavedBytes {
 public:
  HooksFactory factory();
  void exclude(const torch::Tensor& tensor);  // e.g. parameters
  int64_t bytes() const;
  int64_t peakBytes() const;
  void resetPeak();

 private:
  friend class LiveHooks;
  const void* onPack(const at::Tensor& t);  // key to release, or nullptr when not counted
  void onRelease(const void* key);
  mutable std::mutex mutex_;
  std::unordered_map<const void*, std::pair<int64_t, int64_t>> live_;  // storage -> (holders, bytes)
  std::unordered_set<const void*> excluded_;
  int64_t bytes_ = 0, peak_ = 0;
};

}  // namespace sluice::memory
