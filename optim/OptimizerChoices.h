// The optimizer's choices as typed values, each with its Choice table
// (core/Choice.h): which optimizer, DistAdam's reduction mode, the
// learning-rate schedule. No LibTorch here: config/Config.h parses the
// config's names into these once; optim/ and the trainer use the values.
//
//   auto kind = parseChoice(optimizerKinds(), "dist_adam", "optimizer");   // OptimizerKind::DistAdam
//   choiceName(distAdamModes(), DistAdamMode::Hooks);                     // "hooks"
#pragma once

#include <vector>

#include "core/Choice.h"

namespace sluice::optim {

enum class OptimizerKind { AdamW, DistAdam };
const std::vector<Choice<OptimizerKind>>& optimizerKinds();  // adamw | dist_adam

// Hooks: reduce-scatters start from backward hooks; AfterBackward: after the
// last backward; AllReduce: plain data-parallel AdamW (full state on every rank).
enum class DistAdamMode { Hooks, AfterBackward, AllReduce };
const std::vector<Choice<DistAdamMode>>& distAdamModes();  // hooks | after_backward | allreduce

enum class LrScheduleKind { Constant, Cosine };
const std::vector<Choice<LrScheduleKind>>& lrScheduleKinds();  // constant | cosine

}  // namespace sluice::optim
