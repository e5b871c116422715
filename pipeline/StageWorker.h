// pipeline::StageWorker: runs one pipeline stage's share of a schedule.
//
// Contract
// - The pipeline communicator has one rank per stage; rank == stage index.
// - runMicroBatches() executes the stage's actions for one optimizer step:
//   it posts every receive of the step up front (so a neighbour's send never
//   waits for this rank to reach its receive), runs forwards/backwards in
//   schedule order, and waits for its own sends before returning. Gradients
//   accumulate into the parameters' .grad across micro-batches.
// - Each micro-batch's loss is lossFn(output, target) / microBatches, so the
//   accumulated gradient is that of the mean loss over the step's batch, and
//   the returned loss (last stage only; undefined elsewhere) is that mean,
//   still a tensor: reading it is the caller's choice (see Note [lazy loss]).
// - Boundary values exchange gradients iff the traced value requires grad and
//   is floating point; both neighbours derive this from the same ValueInfo.
// - Blocks on MPI; throws CommError if a neighbour sends a tensor whose
//   shape/dtype differs from the split's ValueInfo.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <vector>

#include "core/Communicator.h"
#include "core/GraphSplit.h"
#include "core/StageModule.h"
#include "memory/SavedTensorHooks.h"
#include "pipeline/Schedule.h"

namespace sluice::pipeline {

struct MicroBatch {
  torch::Tensor input;   // read by stage 0
  torch::Tensor target;  // read by the last stage
};

using LossFn = std::function<torch::Tensor(const torch::Tensor& output, const torch::Tensor& target)>;

// Wall time of this stage's compute (forward incl. the loss on the last
// stage; backward), summed over micro-batches since construction.
struct ComputeTimes {
  double forwardSeconds = 0, backwardSeconds = 0;
  int64_t forwards = 0, backwards = 0;
};

class StageWorker {
 public:
  // params: tensors for stage.paramInputs, in that order.
  StageWorker(StageGraph stage, std::vector<torch::Tensor> params, Communicator pipelineComm, Schedule schedule,
              LossFn lossFn, ExecMode mode = ExecMode::Compiled);

  // One step's forwards and backwards (no optimizer step; see trainStep).
  torch::Tensor runMicroBatches(const std::vector<MicroBatch>& microBatches);
  // zero_grad, runMicroBatches, optimizer.step. Returns the loss as runMicroBatches.
  torch::Tensor trainStep(const std::vector<MicroBatch>& microBatches, torch::optim::Optimizer& optimizer);

  // Parameters (not buffers) this stage updates.
  std::vector<torch::Tensor> trainableParameters() const;
  const StageGraph& stage() const { return stage_; }
  const StageModule& module() const { return module_; }
  const ComputeTimes& computeTimes() const { return times_; }
  // Count saved-tensor bytes of this stage's forwards with `counter` (nullptr: off).
  void measureSavedBytes(memory::LiveSavedBytes* counter) { savedBytes_ = counter; }
  bool isFirst() const { return stage_.index == 0; }
  bool isLast() const { return stage_.index == schedule_.stages - 1; }

 private:
  struct InFlight;
  int tag(int microBatch, int value, size_t count) const;

  StageGraph stage_;
  std::vector<torch::Tensor> params_;
  Communicator comm_;
  Schedule schedule_;
  LossFn lossFn_;
  StageModule module_;
  std::vector<bool> inputNeedsGrad_;   // per boundary input
  std::vector<bool> outputNeedsGrad_;  // per output
  ComputeTimes times_;
  memory::LiveSavedBytes* savedBytes_ = nullptr;
};

}  // namespace sluice::pipeline
