// pipeline::StageWorker: runs one pipeline stage's share of a schedule.
//
// Contract
// - The pipeline communicator has one rank per pipeline rank; the stage runs
//   on rank schedule.rankOf(stage index) (== the stage index unless the
//   schedule is interleaved or zbv, where a rank hosts several stages, each with its
//   own StageWorker, driven together by runStep(), pipeline/RankWorker.h). Messages to the previous
//   and next stage go to the ranks the schedule's map names (under zbv,
//   stages ranks - 1 and ranks share a rank: it sends to itself), on the pipeline
//   communicator, or with several stages per rank on one communicator per
//   boundary (boundaryCommunicators()), so tags (micro-batch x value x direction) stay
//   unique between two ranks that exchange activations and gradients of
//   different boundaries.
// - runMicroBatches() executes the stage's actions for one optimizer step in
//   schedule order. Note [bounded buffers]: before each forward or backward it
//   posts the receives the schedule needs right after it (so they arrive
//   while it computes), never all of the step's at once, and it lets go of a
//   sent tensor as soon as its send completes; after sending a stage output
//   it keeps only the output's gradient edge (where its gradient enters
//   autograd), not the tensor. So a stage holds the activations of the
//   micro-batches in flight (min(p - s, m) for 1F1B), plus one micro-batch of
//   receive buffers, which is what the cost model counts. It waits for its
//   own sends before returning. Gradients accumulate into the parameters'
//   .grad across micro-batches.
// - Schedules that split backward (zb-h1, interleaved-zb) run BackwardInput /
//   BackwardWeight through BackwardSplit.
// - With a memory plan (setMemoryPlan; eager execution; every schedule),
//   saved tensors are kept, swapped or recomputed as the plan says
//   (memory::StageMemory); swapped ones are prefetched in the order the
//   rank runs its backward pieces (B, or Bi and W separately), across the
//   stages it hosts (Note [rank prefetch order], pipeline/Schedule.h),
//   and under a split backward a swapped storage the weight half needs goes
//   back to the tier between Bi and W (Note [split backward memory],
//   memory/StageMemory.h).
// - Each micro-batch's forward runs under its random key (MicroBatch::random,
//   Note [random streams]): random nodes draw the same numbers on any split,
//   schedule and memory plan. A stage that draws random numbers must run
//   eager or graphs (not ExecMode::Compiled).
// - ExecMode::Graphs (CUDA): each micro-batch's forward and backward replay
//   CUDA graphs captured per slot on first use (Note [graphed stages],
//   StageGraphs.h); no memory plan.
// - Each micro-batch's loss is lossFn(output, target) / microBatches, so the
//   accumulated gradient is that of the mean loss over the step's batch, and
//   the returned loss (last stage only; undefined elsewhere) is that mean,
//   still a tensor: reading it is the caller's choice (see Note [lazy loss]).
//   Its backward is seeded with setLossScale's factor (1 unless fp16 loss
//   scaling, Note [fp16 loss scaling] in optim/LossScaler.h): the gradients
//   come out multiplied by it, the returned loss does not.
// - Boundary values exchange gradients iff the traced value requires grad and
//   is floating point; both neighbours derive this from the same ValueInfo.
// - Runs on one device (device()): CPU, or a GPU whose current stream gets
//   the stage's work; receives land there (over NCCL without the host
//   waiting, over MPI through host staging: core/Communicator.h).
// - Blocks on MPI; throws CommError if a neighbour sends a tensor whose
//   shape/dtype differs from the split's ValueInfo, or when a wait exceeds the
//   watchdog (Communicator::setWaitTimeout); errors name the micro-batch and
//   the action (CommActivity).
#pragma once

#include <torch/csrc/autograd/edge.h>

#include <functional>
#include <optional>
#include <vector>

#include "core/LossFn.h"
#include "core/Communicator.h"
#include "core/GraphSplit.h"
#include "core/RandomStream.h"
#include "core/StageModule.h"
#include "memory/SavedTensorHooks.h"
#include "memory/StageMemory.h"
#include "pipeline/BackwardSplit.h"
#include "pipeline/Schedule.h"
#include "pipeline/StageGraphs.h"
#include "core/Trace.h"

namespace sluice::pipeline {

struct MicroBatch {
  at::Tensor input;   // read by stage 0
  at::Tensor target;  // read by the last stage (and by stage 0 when the graph takes it as a second data input)
  // The key of its random nodes' draws (Note [random streams]); microBatch -1:
  // its index in the step's list.
  RandomKey random;
};

// Sums of a forward-only pass (last stage; zeros elsewhere): loss summed
// over samples (mean loss x rows per micro-batch), correct argmax
// predictions (classifiers: output [rows, classes], targets [rows]), samples.
struct EvalSums {
  double loss = 0, correct = 0, samples = 0;
};

// Wall time of this stage's compute (forward incl. the loss on the last
// stage; backward), summed over micro-batches since construction.
struct ComputeTimes {
  double forwardSeconds = 0, backwardSeconds = 0;
  int64_t forwards = 0, backwards = 0;
};

class StageWorker {
 public:
  // params: tensors for stage.paramInputs, in that order. boundaryComms: see
  // the contract (required when the schedule puts several stages on a rank).
  // device: where the stage runs; its parameters must be there, and what it
  // receives from its neighbours is placed there.
  StageWorker(StageGraph stage, std::vector<at::Tensor> params, Communicator pipelineComm, Schedule schedule,
              LossFn lossFn, ExecMode mode = ExecMode::Eager, std::vector<Communicator> boundaryComms = {},
              c10::Device device = c10::Device(c10::kCPU));
  ~StageWorker();

  // Carry out this memory plan from the next step on (eager execution only;
  // GraphError otherwise). MemoryError when its swap directory is unusable.
  // engine: the rank's shared swap engine (several stages per rank), or null.
  void setMemoryPlan(memory::MemoryPlan plan, const std::string& swapDir,
                     std::shared_ptr<memory::SwapEngine> engine = nullptr);
  // nullptr without a memory plan.
  const memory::StageMemory* memory() const { return memory_.get(); }
  // Called before every forward with its micro-batch (fault injection in tests).
  void setForwardHook(std::function<void(int microBatch)> hook) { forwardHook_ = std::move(hook); }
  // Record every action of the steps the recorder is active in (nullptr: off),
  // and the memory plan's swap I/O and recomputes.
  void setTrace(TraceRecorder* trace);
  // The last stage's backward seed from the next step on (a power of two).
  void setLossScale(double scale) { lossScale_ = scale; }
  // pipeline.boundary_dtype: compute. Floating boundary values wider than
  // `type` (activations, their gradients, evaluation's activations) travel
  // in `type` and are cast back to the graph's dtype on arrival: half the
  // bytes of float32 for bfloat16/float16, rounded on the way (so no longer
  // bitwise one process). Both neighbours must set the same type, before the
  // first step. Default: every value travels in its graph dtype (exact).
  void setBoundaryType(c10::ScalarType type) { boundaryType_ = type; }

  // One step's forwards and backwards (no optimizer step: the caller's).
  // The schedule must put only this stage on its rank (else use runStep).
  at::Tensor runMicroBatches(const std::vector<MicroBatch>& microBatches);

  // The step protocol runStep() drives: beginStep, then for every action of
  // this stage in its rank's order postReceives (ahead of time, any number of
  // times) and execute, then endStep (waits for this stage's sends; returns
  // the step's loss on the last stage, undefined elsewhere).
  void beginStep(const std::vector<MicroBatch>& microBatches);
  void postReceives(const Action& a);
  // weightNext: a BackwardInput whose weight half runs next.
  void execute(const Action& a, bool weightNext = false);
  // Whether backward piece `a` of this stage reads swapped storages, and
  // queues their reads (Note [rank prefetch order], Schedule.h).
  bool readsSwapped(const Action& a) const;
  bool swaps() const;  // the stage's memory plan swaps something
  void prefetch(const Action& a);
  void reapSends();
  at::Tensor endStep();

  // Forward only, no autograd graph, no saved tensors: one micro-batch,
  // received from the previous stage (blocking) and sent to the next without
  // waiting (endStep() after the last one waits for the sends; call between
  // steps, when no training message is in flight), its sums added to
  // `sums` on the last stage. For evaluation with a graph captured in eval
  // mode; the loss is lossFn(output, target), unscaled. Call it for the
  // micro-batches in order, and with several stages per rank micro-batch by
  // micro-batch for each of the rank's stages in model order: every rank then
  // waits only on work that comes earlier in (micro-batch, stage) order, so
  // blocking messages cannot deadlock.
  void evaluateMicroBatch(const MicroBatch& data, int microBatch, bool classifier, EvalSums& sums);

  // Parameters (not buffers) this stage updates, each tensor once.
  std::vector<at::Tensor> trainableParameters() const;
  // Note [reader gradients] (RankWorker.h): from the next step on, the
  // parameter entries marked here (indices into stage().paramInputs) enter
  // each step's forwards as a leaf of their own (the parameter's storage,
  // detached), so their readers' gradients accumulate apart from the
  // parameter's .grad; readerLeaves() gives (parameter, this step's leaf)
  // for the marked entries, in entry order, after the step.
  void setReaderLeaves(std::vector<char> marked);
  std::vector<std::pair<at::Tensor, at::Tensor>> readerLeaves() const;
  const std::vector<at::Tensor>& parameterEntries() const { return params_; }
  const StageGraph& stage() const { return stage_; }
  const StageModule& module() const { return module_; }
  const ComputeTimes& computeTimes() const { return times_; }
  // pipeline.execution: graphs: CUDA graphs captured so far, and the slots they serve (0 otherwise).
  int graphsCaptured() const { return graphs_ ? graphs_->graphsCaptured() : 0; }
  int graphSlots() const { return slots_.size(); }
  // Count saved-tensor bytes of this stage's forwards with `counter` (nullptr: off):
  // what its nodes save, less its inputs (the plan holds those as boundary bytes).
  void measureSavedBytes(memory::LiveSavedBytes* counter) { savedBytes_ = counter; }
  bool isFirst() const { return stage_.index == 0; }
  bool isLast() const { return stage_.index == schedule_.stages - 1; }
  const Schedule& schedule() const { return schedule_; }
  const c10::Device& device() const { return device_; }

 private:
  struct InFlight;
  TensorSpec specOf(const ValueInfo& v) const;
  // A boundary message's tag: activations and gradients apart, as on zbv's
  // self-boundary both go from the rank to itself on one communicator.
  int tag(int microBatch, int value, size_t count, bool gradient) const;
  std::vector<at::Tensor> firstStageInputs(const MicroBatch& data) const;
  void forward(int mb, InFlight& st, const MicroBatch& data, at::Tensor& lossSum);
  void backward(int mb, InFlight& st);
  void backwardInput(int mb, InFlight& st, bool weightNext);
  void backwardWeight(int mb, InFlight& st);
  // pipeline.execution: graphs (StageWorkerGraphs.cpp, Note [graphed stages] in StageGraphs.h).
  void graphedForward(int mb, InFlight& st, const MicroBatch& data, at::Tensor& lossSum);
  void graphedBackward(InFlight& st);
  void graphedWeights(int mb, InFlight& st);
  void receiveActivations(const Action& a, InFlight& st);
  void sendActivations(const Action& a, InFlight& st);
  void receiveGrads(const Action& a, InFlight& st);
  void sendGrads(const Action& a, InFlight& st);
  bool inputHalfReads() const;  // some input needs a gradient
  std::pair<torch::autograd::edge_list, std::vector<at::Tensor>> backwardRoots(InFlight& st) const;

  StageGraph stage_;
  std::vector<at::Tensor> params_;
  std::vector<char> readerLeaf_;             // per params_ entry: a leaf of its own each step
  std::vector<at::Tensor> stepParams_;    // this step's: params_, with those leaves
  c10::Device device_;
  Communicator comm_;
  Communicator prevComm_, nextComm_;  // to the previous / next stage (comm_ unless interleaved)
  int prevRank_ = -1, nextRank_ = -1;  // their ranks there
  Schedule schedule_;
  LossFn lossFn_;
  StageModule module_;
  std::vector<bool> inputNeedsGrad_;   // per boundary input
  std::vector<bool> outputNeedsGrad_;  // per output
  ComputeTimes times_;
  memory::LiveSavedBytes* savedBytes_ = nullptr;
  std::unique_ptr<memory::StageMemory> memory_;
  std::unique_ptr<StageGraphs> graphs_;  // pipeline.execution: graphs
  SlotPool slots_;
  std::vector<Work> sends_;
  std::vector<InFlight> state_;  // per micro-batch, during a step
  const std::vector<MicroBatch>* microBatches_ = nullptr;
  at::Tensor lossSum_;
  std::function<void(int)> forwardHook_;
  TraceRecorder* trace_ = nullptr;
  double lossScale_ = 1;
  std::optional<c10::ScalarType> boundaryType_;
  c10::ScalarType wireType(c10::ScalarType graphType) const;
  at::Tensor toWire(const at::Tensor& t) const;
  at::Tensor fromWire(const at::Tensor& t, const ValueInfo& v) const;
};

// The per-boundary communicators of a schedule that puts several stages on a
// rank (one duplicate of `pipeline` per boundary between consecutive
// stages); empty otherwise. Collective over `pipeline`.
std::vector<Communicator> boundaryCommunicators(const Communicator& pipeline, const Schedule& schedule);

}  // namespace sluice::pipeline
