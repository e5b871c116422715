#include "pipeline/StageWorker.h"
#include "pipeline/StageWorkerInFlight.h"

#include "core/HostSync.h"
#include "pipeline/RankWorker.h"
#include "pipeline/ScheduleSimulation.h"

#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>
#include <set>

#include "core/Error.h"
#include "core/HostSync.h"
#include "pipeline/ScheduleSimulation.h"

namespace sluice::pipeline {

namespace {

bool needsGrad(const ValueInfo& v) { return v.isTensor && v.requiresGrad && c10::isFloatingType(v.dtype); }

}  // namespace

c10::ScalarType StageWorker::wireType(c10::ScalarType graphType) const {
  // Only floating values wider than the wire's: integers and values the
  // graph already gives in 16 bits travel as they are.
  if (!boundaryType_ || !c10::isFloatingType(graphType) || c10::elementSize(graphType) <= 2) return graphType;
  return *boundaryType_;
}

TensorSpec StageWorker::specOf(const ValueInfo& v) const { return TensorSpec{v.shape, wireType(v.dtype), device_}; }

torch::Tensor StageWorker::toWire(const torch::Tensor& t) const {
  return t.to(wireType(t.scalar_type())).contiguous();
}

torch::Tensor StageWorker::fromWire(const torch::Tensor& t, const ValueInfo& v) const {
  return t.to(v.dtype);  // itself when the wire kept the graph's dtype
}


StageWorker::StageWorker(StageGraph stage, std::vector<torch::Tensor> params, Communicator pipelineComm,
                         Schedule schedule, LossFn lossFn, ExecMode mode, std::vector<Communicator> boundaryComms,
                         c10::Device device)
    : stage_(std::move(stage)), params_(std::move(params)), device_(device), comm_(std::move(pipelineComm)),
      schedule_(std::move(schedule)), lossFn_(std::move(lossFn)),
      module_(stage_.graph, "stage" + std::to_string(stage_.index), mode == ExecMode::Graphs ? ExecMode::Eager : mode,
              {}, stage_.nodeIndex) {
  SLUICE_CHECK(params_.size() == stage_.paramInputs.size(), GraphError,
               "stage " << stage_.index << " needs " << stage_.paramInputs.size() << " parameters, got "
                        << params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    SLUICE_CHECK(params_[i].device() == device_, GraphError,
                 "stage " << stage_.index << ": parameter " << stage_.paramInputs[i] << " is on "
                          << params_[i].device() << " but the stage runs on " << device_);
  }
  SLUICE_CHECK(comm_.size() == schedule_.rankCount(), CommError,
               "pipeline communicator has " << comm_.size() << " ranks but the schedule has " << schedule_.rankCount()
                                            << " ranks");
  SLUICE_CHECK(stage_.index >= 0 && stage_.index < schedule_.stages && comm_.rank() == schedule_.rankOf(stage_.index),
               CommError, "pipeline rank " << comm_.rank() << " was given stage " << stage_.index);
  checkSchedule(schedule_);
  const int s = stage_.index;
  if (schedule_.chunks() > 1) {
    SLUICE_CHECK(static_cast<int>(boundaryComms.size()) == schedule_.stages - 1, CommError,
                 "stage " << s << ": schedule " << schedule_.name << " puts " << schedule_.chunks()
                          << " stages on each rank and needs one communicator per boundary ("
                          << schedule_.stages - 1 << "), got " << boundaryComms.size());
    if (s > 0) prevComm_ = boundaryComms[s - 1];
    if (s < schedule_.stages - 1) nextComm_ = boundaryComms[s];
  } else {
    prevComm_ = comm_;
    nextComm_ = comm_;
  }
  if (s > 0) prevRank_ = schedule_.rankOf(s - 1);
  if (s < schedule_.stages - 1) nextRank_ = schedule_.rankOf(s + 1);
  for (auto& v : stage_.boundaryInputs) inputNeedsGrad_.push_back(!isFirst() && needsGrad(v));
  for (auto& v : stage_.outputs) outputNeedsGrad_.push_back(!isLast() && needsGrad(v));
  if (mode == ExecMode::Graphs) {  // captured node by node as eager runs (Note [graphed stages])
    graphs_ = makeStageGraphs(device_, "stage " + std::to_string(s), randomStreamIds(*stage_.graph, stage_.nodeIndex),
                              outputNeedsGrad_);
  }
}

StageWorker::~StageWorker() = default;

void StageWorker::setMemoryPlan(memory::MemoryPlan plan, const std::string& swapDir,
                                std::shared_ptr<memory::SwapEngine> engine) {
  SLUICE_CHECK(module_.mode() == ExecMode::Eager && !graphs_, GraphError,
               "stage " << stage_.index << ": a memory plan (swap, recompute) needs pipeline.execution: eager");
  memory::StageMemoryOptions options;
  options.plan = std::move(plan);
  options.swapDir = swapDir;
  options.device = device_;
  options.stageName = "stage " + std::to_string(stage_.index);
  options.engine = std::move(engine);
  memory_ = std::make_unique<memory::StageMemory>(module_.program(), stage_.nodeIndex, params_, std::move(options));
  if (!memory_->active()) memory_.reset();
  if (memory_) memory_->setTrace(trace_);
}

void StageWorker::setTrace(TraceRecorder* trace) {
  trace_ = trace;
  if (memory_) memory_->setTrace(trace);
}

std::vector<torch::Tensor> StageWorker::trainableParameters() const {
  std::vector<torch::Tensor> out;
  std::set<const c10::TensorImpl*> seen;  // a parameter with several readers is several entries
  for (auto& p : params_) {
    if (p.requires_grad() && seen.insert(p.unsafeGetTensorImpl()).second) out.push_back(p);
  }
  return out;
}

void StageWorker::setReaderLeaves(std::vector<char> marked) {
  SLUICE_CHECK(marked.size() == params_.size(), Error,
               "stage " << stage_.index << ": " << marked.size() << " reader marks for " << params_.size()
                        << " parameter entries");
  readerLeaf_ = std::move(marked);
}

std::vector<std::pair<torch::Tensor, torch::Tensor>> StageWorker::readerLeaves() const {
  std::vector<std::pair<torch::Tensor, torch::Tensor>> out;
  for (size_t i = 0; i < readerLeaf_.size() && i < stepParams_.size(); ++i) {
    if (readerLeaf_[i]) out.emplace_back(params_[i], stepParams_[i]);
  }
  return out;
}

int StageWorker::tag(int microBatch, int value, size_t count, bool gradient) const {
  int t = 2 * (microBatch * static_cast<int>(count) + value) + (gradient ? 1 : 0);
  SLUICE_CHECK(t <= Communicator::kMaxTag, CommError,
               "too many micro-batches x boundary values (" << schedule_.microBatches << " x " << count
                                                            << ") for MPI tags; reduce pipeline.microbatches");
  return t;
}

void StageWorker::postReceives(const Action& a) {
  auto& st = state_.at(a.microBatch);
  const size_t nIn = stage_.boundaryInputs.size(), nOut = stage_.outputs.size();
  if (a.kind == ActionKind::RecvActivation && !st.activationsPosted) {
    st.activationsPosted = true;
    for (size_t i = 0; i < nIn; ++i) {
      st.activationRecvs.push_back(
          prevComm_.irecv(specOf(stage_.boundaryInputs[i]), prevRank_, tag(a.microBatch, i, nIn, false)));
    }
  } else if (a.kind == ActionKind::RecvGrad && !st.gradsPosted) {
    st.gradsPosted = true;
    for (size_t i = 0; i < nOut; ++i) {
      if (outputNeedsGrad_[i]) {
        st.gradRecvs.push_back(nextComm_.irecv(specOf(stage_.outputs[i]), nextRank_, tag(a.microBatch, i, nOut, true)));
      }
    }
  }
}

std::vector<torch::Tensor> StageWorker::firstStageInputs(const MicroBatch& data) const {
  // The graph's data inputs: the input, and the targets when the model computes its own loss.
  if (stage_.boundaryInputs.size() == 2) return {data.input, data.target};
  return {data.input};
}

void StageWorker::forward(int mb, InFlight& st, const MicroBatch& data, torch::Tensor& lossSum) {
  if (graphs_) {
    const auto t0 = std::chrono::steady_clock::now();
    graphedForward(mb, st, data, lossSum);
    times_.forwardSeconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ++times_.forwards;
    return;
  }
  const int m = schedule_.microBatches;
  if (isFirst()) st.inputs = firstStageInputs(data);
  std::vector<torch::Tensor> in = st.inputs;
  in.insert(in.end(), stepParams_.begin(), stepParams_.end());
  const auto t0 = std::chrono::steady_clock::now();
  RandomKey key = data.random;
  if (key.microBatch < 0) key.microBatch = mb;
  RandomKeyScope randomScope(key, device_);
  if (memory_) {
    memory_->beginForward(mb, st.inputs);
    {
      memory::SavedTensorScope scope(memory_->hooks());
      st.outputs = module_.forward(in, memory_.get());
    }
    memory_->endForward();
  } else {
    // Saved activations the stage makes: not its inputs (received, or the
    // data), which the plan holds as boundary bytes whether saved or not.
    if (savedBytes_) {
      for (auto& t : st.inputs) savedBytes_->exclude(t);
    }
    {
      std::optional<memory::SavedTensorScope> scope;  // the stage graph's tensors only, not the loss's
      if (savedBytes_) scope.emplace(savedBytes_->factory());
      st.outputs = module_.forward(in);
    }
    if (savedBytes_) {
      for (auto& t : st.inputs) savedBytes_->include(t);
    }
  }
  if (isLast()) {
    st.loss = lossFn_(st.outputs.at(0), data.target) / m;
    auto detached = st.loss.detach();
    lossSum = lossSum.defined() ? lossSum + detached : detached;
    st.outputs.clear();  // the loss's graph holds what its backward needs
  }
  times_.forwardSeconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ++times_.forwards;
}

void StageWorker::evaluateMicroBatch(const MicroBatch& data, int mb, bool classifier, EvalSums& sums) {
  torch::NoGradGuard noGrad;
  const size_t nIn = stage_.boundaryInputs.size();
  CommActivity activity("evaluation, micro-batch " + std::to_string(mb) + ", stage " + std::to_string(stage_.index));
  std::vector<torch::Tensor> in;
  if (isFirst()) {
    in = firstStageInputs(data);
  } else {
    for (size_t i = 0; i < nIn; ++i) {
      in.push_back(fromWire(prevComm_.recv(specOf(stage_.boundaryInputs[i]), prevRank_, static_cast<int>(i)).tensor,
                            stage_.boundaryInputs[i]));
    }
  }
  in.insert(in.end(), params_.begin(), params_.end());
  auto outputs = module_.forward(in);
  if (!isLast()) {
    // Not waited for here: under zbv the next stage may be this rank's own (StageWorker.h).
    reapSends();
    for (size_t i = 0; i < outputs.size(); ++i) sends_.push_back(nextComm_.isend(toWire(outputs[i]), nextRank_, static_cast<int>(i)));
    return;
  }
  const auto& target = data.target;
  const double rows = static_cast<double>(target.size(0));
  sums.loss += hostsync::read<double>(lossFn_(outputs.at(0), target)) * rows;
  if (classifier) sums.correct += hostsync::read<double>(outputs.at(0).argmax(-1).eq(target).sum());
  sums.samples += rows;
}

std::pair<torch::autograd::edge_list, std::vector<torch::Tensor>> StageWorker::backwardRoots(InFlight& st) const {
  torch::autograd::edge_list roots;
  std::vector<torch::Tensor> grads;
  if (isLast()) {
    roots.push_back(torch::autograd::impl::gradient_edge(st.loss));
    grads.push_back(lossScale_ == 1 ? torch::ones_like(st.loss) : torch::full_like(st.loss, lossScale_));
    return {roots, grads};
  }
  for (size_t i = 0; i < st.outputEdges.size(); ++i) {
    if (st.outputEdges[i].is_valid() && st.outputGrads[i].defined()) {
      roots.push_back(st.outputEdges[i]);
      grads.push_back(st.outputGrads[i]);
    }
  }
  return {roots, grads};
}

bool StageWorker::inputHalfReads() const {
  return std::find(inputNeedsGrad_.begin(), inputNeedsGrad_.end(), true) != inputNeedsGrad_.end();
}

bool StageWorker::swaps() const { return memory_ && memory_->swaps(); }

bool StageWorker::readsSwapped(const Action& a) const {
  return swaps() && isBackwardPiece(a) && (a.kind != ActionKind::BackwardInput || inputHalfReads());
}

void StageWorker::prefetch(const Action& a) {
  if (readsSwapped(a)) memory_->prefetch(a.microBatch);
}

void StageWorker::backwardInput(int mb, InFlight& st, bool weightNext) {
  const auto t0 = std::chrono::steady_clock::now();
  if (graphs_) {  // the whole backward; W accumulates (Note [graphed stages])
    graphedBackward(st);
    times_.backwardSeconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return;
  }
  // Without an input that needs a gradient (the first stage), the input half
  // computes nothing and reads no saved tensor: nothing to fetch or give back.
  const bool reads = memory_ && inputHalfReads();
  if (reads) memory_->beginBackward(mb);
  auto [roots, grads] = backwardRoots(st);
  st.split = std::make_unique<BackwardSplit>();
  st.inputGrads = st.split->runInput(roots, grads, st.inputs);
  st.outputEdges.clear();
  st.outputGrads.clear();
  st.loss = torch::Tensor();
  if (reads) memory_->endBackwardInput(mb, weightNext);
  times_.backwardSeconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void StageWorker::backwardWeight(int mb, InFlight& st) {
  const auto t0 = std::chrono::steady_clock::now();
  if (graphs_) {
    graphedWeights(mb, st);
    times_.backwardSeconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ++times_.backwards;
    return;
  }
  if (memory_) memory_->beginBackward(mb);
  st.split->runWeight();
  st.split.reset();
  if (memory_) memory_->endBackward(mb);
  times_.backwardSeconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ++times_.backwards;
}

void StageWorker::backward(int mb, InFlight& st) {
  const auto t0 = std::chrono::steady_clock::now();
  if (graphs_) {
    graphedBackward(st);
    graphedWeights(mb, st);
    times_.backwardSeconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ++times_.backwards;
    return;
  }
  if (memory_) memory_->beginBackward(mb);
  if (isLast()) {
    if (lossScale_ == 1) {
      st.loss.backward();
    } else {
      st.loss.backward(torch::full_like(st.loss, lossScale_));
    }
  } else {
    auto [roots, grads] = backwardRoots(st);
    if (!roots.empty()) {
      torch::autograd::Engine::get_default_engine().execute(roots, grads, /*keep_graph=*/false,
                                                            /*create_graph=*/false, /*accumulate_grad=*/true);
    }
  }
  if (memory_) memory_->endBackward(mb);
  st.outputEdges.clear();
  st.outputGrads.clear();
  st.loss = torch::Tensor();
  times_.backwardSeconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ++times_.backwards;
}

void StageWorker::beginStep(const std::vector<MicroBatch>& microBatches) {
  const int m = schedule_.microBatches;
  SLUICE_CHECK(static_cast<int>(microBatches.size()) == m, Error,
               "stage " << stage_.index << " got " << microBatches.size() << " micro-batches, schedule has " << m);
  state_.clear();
  state_.resize(m);
  microBatches_ = &microBatches;
  lossSum_ = torch::Tensor();
  stepParams_ = params_;
  for (size_t i = 0; i < readerLeaf_.size(); ++i) {
    // Shares the storage and version counter: the update in place is seen, and autograd's checks still hold.
    if (readerLeaf_[i]) stepParams_[i] = params_[i].detach().requires_grad_(params_[i].requires_grad());
  }
}

// Sent tensors are released as soon as their sends complete (Note [bounded buffers]).
void StageWorker::reapSends() {
  sends_.erase(std::remove_if(sends_.begin(), sends_.end(), [](Work& w) { return w.test(); }), sends_.end());
}

// The activations of micro-batch a.microBatch, received into its inputs (requiring grad where the stage
// differentiates them).
void StageWorker::receiveActivations(const Action& a, InFlight& st) {
  const size_t nIn = stage_.boundaryInputs.size();
  postReceives(a);
  for (size_t i = 0; i < nIn; ++i) {
    auto t = fromWire(st.activationRecvs[i].wait().tensor, stage_.boundaryInputs[i]);
    if (inputNeedsGrad_[i]) t.requires_grad_(true);
    st.inputs.push_back(t);
  }
  st.activationRecvs.clear();
}

// Sends the micro-batch's outputs to the next stage, keeping the gradient edges of those it needs gradients for.
void StageWorker::sendActivations(const Action& a, InFlight& st) {
  const size_t nOut = stage_.outputs.size();
  st.outputEdges.assign(nOut, torch::autograd::Edge());
  for (size_t i = 0; i < nOut; ++i) {
    sends_.push_back(nextComm_.isend(toWire(st.outputs[i].detach()), nextRank_, tag(a.microBatch, i, nOut, false),
                                     outputNeedsGrad_[i]));
    if (outputNeedsGrad_[i] && st.outputs[i].requires_grad()) {
      st.outputEdges[i] = torch::autograd::impl::gradient_edge(st.outputs[i]);
    }
  }
  st.outputs.clear();
}

// The gradients of the micro-batch's outputs, received from the next stage (undefined where none is sent).
void StageWorker::receiveGrads(const Action& a, InFlight& st) {
  const size_t nOut = stage_.outputs.size();
  postReceives(a);
  size_t k = 0;
  st.outputGrads.assign(nOut, torch::Tensor());
  for (size_t i = 0; i < nOut; ++i) {
    if (outputNeedsGrad_[i]) st.outputGrads[i] = fromWire(st.gradRecvs[k++].wait().tensor, stage_.outputs[i]);
  }
  st.gradRecvs.clear();
}

// Sends the gradients of the micro-batch's inputs back to the previous stage.
void StageWorker::sendGrads(const Action& a, InFlight& st) {
  const size_t nIn = stage_.boundaryInputs.size();
  for (size_t i = 0; i < nIn; ++i) {
    if (!inputNeedsGrad_[i]) continue;
    // An input no node differentiated through still owes its sender a gradient: zero.
    auto g = st.inputGrads.empty() ? st.inputs[i].grad() : st.inputGrads[i];
    if (!g.defined()) g = torch::zeros_like(st.inputs[i]);
    sends_.push_back(prevComm_.isend(toWire(g), prevRank_, tag(a.microBatch, i, nIn, true)));
  }
  st.inputs.clear();
  st.inputGrads.clear();
}

void StageWorker::execute(const Action& a, bool weightNext) {
  auto& st = state_.at(a.microBatch);
  const bool chunked = schedule_.chunks() > 1;
  CommActivity activity("micro-batch " + std::to_string(a.microBatch) + ", " + toString(a.kind) +
                        (chunked ? ", stage " + std::to_string(stage_.index) : ""));
  const bool traced = trace_ && trace_->active();
  const double startUs = traced ? TraceRecorder::nowUs() : 0;
  switch (a.kind) {
    case ActionKind::RecvActivation:
      receiveActivations(a, st);
      break;
    case ActionKind::Forward:
      if (forwardHook_) forwardHook_(a.microBatch);
      forward(a.microBatch, st, microBatches_->at(a.microBatch), lossSum_);
      break;
    case ActionKind::SendActivation:
      sendActivations(a, st);
      break;
    case ActionKind::RecvGrad:
      receiveGrads(a, st);
      break;
    case ActionKind::Backward:
      backward(a.microBatch, st);
      break;
    case ActionKind::BackwardInput:
      backwardInput(a.microBatch, st, weightNext);
      break;
    case ActionKind::BackwardWeight:
      backwardWeight(a.microBatch, st);
      break;
    case ActionKind::SendGrad:
      sendGrads(a, st);
      break;
  }
  if (traced) {
    const auto [name, stream] = traceNameOf(a, chunked);
    trace_->add(name, stream, a.microBatch, startUs, TraceRecorder::nowUs());
  }
}

torch::Tensor StageWorker::endStep() {
  CommActivity activity("the step's last sends");
  for (auto& w : sends_) w.wait();
  sends_.clear();
  state_.clear();
  microBatches_ = nullptr;
  auto loss = lossSum_;
  lossSum_ = torch::Tensor();
  return loss;
}

torch::Tensor StageWorker::runMicroBatches(const std::vector<MicroBatch>& microBatches) {
  return runStep({this}, microBatches);
}

std::vector<Communicator> boundaryCommunicators(const Communicator& pipeline, const Schedule& schedule) {
  std::vector<Communicator> out;
  if (schedule.chunks() <= 1) return out;
  for (int b = 0; b + 1 < schedule.stages; ++b) out.push_back(pipeline.split(0, pipeline.rank()));
  return out;
}

}  // namespace sluice::pipeline
