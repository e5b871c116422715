#include "memory/SavedTensorHooks.h"

#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/variable.h>

#include <sstream>

#include "core/Error.h"

namespace sluice::memory {
namespace {

thread_local HooksFactory activeFactory;

// Note [saved tensor engine]: the only change to autograd's engine is where
// default saved-variable hooks come from; everything else is inherited.
class HookingEngine : public torch::autograd::Engine {
 public:
  // LibTorch requires a subclass to stop the device threads before the base
  // class destructor runs (they call this object's virtuals).
  ~HookingEngine() override { stop(); }
  std::unique_ptr<torch::autograd::SavedVariableHooks> get_default_saved_variable_hooks() override {
    return activeFactory ? activeFactory() : nullptr;
  }
};

torch::autograd::Engine& hookingEngine() {
  static HookingEngine engine;
  return engine;
}

}  // namespace

void installSavedTensorEngine() {
  static std::once_flag once;
  std::call_once(once, [] { torch::autograd::set_default_engine_stub(&hookingEngine); });
}

bool savedTensorEngineInstalled() { return &torch::autograd::Engine::get_default_engine() == &hookingEngine(); }

namespace {
// Note [saved tensor engine, first]: LibTorch's engines share one flag for
// starting their per-device threads (a file static in engine.cpp, not a
// member). Whichever engine runs the process's first backward creates the
// device queues; an engine installed later never gets any, and its first
// CUDA backward fails autograd's internal assertion on device_ready_queues_
// (seen on an H100/H200 when a GPU test had trained before the profiler
// installed this engine). So it is installed when the library loads, before
// any backward can run.
[[maybe_unused]] const bool kInstalledAtLoad = (installSavedTensorEngine(), true);
}  // namespace

SavedTensorScope::SavedTensorScope(HooksFactory factory) : previous_(std::move(activeFactory)) {
  installSavedTensorEngine();
  activeFactory = std::move(factory);
}

SavedTensorScope::~SavedTensorScope() { activeFactory = std::move(previous_); }

SavedVersion::SavedVersion(const at::Tensor& tensor, std::string saver) : saver_(std::move(saver)) {
  if (!tensor.defined()) return;
  counter_ = torch::autograd::impl::version_counter(tensor);
  saved_ = counter_.enabled() ? counter_.current_version() : 0;
  if (auto fn = tensor.grad_fn()) producer_ = fn->name();
  std::ostringstream os;
  os << c10::toString(tensor.scalar_type()) << tensor.sizes();
  shape_ = os.str();
}

void SavedVersion::check() const {
  if (!counter_.enabled()) return;
  const uint32_t now = counter_.current_version();
  if (now == saved_) return;
  std::ostringstream os;
  os << "a tensor saved for backward" << (saver_.empty() ? "" : " by " + saver_) << " was modified by an in-place "
     << "operation after it was saved: [" << shape_ << "]" << (producer_.empty() ? "" : ", output of " + producer_)
     << ", is at version " << now << "; expected version " << saved_
     << ". Make that in-place operation out of place (x = x + y instead of x += y) or clone the tensor before it";
  throw MemoryError(os.str());
}

class CountingHooks : public torch::autograd::SavedVariableHooks {
 public:
  explicit CountingHooks(SavedBytesCounter* counter) : counter_(counter) {}
  void call_pack_hook(const at::Tensor& tensor) override {
    counter_->onPack(tensor);
    kept_ = tensor.detach();  // Note [saved tensor rules], 1
    version_ = SavedVersion(tensor, "");
  }
  at::Tensor call_unpack_hook() override {
    version_.check();
    counter_->onUnpack();
    return kept_;
  }

 private:
  SavedBytesCounter* counter_;
  at::Tensor kept_;
  SavedVersion version_;
};

HooksFactory SavedBytesCounter::factory() {
  return [this] { return std::make_unique<CountingHooks>(this); };
}

void SavedBytesCounter::exclude(const torch::Tensor& tensor) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (tensor.defined() && tensor.has_storage()) excluded_.insert(tensor.storage().data());
}

void SavedBytesCounter::onPack(const at::Tensor& t) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++packs_;
  if (!t.defined() || !t.has_storage()) return;
  if (hold_) held_.push_back(t.detach());
  const void* key = t.storage().data();
  if (excluded_.count(key) || !seen_.insert(key).second) return;
  bytes_ += static_cast<int64_t>(t.storage().nbytes());
}

void SavedBytesCounter::onUnpack() {
  std::lock_guard<std::mutex> lock(mutex_);
  ++unpacks_;
}

int64_t SavedBytesCounter::bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return bytes_;
}
int64_t SavedBytesCounter::packs() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return packs_;
}
int64_t SavedBytesCounter::unpacks() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return unpacks_;
}

void SavedBytesCounter::reset() {
  std::lock_guard<std::mutex> lock(mutex_);
  seen_.clear();
  held_.clear();
  bytes_ = packs_ = unpacks_ = 0;
}

void SavedBytesCounter::holdPackedTensors(bool hold) {
  std::lock_guard<std::mutex> lock(mutex_);
  hold_ = hold;
}

class LiveHooks : public torch::autograd::SavedVariableHooks {
 public:
  explicit LiveHooks(LiveSavedBytes* owner) : owner_(owner) {}
  ~LiveHooks() override {
    if (key_) owner_->onRelease(key_);
  }
  void call_pack_hook(const at::Tensor& tensor) override {
    key_ = owner_->onPack(tensor);
    kept_ = tensor.detach();  // Note [saved tensor rules], 1
    version_ = SavedVersion(tensor, "");
  }
  at::Tensor call_unpack_hook() override {
    version_.check();
    return kept_;
  }

 private:
  LiveSavedBytes* owner_;
  const void* key_ = nullptr;
  at::Tensor kept_;
  SavedVersion version_;
};

HooksFactory LiveSavedBytes::factory() {
  return [this] { return std::make_unique<LiveHooks>(this); };
}

void LiveSavedBytes::exclude(const torch::Tensor& tensor) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (tensor.defined() && tensor.has_storage()) excluded_.insert(tensor.storage().data());
}

void LiveSavedBytes::include(const torch::Tensor& tensor) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (tensor.defined() && tensor.has_storage()) excluded_.erase(tensor.storage().data());
}

const void* LiveSavedBytes::onPack(const at::Tensor& t) {
  if (!t.defined() || !t.has_storage()) return nullptr;
  std::lock_guard<std::mutex> lock(mutex_);
  const void* key = t.storage().data();
  if (excluded_.count(key)) return nullptr;
  auto& entry = live_[key];
  if (entry.first++ == 0) {
    entry.second = static_cast<int64_t>(t.storage().nbytes());
    bytes_ += entry.second;
    peak_ = std::max(peak_, bytes_);
  }
  return key;
}

void LiveSavedBytes::onRelease(const void* key) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_.find(key);
  if (it == live_.end()) return;
  if (--it->second.first == 0) {
    bytes_ -= it->second.second;
    live_.erase(it);
  }
}

int64_t LiveSavedBytes::bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return bytes_;
}

int64_t LiveSavedBytes::peakBytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return peak_;
}

void LiveSavedBytes::resetPeak() {
  std::lock_guard<std::mutex> lock(mutex_);
  peak_ = bytes_;
}

}  // namespace sluice::memory
