// optim::DistAdam: AdamW with its state sharded over a data-parallel group.
//
// A drop-in for torch::optim::AdamW (same AdamWOptions, same update, lr set
// through param_groups as usual). Each of the N ranks keeps fp32 exp_avg and
// exp_avg_sq only for its shard of every parameter: ceil(numel / N) elements
// (the flattened parameter is padded to N shards), so optimizer state per
// rank is 8 * params / N bytes plus padding.
//
// Modes
// - AfterBackward (default): the reduce-scatters (below) all start inside
//   step(). Measured fastest with ranks sharing a machine's cores
//   (bench/distadam.sh): with no idle core, communication costs the same CPU
//   time inside backward as after it, so the overlap has nothing to gain.
// - Hooks: a post-accumulate-grad hook on each parameter (a
//   FunctionPostHook on its grad accumulator, as DDP's C++ reducer does)
//   starts a nonblocking reduce-scatter (average) of that gradient as soon as
//   its last accumulation of the step is done (setAccumulationSteps(n):
//   earlier accumulations do not reduce). Reductions overlap the rest of
//   backward. step() walks the parameters in reverse, so the reductions that
//   started first are waited on first, updates the shard, and starts an
//   all-gather of it; all gathers are complete when step() returns. Each
//   hook also tests the oldest unfinished reduction, which drives Open MPI's
//   progress (it has no progress thread): otherwise nothing would move
//   before step().
// - AllReduce: plain data-parallel AdamW: gradients all-reduced (average) and
//   every rank updates the full parameters with full (unsharded) state.
//
// Contract
// - Every rank of the communicator constructs DistAdam with parameters of the
//   same shapes in the same order (checked at construction: OptimError), and
//   runs the same backward graph, so hooks fire, and collectives start, in the
//   same order everywhere (the CPU autograd engine runs a graph's nodes in a
//   deterministic order on the calling thread).
// - Parameters hold the same values on all ranks (they start equal; every
//   step writes the same gathered values).
// - step() without a completed backward for every trainable parameter throws.
// - Not thread-safe; hooks run on the thread that runs backward.
//
//   sluice::optim::DistAdam opt(model->parameters(), dataParallelComm,
//                               torch::optim::AdamWOptions(1e-3).weight_decay(0.1));
//   loss.backward();   // (DistAdamMode::Hooks: reduce-scatters start here)
//   opt.step();        // reduce-scatter, update shard, all-gather
#pragma once

#include <torch/torch.h>

#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "core/Communicator.h"
#include "core/Trace.h"

namespace sluice::optim {

enum class DistAdamMode { Hooks, AfterBackward, AllReduce };
DistAdamMode parseDistAdamMode(const std::string& name);  // hooks | after_backward | allreduce
std::string toString(DistAdamMode mode);

class DistAdam : public torch::optim::Optimizer {
 public:
  // expectedRanks > 0: the communicator must have exactly that many ranks.
  DistAdam(std::vector<torch::Tensor> params, Communicator comm, torch::optim::AdamWOptions options = {},
           DistAdamMode mode = DistAdamMode::AfterBackward, int expectedRanks = 0);
  ~DistAdam() override;

  torch::Tensor step(LossClosure closure = nullptr) override;
  // Hides (Optimizer::zero_grad is not virtual in 1.13): also forgets pending
  // accumulation counts and reductions of an abandoned step.
  void zero_grad();

  // Backward passes (micro-batches) per step; the reduce-scatter starts on the last.
  void setAccumulationSteps(int steps);
  DistAdamMode mode() const { return mode_; }
  // Reduce-scatters started by hooks since the last step().
  int launchedReductions() const { return launched_; }
  // step()'s waits on each parameter's reduce-scatter (all-reduce) and
  // all-gather as trace events on the "collective" stream while `trace` is
  // active (core/Trace.h); null: none.
  void setTrace(TraceRecorder* trace) { trace_ = trace; }
  // Bytes of optimizer state held by this rank (exp_avg + exp_avg_sq).
  int64_t stateBytes() const;

  // Shard state for checkpoints: tensors named "<i>.exp_avg", "<i>.exp_avg_sq",
  // "<i>.step", plus "meta" (ranks, rank, parameter count) checked on load.
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;

  // Layout-free state (checkpoints that load into another data-parallel
  // degree): per parameter, exp_avg and exp_avg_sq in the parameter's shape
  // and the step count. fullState() is collective (it all-gathers the shards);
  // setFullState() takes this rank's shard of each.
  struct FullState {
    torch::Tensor expAvg, expAvgSq;
    int64_t step = 0;
  };
  std::vector<FullState> fullState();
  void setFullState(const std::vector<FullState>& state);

 private:
  struct Slot;
  class Hook;
  void onGradAccumulated(size_t index);
  void launchReduce(size_t index);
  void updateShard(size_t index, Slot& slot);
  void checkSameShapesEverywhere();

  Communicator comm_;
  DistAdamMode mode_;
  std::vector<std::unique_ptr<Slot>> slots_;
  int accumulationSteps_ = 1;
  int launched_ = 0;
  std::deque<size_t> inFlight_;  // slots whose reduction started and may not have finished, oldest first
  void progressReductions();
  TraceRecorder* trace_ = nullptr;
};

}  // namespace sluice::optim
