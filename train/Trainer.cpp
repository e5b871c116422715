#include "train/Trainer.h"
#include "train/TrainerImpl.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <sstream>

#include "core/Bytes.h"
#include "core/Capture.h"
#include "core/DeviceTrace.h"
#include "core/Files.h"
#include "core/HostSync.h"
#include "core/Log.h"
#include "core/TensorFile.h"
#include "core/Tensors.h"
#include "train/Evaluation.h"
#include "launch/Faults.h"
#include "train/Planning.h"
#include "train/StageAssembly.h"
#include "telemetry/Timeline.h"
#include "core/Device.h"
#include "core/TransferGuard.h"
#include "memory/DeviceMemory.h"
#include "memory/SwapTier.h"
#include "models/TorchScript.h"
#include "optim/TrainingOptimizer.h"
#include "optim/GradClip.h"
#include "optim/OptimizerState.h"
#include "partition/Timing.h"

namespace sluice {
namespace fs = std::filesystem;

namespace {

// Does some stage of this rank carry out a memory plan?
bool hasMemoryPlan(const pipeline::RankWorker& worker) {
  for (size_t i = 0; i < worker.size(); ++i) {
    if (worker.stage(i).memory()) return true;
  }
  return false;
}

// job.backend for this job's GPU tensors; collective over the world (every
// rank learns whether some host runs more ranks than it has GPUs).
CommBackendKind deviceBackendFor(const Config& c, const RankPlace& place, const Communicator& world) {
  auto shared = torch::tensor({place.localSize > cudaDevices() ? int64_t{1} : int64_t{0}});
  world.allReduce(shared, ReduceOp::Max);
  return chooseDeviceBackend(c.job.backend, shared.item<int64_t>() != 0);
}

// The step this rank is in, for the fault-injection hook.
thread_local int64_t currentStep = 0;

}  // namespace

TrainerImpl::TrainerImpl(Config config) : c_(std::move(config)) {}

TrainerImpl::~TrainerImpl() {
  try {
    memory::setDeviceAllocationLimit(device_, 0, "");
  } catch (...) {
  }
}

void TrainerImpl::run() {
  setUp();
  plan();
  buildStage();
  restore();
  train();
  report();
}

namespace {

std::atomic<bool> stopAsked{false};
void onStop(int) { stopAsked = true; }
std::atomic<bool> reportAsked{false};
void onReport(int) { reportAsked = true; }

}  // namespace

void installStopHandlers() {
  // Note [stopping]: mpirun and srun forward SIGUSR1; SIGTERM is their own way
  // to end a job (srun --kill-on-bad-exit sends it when a task dies, and waits
  // KillWait, 30 s by default, before SIGKILL), so it stays fatal under a
  // launcher and asks to stop only in a process started alone. `sluice train`
  // and `sluice launch` turn a SIGTERM they get into SIGUSR1 for the ranks.
  std::signal(SIGUSR1, onStop);
  std::signal(SIGUSR2, onReport);  // print the metrics report and go on
  if (!Communicator::launchedByMpi() && !std::getenv("SLURM_PROCID")) {
    std::signal(SIGTERM, onStop);
    std::signal(SIGINT, onStop);  // Ctrl-C stops like SIGTERM (Note [no orphans], Supervisor.cpp)
  }
}

void TrainerImpl::buildStage() {
  connect();
  openOutputs();
  const auto schedule = jobSchedule(c_, plan_ ? &*plan_ : nullptr, chunks_);
  boundaryComms_ = pipeline::boundaryCommunicators(topology_.pipeline, schedule);
  auto assembled = assembleWorker(c_, {&stages_, &memoryPlans_, &setup_, device_}, topology_.pipeline, schedule,
                                  boundaryComms_);
  worker_ = std::move(assembled.worker);
  sharedSwapEngine_ = assembled.sharedSwapEngine;
  if (c_.training.evalInterval > 0) {
    evaluator_ = std::make_unique<Evaluator>(c_, setup_, *graph_, cuts_, stageIndex_, dpRank_, topology_.pipeline,
                                             topology_.dataParallel, schedule, boundaryComms_);
  }
  if (c_.logging.measureMemory && !hasMemoryPlan(*worker_)) {
    savedBytes_ = std::make_unique<memory::LiveSavedBytes>();
    for (auto& t : setup_.tensorsByName(paramNames_)) savedBytes_->exclude(t);
    worker_->measureSavedBytes(savedBytes_.get());
  }
  logStages();
  optimizer_ = assembleOptimizer(c_, *worker_, topology_.dataParallel);
  if (c_.logging.trace) {
    worker_->setTrace(&trace_);
    optimizer_->setTrace(&trace_);
  }
  const int rank = rank_;
  worker_->setForwardHook([rank](int mb) { faults::atForward(rank, currentStep, mb); });
  freeOtherStagesTensors();
}

// The pipeline and data-parallel communicators (Note [2-D layout]), one per
// set of ranks holding tied parameters, and GPU backends (job.backend).
void TrainerImpl::connect() {
  topology_ = RankTopology(world_, stageIndex_, dpRank_, tiedRanks_,
                           [this](const std::vector<std::string>& names) { return setup_.tensorsByName(names); });
  if (device_.is_cuda()) {
    // GPU tensors between ranks: NCCL (p2p channels on the pipeline, collectives
    // on the data-parallel group) or MPI with host staging (job.backend).
    const auto backend = deviceBackendFor(c_, place_, world_);
    topology_.useDeviceBackend(backend, device_);
    if (rank_ == 0) log::info(std::string("device tensors between ranks over ") + commBackendName(backend));
  }
}

void TrainerImpl::openOutputs() {
  const int stages = c_.pipeline.stages;
  // Outputs only once the job is known to be runnable (bad cuts fail above):
  // rank 0 creates the folder, the others wait for it.
  const fs::path out = c_.job.outputDir;
  outDir_ = out.string();
  if (rank_ == 0) {
    fs::create_directories(out / "logs");
    writeFileAtomically((out / "config.resolved.yaml").string(), c_.toYaml());
  }
  world_.barrier();
  log::openFile((out / "logs" / ("rank_" + std::to_string(rank_) + ".log")).string(), /*append=*/resume_.has_value());
  log::info(describePlace(place_) + ", " + std::to_string(threads_) + " threads; " + torchrunNamesText());
  // (Here, not where the ties are found: the rank's log file is open now.)
  if (rank_ == 0 && !tiedRanks_.empty()) {
    std::string list;
    for (auto& [name, ranks] : tiedRanks_) {
      list += (list.empty() ? "" : "; ") + name + " on pipeline ranks";
      for (int r : ranks) list += " " + std::to_string(r);
    }
    log::info("tied parameters: " + list + " (each holds a copy; gradients summed over them before every update)");
  }
  if (rank_ == 0) {
    log::info("resolved config\n" + c_.toYaml() + settingsTable() + "data: " + setup_.dataset->describe());
    if (plan_) {
      plan_->save((out / "plan.pb").string());
      log::info("plan (" + (out / "plan.pb").string() + ")\n" + plan_->table());
    }
    if (c_.pipeline.microbatches < stages) {
      log::warn("pipeline.microbatches (" + std::to_string(c_.pipeline.microbatches) + ") < pipeline.stages (" +
                std::to_string(stages) + "): most ranks idle most of the step; use at least " +
                std::to_string(stages) + " (ideally 4x) micro-batches");
    }
  }
}

void TrainerImpl::logStages() const {
  for (size_t i = 0; i < stages_.size(); ++i) {
    const auto& stage = stages_[i];
    const auto stageParams = worker_->stage(i).trainableParameters();
    log::info("stage " + std::to_string(stage.index) + ": nodes [" + std::to_string(stage.firstNode) + ", " +
              std::to_string(stage.endNode) + "), " + std::to_string(stageParams.size()) + " parameter tensors (" +
              formatBytes(tensorBytes(stageParams)) + "), " + std::to_string(stage.boundaryInputs.size()) +
              " boundary inputs, " +
              std::to_string(stage.outputs.size()) + " outputs" +
              (stages_.size() > 1 ? " (on pipeline rank " + std::to_string(stageIndex_) + ")" : ""));
  }
}

// Every rank builds the whole model from the seed (identical initial
// weights everywhere); the tensors of other stages are dropped here, so a
// rank holds only its stage.
void TrainerImpl::freeOtherStagesTensors() {
  // By tensor, not by name: a tied weight has several names (head.weight is
  // tok.weight) and the graph reads it under one of them.
  std::set<const c10::TensorImpl*> mine;
  for (auto& t : setup_.tensorsByName(paramNames_)) mine.insert(t.unsafeGetTensorImpl());
  torch::NoGradGuard noGrad;
  for (auto& item : setup_.module->named_parameters(/*recurse=*/true)) {
    if (!mine.count(item.value().unsafeGetTensorImpl())) item.value().set_data(torch::empty({0}, item.value().options()));
  }
  for (auto& item : setup_.module->named_buffers(/*recurse=*/true)) {
    if (!mine.count(item.value().unsafeGetTensorImpl())) item.value().set_data(torch::empty({0}, item.value().options()));
  }
}

void TrainerImpl::train() {
  Communicator::setWaitTimeout(c_.cluster.timeoutS, "cluster.timeout_s");
  optim::LrSchedule lr{c_.optimizer.schedule, c_.optimizer.lr, c_.optimizer.minLr, c_.optimizer.warmupSteps,
                       c_.training.steps};
  StepLoop loop;
  beginTraining();
  // Note [stopping]: the stop requests of step s are all-reduced while step s + 1 runs.
  loop.stopFlags = torch::zeros({1}, torch::kInt64);
  DeviceTrace deviceTrace(device_.is_cuda());  // logging.trace_ops: LibTorch's profiler over the traced steps
  for (int64_t step = startStep_; step < c_.training.steps; ++step) {
    CommActivity activity("step " + std::to_string(step));
    const int64_t syncsBefore = hostsync::count();
    currentStep = step;
    faults::atStepStart(rank_, step);
    if (step == warmSteps_) warm_ = worker_->computeTimes();
    auto t0 = std::chrono::steady_clock::now();
    const double stepLr = lr.at(step);
    optim::setLearningRate(optimizer(), stepLr);
    memory::resetDevicePeak(device_);
    bool skipped = false;
    torch::Tensor gradNorm;  // optimizer.clip_grad_norm: the step's global norm (undefined: skipped or off)
    const bool traced = c_.logging.trace && std::count(tracedSteps_.begin(), tracedSteps_.end(), step) > 0;
    trace_.setStep(step, traced);
    if (traced && c_.logging.traceOps) deviceTrace.start();
    const double stepStart = TraceRecorder::nowUs();
    const double lossScale = lossScaler_ ? lossScaler_->scale() : 0;  // this step's (step() may change it)
    auto loss = this->step(step, &skipped, &gradNorm);
    trace_.add("step " + std::to_string(step), "step", -1, stepStart, TraceRecorder::nowUs());
    if (step >= warmSteps_) stepCompute_.push_back(worker_->computeTimes());
    trace_.setStep(step, false);
    const int64_t peak = memory::deviceAllocatorStats(device_).peakBytes - otherBytes_;
    modelPeak_ = std::max(modelPeak_, peak);
    loop.peaks.push_back(peak);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (deviceTrace.active()) deviceTraceLines_.push_back(describe(deviceTrace.stop(trace_, step)));
    loop.pending.push_back({step, loss, stepLr, seconds, c_.training.globalBatchSize,
                            c_.training.globalBatchSize * setup_.tokensPerSample, skipped, {}, gradNorm, lossScale});
    if (endStep(step, stepLr, seconds, syncsBefore, loop)) break;
  }
  if (loop.stopVote.pending()) loop.stopVote.wait();
  memory::setDeviceAllocationLimit(device_, 0, "");
}

// After step `step` (its learning rate and seconds; syncsBefore: the host
// syncs counted when it began): the stop vote, the buffers synced across
// replicas, the log point and checkpoint when due, the counters, the metrics
// report when asked for, evaluation when due. Returns whether to stop now
// (every rank alike).
bool TrainerImpl::endStep(int64_t step, double stepLr, double seconds, int64_t syncsBefore, StepLoop& loop) {
  bool stop = false;
  if (loop.stopVote.pending()) {
    loop.stopVote.wait();
    stop = loop.stopFlags.item<int64_t>() != 0;
  }
  loop.stopFlags.fill_(stopAsked.load() ? 1 : 0);
  loop.stopVote = world_.iallReduce(loop.stopFlags, ReduceOp::Max);
  const int64_t done = step + 1;
  syncBuffers();
  // With checkpoints on, the last step is always saved too (training can be extended from it).
  const bool checkpoint = stop || (c_.checkpoint.interval > 0 &&
                                   (done % c_.checkpoint.interval == 0 || done == c_.training.steps));
  const bool logPoint = checkpoint || done % c_.logging.interval == 0 || done == c_.training.steps;
  if (logPoint) {
    checkNonFinite();
    flushLogPoint(loop.pending, loop.peaks);  // a checkpoint is also a log point: no step's metrics are lost on resume
    loop.pending.clear();
    loop.peaks.clear();
  }
  if (checkpoint) saveCheckpoint(done, stepLr);
  counters_.add(seconds, hostsync::count() - syncsBefore, logPoint);
  if (reportAsked.exchange(false)) log::info(metricsReport());
  if (evaluator_ && (done % c_.training.evalInterval == 0 || done == c_.training.steps || stop)) {
    const auto r = evaluator_->run();
    if (metrics_ && r.samples > 0) metrics_->recordEval(step, r.loss, r.accuracy, r.samples, r.seconds);
  }
  if (stop) {
    if (rank_ == 0) {
      log::info("stopped on request after step " + std::to_string(done) + "; resume with checkpoint.resume: auto " +
                "(the default)");
    }
    stoppedEarly_ = true;
  }
  return stop;
}

// Before the first step: the steps to time and trace, what lives outside the
// model, memory.hard_limit, and the counters the metrics report starts from.
void TrainerImpl::beginTraining() {
  warmSteps_ = std::min<int64_t>(startStep_ + 2, c_.training.steps - 1);  // compute times count after these
  for (int s : c_.logging.traceSteps) tracedSteps_.push_back(s);
  if (tracedSteps_.empty()) {
    for (int64_t s = warmSteps_; s < std::min<int64_t>(warmSteps_ + 2, c_.training.steps); ++s) tracedSteps_.push_back(s);
  }
  // What lives outside the model now (data, buffers of the runtime): reported
  // apart. DistAdam's gradient buckets and moments, made at its construction,
  // are the model's (the plan's static bytes), as AdamW's are when they appear.
  otherBytes_ = memory::deviceAllocatorStats(device_).currentBytes - tensorBytes(setup_.tensorsByName(paramNames_));
  otherBytes_ -= optimizer_->residentBytes();
  if (c_.memory.hardLimit) {
    const auto budget = static_cast<int64_t>(c_.memory.budgetMb * 1024.0 * 1024.0);
    memory::setDeviceAllocationLimit(device_, budget + otherBytes_, "stage " + std::to_string(stageIndex_));
    log::info("memory.hard_limit: allocations beyond " + formatBytesExact(budget) + " for the model (+ " +
              formatBytes(otherBytes_) + " outside it) fail");
  }
  counters_.trafficAtStart = Communicator::traffic();
  counters_.transfersAtStart = transfers::counts();
  counters_.computeAtStart = worker_->computeTimes().forwardSeconds + worker_->computeTimes().backwardSeconds;
}

Trainer::Trainer(Config config) : impl_(std::make_unique<TrainerImpl>(std::move(config))) {}
Trainer::~Trainer() = default;
Trainer::Trainer(Trainer&&) noexcept = default;
Trainer& Trainer::operator=(Trainer&&) noexcept = default;
void Trainer::setUp() { impl_->setUp(); }
void Trainer::plan() { impl_->plan(); }
void Trainer::buildStage() { impl_->buildStage(); }
void Trainer::restore() { impl_->restore(); }
void Trainer::train() { impl_->train(); }
void Trainer::report() { impl_->report(); }
void Trainer::run() { impl_->run(); }

void runWorker(const Config& config) { Trainer(config).run(); }

}  // namespace sluice
