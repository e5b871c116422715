// optim::TrainingOptimizer: the optimizer a training job steps, made from its
// options by makeTrainingOptimizer: torch::optim::AdamW, or DistAdam sharded
// over a data-parallel group. The trainer drives it through this interface
// and never asks which one it is.
//
//   optim::OptimizerOptions o;            // AdamW's hyperparameters, the kind, DistAdam's mode and buckets
//   auto opt = optim::makeTrainingOptimizer(o, params, dpComm);
//   opt->optimizer().step();              // the torch::optim::Optimizer (zeroGradients, adamState, ... take it)
//   opt->residentBytes();                 // state held between steps now (the plan's static bytes)
//
// Internal to Sluice (the launcher's use); a user's own loop constructs
// DistAdam or AdamW directly. DistAdam's constructor is collective over its
// communicator; the others are local.
#pragma once

#include <torch/optim/adamw.h>

#include <memory>
#include <string>
#include <vector>

#include "core/Choice.h"
#include "core/Communicator.h"
#include "core/Trace.h"
#include "optim/DistAdam.h"
#include "optim/OptimizerChoices.h"

namespace sluice::optim {

struct OptimizerOptions {
  OptimizerKind kind = OptimizerKind::AdamW;
  torch::optim::AdamWOptions adamw{1e-3};
  DistAdamMode distAdamMode = DistAdamMode::AfterBackward;
  int64_t bucketBytes = 25 << 20;
  int expectedRanks = 0;      // DistAdam: > 0, the data-parallel group must have that many ranks
  int accumulationSteps = 1;  // DistAdam: micro-batches per step (reduce on the last one's backward)
  // DistAdam: how many of this rank's stages read each parameter (empty: 1 each); each
  // parameter's accumulations per step are accumulationSteps x that.
  std::vector<int> readers;
};

class TrainingOptimizer {
 public:
  virtual ~TrainingOptimizer() = default;
  virtual torch::optim::Optimizer& optimizer() = 0;
  // Bytes of state it holds between steps now (DistAdam: its buckets and
  // moment shards; AdamW: 0 before its first step makes its moments).
  virtual int64_t residentBytes() const = 0;
  // Where its own waits go on the timeline (DistAdam's collectives); AdamW has none.
  virtual void setTrace(TraceRecorder* trace) = 0;
  // One line for the log: what it is and what it holds.
  virtual std::string describe() const = 0;
};

std::unique_ptr<TrainingOptimizer> makeTrainingOptimizer(const OptimizerOptions& options,
                                                         const std::vector<at::Tensor>& params,
                                                         const Communicator& dataParallel);

}  // namespace sluice::optim
