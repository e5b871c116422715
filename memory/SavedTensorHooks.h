// Saved-tensor hooks for LibTorch 1.13 (which has no C++ saved_tensors_hooks).
//
// Note [saved tensor rules]: three facts every hook here respects.
//  1. Pack receives the tensor autograd saves, grad_fn and all; keeping it
//     would make a cycle (graph node -> hooks -> tensor -> graph node), so a
//     graph that is dropped without backward would leak. Hooks keep
//     tensor.detach() (same storage, same version counter, no grad_fn).
//  2. With hooks installed, LibTorch's SavedVariable::unpack skips its check
//     that the tensor was not modified in place after it was saved. Hooks
//     record the version at pack (SavedVersion) and check it at unpack, so
//     such a modification is an error naming the op, never a wrong gradient.
//  3. Most tensors an op saves are its inputs, produced by earlier ops, and
//     linear-like ops save views of parameters: bytes are counted per
//     storage, and parameter storages are excluded.
//
// installSavedTensorEngine() replaces autograd's default engine (through
// set_default_engine_stub) with a subclass whose
// get_default_saved_variable_hooks() asks the calling thread's active
// SavedTensorScope, if any, for a SavedVariableHooks object. Every tensor
// autograd saves for backward while a scope is active on a thread goes
// through that object: pack when saved, unpack when backward reads it.
// Installed when this library loads, before any backward can run (Note
// [saved tensor engine, first] in SavedTensorHooks.cpp says why);
// installing again is a no-op. Scopes nest (innermost wins).
//
//   SavedBytesCounter counter;            // counts unique saved storages
//   { SavedTensorScope scope(counter.factory());
//     auto y = torch::matmul(a, b); }     // a and b are saved
//   counter.bytes();                      // a.nbytes() + b.nbytes()
#pragma once

#include <torch/csrc/autograd/saved_variable_hooks.h>

#include <functional>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

namespace sluice::memory {

using HooksFactory = std::function<std::unique_ptr<torch::autograd::SavedVariableHooks>()>;

// The version of a saved tensor at pack time, checked at unpack (Note [saved
// tensor rules], 2). Holds the version counter, not the tensor.
class SavedVersion {
 public:
  SavedVersion() = default;
  // saver: who saved it, for the message (e.g. "aten::gelu (node 37)"); may be empty.
  SavedVersion(const at::Tensor& tensor, std::string saver);
  // Throws MemoryError when the tensor was modified in place since pack.
  void check() const;

 private:
  c10::VariableVersion counter_;
  uint32_t saved_ = 0;
  std::string saver_, producer_, shape_;
};

// Idempotent and thread-safe; called at load time already.
void installSavedTensorEngine();
// Whether autograd's default engine is the one installed here.
bool savedTensorEngineInstalled();

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
  void exclude(const at::Tensor& tensor);
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
  void exclude(const at::Tensor& tensor);  // e.g. parameters
  // Counts the tensor's storage again (after exclude): for storages excluded
  // while one forward packs them, e.g. a stage's inputs. Call it while the
  // storage is still alive, so that a later storage at its address counts.
  void include(const at::Tensor& tensor);
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
