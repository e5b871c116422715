#include "models/ModelSetup.h"

#include <ATen/autocast_mode.h>

#include <optional>

namespace sluice {

OpGraph ModelSetup::captureEval(int64_t microBatchSize) const {
  struct Mode {
    const ModelSetup& s;
    ~Mode() { s.setTraining(true); }
  } restore{*this};
  setTraining(false);
  return capture(microBatchSize);
}

std::vector<torch::Tensor> ModelSetup::dataInputs(const data::Batch& batch) const {
  if (targetsAreInputs) return {batch.input, batch.target};
  return {batch.input};
}

void ModelSetup::toDevice(const c10::Device& where) {
  device = where;
  if (!where.is_cpu()) module->to(where);
}

namespace {

// Autocast on for one device type while in scope (Note [bf16 by capture]),
// without its weight cache: the cache would outlive the capture.
class AutocastScope {
 public:
  AutocastScope(c10::DeviceType type, c10::ScalarType dtype)
      : type_(type),
        enabled_(at::autocast::is_autocast_enabled(type)),
        dtype_(at::autocast::get_autocast_dtype(type)),
        cache_(at::autocast::is_autocast_cache_enabled()) {
    at::autocast::set_autocast_cache_enabled(false);
    at::autocast::set_autocast_dtype(type, dtype);
    at::autocast::set_autocast_enabled(type, true);
  }
  ~AutocastScope() {
    at::autocast::set_autocast_enabled(type_, enabled_);
    at::autocast::set_autocast_dtype(type_, dtype_);
    at::autocast::set_autocast_cache_enabled(cache_);
  }
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  c10::DeviceType type_;
  bool enabled_;
  c10::ScalarType dtype_;
  bool cache_;
};

}  // namespace

OpGraph ModelSetup::capture(int64_t microBatchSize) const {
  const auto examples = dataInputs(dataset->batch(0, microBatchSize));
  std::vector<NamedTensor> named;
  for (size_t i = 0; i < examples.size(); ++i) named.push_back({inputNames.at(i), examples[i].to(device)});
  std::optional<AutocastScope> autocast;
  if (computeType != c10::kFloat) autocast.emplace(device.type(), computeType);
  return sluice::capture(*module, forward, named, captureOptions);
}

std::vector<torch::Tensor> ModelSetup::tensorsByName(const std::vector<std::string>& names) const {
  return sluice::tensorsByName(*module, names);
}

}  // namespace sluice
