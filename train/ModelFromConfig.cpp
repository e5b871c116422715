#include "train/ModelFromConfig.h"

#include <torch/utils.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include "checkpoint/SafeTensors.h"
#include "core/Bytes.h"
#include "core/Error.h"
#include "core/Log.h"

namespace sluice {

void checkModelFitsMemory(const Config& c, int ranksHere) {
  const auto parts = c.model.spec->memory(c);
  SLUICE_CHECK(!parts.empty(), ConfigError, "model.name " << c.model.spec->name << ": its spec estimates no memory");
  double total = 0;
  const MemoryPart* largest = &parts[0];
  for (auto& p : parts) {
    total += p.bytes;
    if (p.bytes > largest->bytes) largest = &p;
  }
  const double machine = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGE_SIZE));
  SLUICE_CHECK(machine <= 0 || total * ranksHere < machine, ConfigError,
               "config error: this model needs about " << formatBytes(static_cast<int64_t>(total))
                   << " on each rank before it is split (" << ranksHere << " rank" << (ranksHere > 1 ? "s" : "")
                   << " on this machine), more than its " << formatBytes(static_cast<int64_t>(machine))
                   << " of memory; the largest part is " << largest->what << ": " << formatBytes(static_cast<int64_t>(largest->bytes))
                   << ". Lower those keys");
}

ModelSetup makeModelSetup(const Config& c) {
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  checkModelFitsMemory(c, local ? std::max(1, std::atoi(local)) : 1);
  torch::manual_seed(static_cast<uint64_t>(c.job.seed));
  ModelSetup s = c.model.spec->build(c);
  if (!c.model.weights.empty()) {
    const auto n = loadWeights(*s.module, c.model.weights);
    log::info("model.weights: " + std::to_string(n) + " tensors from " + c.model.weights);
  }
  s.captureOptions.fuseAttention = c.model.fuseAttention;
  if (c.training.precision != Precision::Fp32) {
    s.computeType = c.training.precision == Precision::Bf16 ? c10::kBFloat16 : c10::kHalf;
    // The loss in float32 (logits may leave the graph in the compute dtype).
    s.loss = [inner = s.loss, low = s.computeType](const torch::Tensor& out, const torch::Tensor& target) {
      return inner(out.scalar_type() == low ? out.to(c10::kFloat) : out, target);
    };
  }
  if (!s.setTraining) {
    auto module = s.module;
    s.setTraining = [module](bool on) { module->train(on); };
  }
  return s;
}

}  // namespace sluice
