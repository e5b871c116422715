// optim::DistAdam: AdamW with its state sharded over a data-parallel group.
//
// Public API (docs/architecture.md, "Public API"). In your own loop:
//   sluice::Communicator::initialize(&argc, &argv);
//   sluice::optim::DistAdam opt(model->parameters(), sluice::Communicator::world(),
//                               torch::optim::AdamWOptions(1e-3).weight_decay(0.1));
//   opt.setAccumulationSteps(4);  // micro-batches per step
//   for (...) { opt.zero_grad(); for (mb...) loss(mb).backward(); opt.step(); }
//
// A drop-in for torch::optim::AdamW (same AdamWOptions, same update, lr set
// through param_groups as usual). Each of the N ranks keeps fp32 exp_avg and
// exp_avg_sq only for its shard of every bucket (below): ceil(numel / N)
// elements (the flat bucket is padded to N shards), so optimizer state per
// rank is 8 * params / N bytes plus under N elements of padding per bucket.
//
// Layout (optim/FlatLayout.h): parameters are grouped, last first, into
// flat buckets of up to `bucketBytes` (25 MiB by default, DDP's cap). Each
// parameter's .grad shares the storage of its bucket's flat gradient
// buffer, so backward accumulates straight into it, and a bucket needs one
// reduce-scatter, one AdamW update of the rank's range and one all-gather,
// instead of one of each per parameter. A .grad that someone replaced (no
// longer in the bucket) is copied into the bucket and bound again: correct,
// only slower.
//
// Modes
// - AfterBackward (default): the reduce-scatters (below) all start inside
//   step(). Measured fastest with ranks sharing a machine's cores
//   (bench/distadam.sh): with no idle core, communication costs the same CPU
//   time inside backward as after it, so the overlap has nothing to gain.
// - Hooks: a post-accumulate-grad hook on each parameter (a
//   FunctionPostHook on its grad accumulator, as DDP's C++ reducer does)
//   counts its accumulations (setAccumulationSteps(n): earlier ones do not
//   reduce); when every parameter of a bucket has had its last one, the
//   bucket's nonblocking reduce-scatter (average) starts and overlaps the
//   rest of backward. step() waits on the buckets in the order they started,
//   updates each shard, and starts an all-gather of it; all gathers are
//   complete when step() returns. Each hook also tests the oldest unfinished
//   reduction, which drives Open MPI's progress (it has no progress thread):
//   otherwise nothing would move before step().
// - AllReduce: plain data-parallel AdamW: each bucket's gradients all-reduced
//   (average) in place and every rank updates the full parameters with full
//   (unsharded) state.
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
// - From construction on, every parameter has a .grad (zeros until backward).
// - Not thread-safe; hooks run on the thread that runs backward.
//
//   sluice::optim::DistAdam opt(model->parameters(), dataParallelComm,
//                               torch::optim::AdamWOptions(1e-3).weight_decay(0.1));
//   opt.zero_grad();
//   loss.backward();   // (DistAdamMode::Hooks: reduce-scatters start here)
//   opt.step();        // reduce-scatter, update shard, all-gather
#pragma once

#include <torch/optim/adamw.h>

#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "core/Communicator.h"
#include "core/Trace.h"
#include "optim/OptimizerChoices.h"  // DistAdamMode

namespace sluice::optim {

DistAdamMode parseDistAdamMode(const std::string& name);  // hooks | after_backward | allreduce
std::string toString(DistAdamMode mode);

class DistAdam : public torch::optim::Optimizer {
 public:
  // expectedRanks > 0: the communicator must have exactly that many ranks.
  // bucketBytes: the cap on a bucket's gradient bytes (float32).
  static constexpr int64_t kDefaultBucketBytes = 25ll << 20;
  DistAdam(std::vector<at::Tensor> params, Communicator comm, torch::optim::AdamWOptions options = {},
           DistAdamMode mode = DistAdamMode::AfterBackward, int expectedRanks = 0,
           int64_t bucketBytes = kDefaultBucketBytes);
  ~DistAdam() override;

  at::Tensor step(LossClosure closure = nullptr) override;
  // Hides Optimizer::zero_grad (not virtual): zeroes the buckets in place and
  // also forgets pending accumulation counts and reductions of an abandoned
  // step. Through a base pointer use optim::zeroGradients (OptimizerState.h):
  // Optimizer::zero_grad() sets gradients to none, which unbinds them from
  // the buckets (a later step then copies them in, slower).
  void zero_grad();

  // Gradient clipping (optim/GradClip.h), between backward and step(): the
  // step's reductions are finished first (started here unless hooks did).
  // gradSquares: a [total] float64 vector, entry globalIndex[i] the squared
  // L2 norm of this rank's share of parameter i's averaged gradient (its
  // shard's elements; in AllReduce mode the first replica counts the whole
  // gradient, the others nothing); globalIndex[i] < 0 leaves parameter i out.
  // scaleGradients: this rank's averaged gradient elements times `factor` (a
  // float32 scalar on the parameters' device), before step() updates them.
  at::Tensor gradSquares(const std::vector<int64_t>& globalIndex, int64_t total);
  void scaleGradients(const at::Tensor& factor);

  // Backward passes (micro-batches) per step; the reduce-scatter starts on the last.
  void setAccumulationSteps(int steps);
  // The same per parameter (in construction order): a parameter that several
  // graphs on this rank read (e.g. tied embeddings on zbv's rank 0, which
  // hosts the first and the last stage) accumulates once per graph per micro-batch.
  void setAccumulationSteps(const std::vector<int>& perParameter);
  DistAdamMode mode() const { return mode_; }
  // Reductions (one per bucket) started by hooks since the last step().
  int launchedReductions() const { return launched_; }
  int bucketCount() const { return static_cast<int>(buckets_.size()); }
  // step()'s waits on each bucket's reduce-scatter (all-reduce) and
  // all-gather as trace events on the "collective" stream while `trace` is
  // active (core/Trace.h); null: none.
  void setTrace(TraceRecorder* trace) { trace_ = trace; }
  // Bytes of optimizer state held by this rank (exp_avg + exp_avg_sq).
  int64_t stateBytes() const;
  // Bytes DistAdam holds between steps: the state and the flat gradient
  // buckets (every parameter's .grad). During step() it also holds, per
  // bucket from its reduction to its gather's end, this rank's gradient and
  // parameter shards and the gather buffer (at most two buckets' gathers at
  // once); with one rank or in AllReduce mode, none of these.
  int64_t residentBytes() const;

  // Shard state for checkpoints: per bucket "b<k>.exp_avg" and "b<k>.exp_avg_sq",
  // per parameter "<i>.step", plus "meta" (ranks, rank, parameter count,
  // mode, layout) and the buckets' element counts, checked on load: a file
  // loads only into the same layout (fullState() is the layout-free form).
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;

  // Layout-free state (checkpoints that load into another data-parallel
  // degree): per parameter, exp_avg and exp_avg_sq in the parameter's shape
  // and the step count. fullState() is collective (it all-gathers the shards);
  // setFullState() takes this rank's shard of each.
  struct FullState {
    at::Tensor expAvg, expAvgSq;
    int64_t step = 0;
  };
  std::vector<FullState> fullState();
  void setFullState(const std::vector<FullState>& state);

 private:
  struct Slot;
  struct Bucket;
  class Hook;
  void onGradAccumulated(size_t index);
  void bindGrad(Slot& slot, Bucket& bucket);
  void launchReduce(size_t bucket);
  void updateBucket(Bucket& bucket);
  void copyGathered(Bucket& bucket);
  void checkSameShapesEverywhere();
  void startReductions();
  void progressReductions();
  bool sharded() const { return mode_ != DistAdamMode::AllReduce; }  // AllReduce: full state, one-rank layout
  bool gathers() const { return sharded() && comm_.size() > 1; }      // shards to reduce-scatter and gather

  Communicator comm_;
  c10::TensorOptions options_;  // the parameters' (float32, their device)
  DistAdamMode mode_;
  std::vector<std::unique_ptr<Slot>> slots_;
  std::vector<std::unique_ptr<Bucket>> buckets_;
  int launched_ = 0;
  bool reductionsStarted_ = false;  // this step's (startReductions)
  std::deque<size_t> inFlight_;  // buckets whose reduction started and may not have finished, oldest first
  TraceRecorder* trace_ = nullptr;
};

}  // namespace sluice::optim
