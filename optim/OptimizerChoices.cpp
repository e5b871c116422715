#include "optim/OptimizerChoices.h"

namespace sluice::optim {

const std::vector<Choice<OptimizerKind>>& optimizerKinds() {
  static const std::vector<Choice<OptimizerKind>> kinds = {
      {OptimizerKind::AdamW, "adamw", "torch::optim::AdamW, replicated"},
      {OptimizerKind::DistAdam, "dist_adam", "AdamW sharded over the data-parallel replicas"}};
  return kinds;
}

const std::vector<Choice<DistAdamMode>>& distAdamModes() {
  static const std::vector<Choice<DistAdamMode>> modes = {
      {DistAdamMode::Hooks, "hooks", "reduce-scatters start from backward hooks"},
      {DistAdamMode::AfterBackward, "after_backward", "reduce-scatters after the last backward"},
      {DistAdamMode::AllReduce, "allreduce", "plain data-parallel AdamW: all-reduce, full state on every rank"}};
  return modes;
}

const std::vector<Choice<LrScheduleKind>>& lrScheduleKinds() {
  static const std::vector<Choice<LrScheduleKind>> kinds = {
      {LrScheduleKind::Constant, "constant", "lr after the warm-up"},
      {LrScheduleKind::Cosine, "cosine", "cosine decay to optimizer.min_lr at the last step"}};
  return kinds;
}

}  // namespace sluice::optim
