#include "launcher/Trainer.h"

#include <malloc.h>

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
#include "core/Error.h"
#include "core/Files.h"
#include "core/HostSync.h"
#include "core/Log.h"
#include "core/SystemInfo.h"
#include "core/TensorFile.h"
#include "launcher/Evaluation.h"
#include "launcher/Faults.h"
#include "launcher/Job.h"
#include "launcher/Planning.h"
#include "launcher/Timeline.h"
#include "core/Device.h"
#include "core/TransferGuard.h"
#include "memory/CountingAllocator.h"
#include "memory/DeviceMemory.h"
#include "memory/SwapTier.h"
#include "models/TorchScript.h"
#include "optim/DistAdam.h"
#include "optim/GradClip.h"
#include "optim/OptimizerState.h"
#include "partition/Timing.h"

namespace sluice {
namespace fs = std::filesystem;

namespace {

std::string scaleText(double scale) {  // a loss scale: a power of two, >= 1
  char text[64];
  std::snprintf(text, sizeof text, "%.0f", scale);
  return text;
}

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

// The metrics report's line on host<->device copies per step (Note [round
// trip]): by direction, which of them were Sluice's own (data, staging,
// swap) and how many round trips the guard found.
std::string transferLine(const TransferCounts& start, const TransferCounts& now, double steps, const c10::Device& device) {
  if (!device.is_cuda()) return "host<->device copies: none (job.device: cpu)";
  auto per = [&](int64_t a, int64_t b) { return static_cast<double>(b - a) / steps; };
  char buf[400];
  std::snprintf(buf, sizeof(buf),
                "host<->device copies per step: host->device %.1f (%s), device->host %.1f (%s); of them data %.1f, "
                "communicator staging %.1f, swap %.1f, log reads %.1f; round trips inside steps: %lld",
                per(start.copies[0], now.copies[0]),
                formatBytes(static_cast<int64_t>(per(start.bytes[0], now.bytes[0]))).c_str(),
                per(start.copies[1], now.copies[1]),
                formatBytes(static_cast<int64_t>(per(start.bytes[1], now.bytes[1]))).c_str(),
                per(start.copiesByScope[1], now.copiesByScope[1]), per(start.copiesByScope[2], now.copiesByScope[2]),
                per(start.copiesByScope[3], now.copiesByScope[3]), per(start.copiesByScope[4], now.copiesByScope[4]),
                static_cast<long long>(now.roundTrips - start.roundTrips));
  return buf;
}

// The step this rank is in, for the fault-injection hook.
thread_local int64_t currentStep = 0;

}  // namespace

Trainer::Trainer(Config config) : c_(std::move(config)) {}

Trainer::~Trainer() {
  try {
    memory::setDeviceAllocationLimit(device_, 0, "");
  } catch (...) {
  }
}

void Trainer::run() {
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

void Trainer::setUp() {
  memory::installCountingAllocator();
  Communicator::setWaitTimeout(c_.cluster.initTimeoutS, "cluster.init_timeout_s");
  installStopHandlers();
  // Note [malloc churn]: LibTorch's CPU allocator is plain malloc, and glibc
  // maps every block above 128 KiB freshly (zero-filled page by page) and
  // unmaps it on free. Activations, gradients and swap buffers are exactly
  // such blocks, allocated and freed every micro-batch: keeping them in the
  // heap instead made swapping steps about 20% faster on 2 cores (bench/memory).
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  world_ = Communicator::world();
  rank_ = world_.rank();
  log::setRank(world_.size() > 1 ? rank_ : -1);
  SLUICE_CHECK(world_.size() == c_.worldSize(), ConfigError,
               "config error: the job needs pipeline.stages (" << c_.pipeline.stages << ") x pipeline.data_parallel ("
                   << c_.pipeline.dataParallel << ") = " << c_.worldSize() << " ranks but MPI started "
                   << world_.size());
  place_ = discoverPlace(world_);
  exportTorchrunNames(place_, c_.cluster.masterPort);
  if (place_.nodes > 1) log::setHost(place_.host);
  threads_ = threadsForRank(c_, hardwareCores(), place_.localSize);
  at::set_num_threads(threads_);
  // This rank's device (job.device): the model is built from the seed on the
  // host (the same weights everywhere), then moved there and captured there.
  device_ = rankDevice(c_.job.device, place_.localRank);
  useDevice(device_);
  if (device_.is_cuda()) {
    if (rank_ == 0) log::info("device: " + device_.str() + " (job.device cuda; precision " + c_.training.precision + ")");
    transfers::setMode(c_.logging.transferGuard);
    transfers::installHook();
    // Exact first (the correctness contract): on a GPU some backward kernels add
    // with atomics in any order (embedding's, index_add's); their
    // deterministic variants make runs and layouts comparable bitwise.
    // cuBLAS is deterministic on one stream; the workspace setting keeps it
    // so and silences PyTorch's warning. warn_only: an op without a
    // deterministic kernel still runs, with PyTorch's warning naming it.
    ::setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", /*overwrite=*/0);
    at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/true);
  }
  setup_ = makeModelSetup(c_);
  {
    TransferScope scope(TransferScope::Kind::Setup);
    setup_.toDevice(device_);
    graph_.emplace(setup_.capture(c_.training.microBatchSize));
  }
  // Note [2-D layout]: world rank = dataParallelRank x stages + stage. Each
  // replica's stages are a pipeline communicator (rank == stage); each stage's
  // replicas are a data-parallel communicator for DistAdam.
  stageIndex_ = rank_ % c_.pipeline.stages;
  dpRank_ = rank_ / c_.pipeline.stages;
}

void Trainer::plan() {
  const auto& m = c_.memory;
  cuts_ = c_.pipeline.cuts;
  // A plan decides the split (without cuts) and what is kept; a memory plan
  // is needed for a budget under policy plan, and for full_recompute.
  const bool memoryDecisions = m.policy == "full_recompute" || (m.policy == "plan" && m.budgetMb > 0);
  const bool split = c_.pipeline.stages > 1 && cuts_.empty();  // (cuts are for every stage of every rank)
  // Resuming: the checkpoint is checked now (the same model), before any work.
  if (const auto dir = resumeDirectory(c_); !dir.empty()) {
    CheckpointLayout current;
    current.model = modelFields(c_);
    resume_ = openCheckpoint(dir, current);
    SLUICE_CHECK(resume_->step <= c_.training.steps, ConfigError,
                 "config error: checkpoint " << dir << " is at step " << resume_->step << ", past training.steps ("
                                             << c_.training.steps << "); raise training.steps to train further");
  }
  if (!c_.pipeline.plan.empty() || split || memoryDecisions) {
    plan_ = planOfCheckpoint();
    if (!plan_) plan_ = planForJob(c_, setup_, *graph_, world_, swapDir(c_));
    cuts_ = plan_->cuts();
    // A swap directory that cannot be used fails here on every rank (the plan
    // is the same everywhere), before any output is written.
    bool swaps = false;
    for (auto& d : plan_->decisions) swaps = swaps || d.action == partition::Action::Swap;
    if (swaps) memory::checkSwapDir(swapDir(c_));
  }
  chunks_ = chunksOf(c_, plan_ ? &*plan_ : nullptr);
  auto stages = splitGraph(*graph_, cuts_);
  SLUICE_CHECK(static_cast<int>(stages.size()) == c_.pipeline.stages * chunks_, ConfigError,
               "config error: the split has " << stages.size() << " stages but the job runs pipeline.stages ("
                                              << c_.pipeline.stages << ") x " << chunks_ << " per rank");
  std::set<std::string> named;
  for (size_t s = stageIndex_; s < stages.size(); s += c_.pipeline.stages) {
    stages_.push_back(stages[s]);
    memoryPlans_.push_back(plan_ ? memoryPlanFor(*plan_, static_cast<int>(s), c_) : memory::MemoryPlan{});
    for (auto& name : stages[s].paramInputs) {
      if (named.insert(name).second) paramNames_.push_back(name);
    }
  }
  for (auto& name : paramNames_) {
    if (setup_.tensorsByName({name})[0].requires_grad()) trainableNames_.push_back(name);
  }
  // Note [tied parameters] (Trainer.h): the same on every rank (every rank splits the whole graph).
  std::map<std::string, std::set<int>> holders;
  for (size_t s = 0; s < stages.size(); ++s) {
    for (auto& name : stages[s].paramInputs) holders[name].insert(static_cast<int>(s) % c_.pipeline.stages);
  }
  for (auto& [name, ranks] : holders) {
    if (ranks.size() > 1 && setup_.tensorsByName({name})[0].requires_grad()) {
      tiedRanks_.push_back({name, std::vector<int>(ranks.begin(), ranks.end())});
    }
  }
  // optimizer.clip_grad_norm: each trainable parameter's entry in the job's
  // norm vector (holders: every parameter name, in one order everywhere);
  // a tied copy counts on its first pipeline rank only (Note [bitwise norm], optim/GradClip.h).
  if (c_.optimizer.clipGradNorm > 0) {
    std::map<std::string, int64_t> index;
    for (auto& [name, ranks] : holders) {
      if (setup_.tensorsByName({name})[0].requires_grad()) {
        const int64_t next = static_cast<int64_t>(index.size());
        index[name] = next;
      }
    }
    std::vector<int64_t> globalIndex;
    for (auto& name : trainableNames_) {
      globalIndex.push_back(*holders.at(name).begin() == stageIndex_ ? index.at(name) : -1);
    }
    clip_.emplace(c_.optimizer.clipGradNorm, std::move(globalIndex), static_cast<int64_t>(index.size()));
  }
  if (c_.training.precision == "fp16") lossScaler_.emplace(c_.training.lossScale, c_.training.lossScaleWindow);
  SLUICE_CHECK(tiedRanks_.empty() || c_.optimizer.name != "dist_adam" || c_.optimizer.distAdamMode != "hooks",
               ConfigError,
               "config error: " << tiedRanks_.front().first << " is read by stages on several pipeline ranks (tied "
                                << "weights); its gradient is summed over them before the update, which DistAdam's "
                                << "hooks mode would reduce before: use optimizer.dist_adam.mode after_backward or "
                                << "allreduce, or cuts that keep its readers on one stage");
  // This rank's part of the checkpoint is read (and its checksums checked) now, before any output is written.
  if (resume_) {
    resumeSameLayout_ = resume_->layout == layout();
    restored_ = loadCheckpoint(*resume_, paramNames_, trainableNames_, rank_, resumeSameLayout_);
  }
}

std::optional<partition::Plan> Trainer::planOfCheckpoint() const {
  if (!resume_ || !c_.pipeline.plan.empty() || !c_.pipeline.cuts.empty()) return std::nullopt;
  const auto bytes = checkpointPlanBytes(*resume_);
  if (bytes.empty()) return std::nullopt;
  auto saved = partition::Plan::fromBytes(bytes, resume_->path + "/plan.pb");
  const auto want = planSettings(c_);
  // Same graph, stage count and everything the plan was chosen for; else plan anew.
  const bool same = saved.graphHash == graph_->hash() &&
                    static_cast<int>(saved.stages.size()) == want.stages * want.chunks && saved.chunks == want.chunks &&
                    saved.schedule == want.schedule && saved.microBatches == want.microBatches &&
                    saved.dataParallel == want.dataParallel && saved.budgetBytes == want.budgetBytes &&
                    saved.policy == want.policy;
  if (rank_ == 0) {
    log::info(same ? "plan: the one saved with " + resume_->path + " (same pipeline settings)"
                   : "plan: the pipeline settings differ from " + resume_->path + "'s; planning anew");
  }
  if (!same) return std::nullopt;
  return saved;
}

void Trainer::buildStage() {
  const int stages = c_.pipeline.stages, dp = c_.pipeline.dataParallel;
  pipelineComm_ = world_.split(dpRank_, stageIndex_);
  dpComm_ = world_.split(stageIndex_, dpRank_);
  // Tied parameters: one communicator per set of pipeline ranks holding some (Note [tied parameters]).
  std::map<std::vector<int>, std::vector<std::string>> tiedSets;
  for (auto& [name, ranks] : tiedRanks_) tiedSets[ranks].push_back(name);
  for (auto& [ranks, names] : tiedSets) {
    const bool member = std::find(ranks.begin(), ranks.end(), stageIndex_) != ranks.end();
    auto comm = pipelineComm_.split(member ? 1 : 0, stageIndex_);
    if (member) tied_.push_back({names, setup_.tensorsByName(names), comm});
  }
  if (rank_ == 0 && !tiedRanks_.empty()) {
    std::string list;
    for (auto& [name, ranks] : tiedRanks_) {
      list += (list.empty() ? "" : "; ") + name + " on pipeline ranks";
      for (int r : ranks) list += " " + std::to_string(r);
    }
    log::info("tied parameters: " + list + " (each holds a copy; gradients summed over them before every update)");
  }
  if (device_.is_cuda()) {
    // GPU tensors between ranks: NCCL (p2p channels on the pipeline, collectives
    // on the data-parallel group) or MPI with host staging (job.backend).
    const auto backend = deviceBackendFor(c_, place_, world_);
    pipelineComm_ = pipelineComm_.withDeviceBackend(backend, device_, /*pointToPoint=*/true);
    dpComm_ = dpComm_.withDeviceBackend(backend, device_, /*pointToPoint=*/false);
    if (rank_ == 0) log::info(std::string("device tensors between ranks over ") + commBackendName(backend));
  }
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
  const auto mode = c_.pipeline.execution == "eager" ? ExecMode::Eager : ExecMode::Compiled;
  // With a plan for this schedule, zb-h1 and interleaved-zb are fitted to its
  // stage times, as its prediction was (every rank reads the same plan file).
  const auto scheduleName = scheduleOf(c_, plan_ ? &*plan_ : nullptr);
  std::optional<pipeline::ScheduleCosts> costs;
  if (c_.pipeline.fitSchedule && plan_ && plan_->schedule == scheduleName &&
      plan_->microBatches == c_.pipeline.microbatches) {
    costs = plan_->scheduleCosts();
  }
  const auto schedule = pipeline::makeSchedule(scheduleName, stages, c_.pipeline.microbatches, chunks_,
                                               costs ? &*costs : nullptr);
  boundaryComms_ = pipeline::boundaryCommunicators(pipelineComm_, schedule);
  // Several stages per rank: one swap engine (one window, one I/O thread) for
  // all of them, as the plan's rank peak counts it.
  std::shared_ptr<memory::SwapEngine> rankEngine;
  int swappingStages = 0;
  int64_t window = 0;
  for (auto& mp : memoryPlans_) {
    if (!mp.swaps()) continue;
    ++swappingStages;
    window = std::max(window, mp.swapWindowBytes);
  }
  if (swappingStages > 1) rankEngine = memory::SwapEngine::start(memory::makeSwapTier(device_, swapDir(c_)), window);
  sharedSwapEngine_ = rankEngine != nullptr;
  std::vector<std::unique_ptr<pipeline::StageWorker>> workers;
  for (size_t i = 0; i < stages_.size(); ++i) {
    const auto& stage = stages_[i];
    workers.push_back(std::make_unique<pipeline::StageWorker>(stage, setup_.tensorsByName(stage.paramInputs),
                                                              pipelineComm_, schedule, setup_.loss, mode,
                                                              boundaryComms_, device_));
    if (c_.pipeline.boundaryDtype == "compute") workers.back()->setBoundaryType(setup_.computeType);
    const auto& memoryPlan = memoryPlans_[i];
    if (memoryPlan.freesAnything()) {
      auto& worker = *workers.back();
      worker.setMemoryPlan(memoryPlan, swapDir(c_), rankEngine);
      const auto* mem = worker.memory();
      int swaps = 0, recomputes = 0;
      for (auto& d : memoryPlan.decisions) (d.action == memory::TensorAction::Swap ? swaps : recomputes)++;
      log::info("stage " + std::to_string(stage.index) + " memory plan: " + std::to_string(swaps) +
                " storages swapped" + (swaps ? " to " + mem->swapDescription() : "") + ", " +
                std::to_string(recomputes) + " recomputed");
    }
  }
  worker_ = std::make_unique<pipeline::RankWorker>(std::move(workers));
  if (c_.training.evalInterval > 0) {
    evaluator_ = std::make_unique<Evaluator>(c_, setup_, *graph_, cuts_, stageIndex_, dpRank_, pipelineComm_, dpComm_,
                                             chunks_, boundaryComms_);
  }
  auto params = worker_->trainableParameters();
  if (c_.logging.measureMemory && !hasMemoryPlan(*worker_)) {
    savedBytes_ = std::make_unique<memory::LiveSavedBytes>();
    for (auto& t : setup_.tensorsByName(paramNames_)) savedBytes_->exclude(t);
    worker_->measureSavedBytes(savedBytes_.get());
  }
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

  auto adamw = torch::optim::AdamWOptions(c_.optimizer.lr)
                   .betas({c_.optimizer.beta1, c_.optimizer.beta2})
                   .eps(c_.optimizer.eps)
                   .weight_decay(c_.optimizer.weightDecay);
  if (c_.optimizer.name == "dist_adam") {
    auto dist = std::make_unique<optim::DistAdam>(
        params, dpComm_, adamw, optim::parseDistAdamMode(c_.optimizer.distAdamMode), dp,
        static_cast<int64_t>(c_.optimizer.distAdamBucketMb * 1048576.0));
    dist->setAccumulationSteps(c_.pipeline.microbatches);  // reduce on the last micro-batch's backward
    log::info("DistAdam (" + c_.optimizer.distAdamMode + ") over " + std::to_string(dp) + " ranks, " +
              std::to_string(dist->bucketCount()) + " bucket(s): " + formatBytes(dist->stateBytes()) +
              " of optimizer state on this rank (" + std::to_string(dist->stateBytes()) + " bytes)");
    optimizer_ = std::move(dist);
  } else {
    optimizer_ = std::make_unique<torch::optim::AdamW>(params, adamw);
  }
  if (c_.logging.trace) {
    worker_->setTrace(&trace_);
    if (auto* dist = dynamic_cast<optim::DistAdam*>(optimizer_.get())) dist->setTrace(&trace_);
  }
  const int rank = rank_;
  worker_->setForwardHook([rank](int mb) { faults::atForward(rank, currentStep, mb); });
  freeOtherStagesTensors();
}

CheckpointLayout Trainer::layout() const {
  CheckpointLayout l;
  l.stages = c_.pipeline.stages;
  l.dataParallel = c_.pipeline.dataParallel;
  l.cuts = cuts_;
  l.graphHash = graph_->hash();
  l.model = modelFields(c_);
  return l;
}

void Trainer::restore() {
  TransferScope scope(TransferScope::Kind::Setup);
  const std::string dir = resume_ ? resume_->path : "";
  const fs::path out = c_.job.outputDir;
  if (resume_) {
    const auto& manifest = *resume_;
    const auto& state = *restored_;
    {
      torch::NoGradGuard noGrad;
      auto tensors = setup_.tensorsByName(paramNames_);
      for (size_t i = 0; i < tensors.size(); ++i) {
        const auto& saved = state.tensors.at(paramNames_[i]);
        SLUICE_CHECK(saved.sizes() == tensors[i].sizes(), CheckpointError,
                     "checkpoint " << dir << ": " << paramNames_[i] << " has shape " << saved.sizes()
                                   << ", the model " << tensors[i].sizes() << ": it was made for another model");
        tensors[i].copy_(saved);
      }
    }
    std::vector<optim::AdamState> adam;
    for (auto& name : trainableNames_) {
      auto it = state.adam.find(name);
      adam.push_back(it == state.adam.end() ? optim::AdamState{} : it->second);
    }
    optim::setAdamState(*optimizer_, worker_->trainableParameters(), adam);
    if (state.rng.defined()) {
      auto gen = at::detail::getDefaultCPUGenerator();
      std::lock_guard<std::mutex> lock(gen.mutex());
      gen.set_state(state.rng);
    }
    if (lossScaler_ && manifest.lossScale > 0) lossScaler_->restore(manifest.lossScale, manifest.lossScaleGoodSteps);
    if (lossScaler_ && rank_ == 0) {
      log::info(std::string("loss scale: ") +
                (manifest.lossScale > 0 ? "the checkpoint's, " : "the checkpoint has none (not fp16), training.loss_scale: ") +
                scaleText(lossScaler_->scale()));
    }
    restored_.reset();
    startStep_ = manifest.step;
    if (rank_ == 0) {
      log::info("resumed from " + dir + " at step " + std::to_string(startStep_) +
                (resumeSameLayout_ ? " (same layout: exact)"
                                   : " (another layout: stages " + std::to_string(manifest.layout.stages) +
                                         " x data_parallel " + std::to_string(manifest.layout.dataParallel) +
                                         " before)"));
    }
  }
  if (resume_ && startStep_ == c_.training.steps && rank_ == 0) {
    log::warn("checkpoint " + dir + " is at training.steps (" + std::to_string(startStep_) +
              "): nothing left to train; raise training.steps, or start fresh with checkpoint.resume: none");
  }
  if (worker_->isLast() && dpRank_ == 0) {
    metrics_ = std::make_unique<MetricsWriter>((out / "metrics.jsonl").string(), c_.training.steps,
                                               dir.empty() ? -1 : startStep_);
    if (c_.logging.tensorboard) {
      auto tb = std::make_unique<TensorBoardWriter>((out / "tb").string());
      log::info("tensorboard: " + tb->path() + " (tensorboard --logdir " + (out / "tb").string() + ")");
      metrics_->setTensorBoard(std::move(tb));
    }
  }
}

std::map<std::string, torch::Tensor> Trainer::stageTensors() const {
  std::map<std::string, torch::Tensor> named;
  auto tensors = setup_.tensorsByName(paramNames_);
  for (size_t i = 0; i < tensors.size(); ++i) named[paramNames_[i]] = tensors[i];
  return named;
}

// Note [model.pt]: a TorchScript model's trained weights go back into the
// user's module: each stage's first replica writes its parameters and buffers
// (by module path) to a part file in output_dir, rank 0 puts them into the
// module loaded from model.path and saves output_dir/model.pt atomically.
void Trainer::exportModel() {
  if (c_.model.name != "torchscript") return;
  CommActivity activity("writing model.pt");
  const fs::path dir(outDir_);
  auto part = [&](int stage) { return (dir / ("model.stage_" + std::to_string(stage) + ".part")).string(); };
  if (dpRank_ == 0) writeFileAtomically(part(stageIndex_), encodeTensors(stageTensors()));
  world_.barrier();
  if (rank_ == 0) {
    std::map<std::string, torch::Tensor> all;
    for (int s = 0; s < c_.pipeline.stages; ++s) {
      auto tensors = decodeTensors(readFile(part(s)), part(s));
      all.insert(tensors.begin(), tensors.end());
      fs::remove(part(s));
    }
    models::exportModule(c_.model.path, all, (dir / "model.pt").string());
    log::info("model: " + (dir / "model.pt").string() + " (the TorchScript module with the trained weights; "
              "torch.jit.load reads it)");
  }
  world_.barrier();
}

std::string Trainer::saveCheckpoint(int64_t stepsDone, double lr) {
  CommActivity activity("checkpoint of step " + std::to_string(stepsDone));
  TransferScope scope(TransferScope::Kind::Setup);
  RankState state;
  // Full Adam state: collective over the data-parallel group (DistAdam gathers its shards).
  auto adam = optim::adamState(*optimizer_, worker_->trainableParameters());
  if (dpRank_ == 0) {
    state.tensors = stageTensors();
    for (size_t i = 0; i < trainableNames_.size(); ++i) state.adam[trainableNames_[i]] = adam[i];
    // A tied weight is stored once, by its first holder (Note [tied parameters]:
    // the copies are bitwise equal); loading finds it by name in any rank's file.
    for (auto& [name, ranks] : tiedRanks_) {
      if (ranks.front() == stageIndex_) continue;
      state.tensors.erase(name);
      state.adam.erase(name);
    }
  }
  {
    auto gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    state.rng = gen.get_state();
  }
  CheckpointInfo info;
  info.step = stepsDone;
  info.lr = lr;
  info.samplesSeen = stepsDone * c_.training.globalBatchSize;
  if (plan_) info.planBytes = plan_->toBytes();
  if (lossScaler_) {
    info.lossScale = lossScaler_->scale();
    info.lossScaleGoodSteps = lossScaler_->goodSteps();
  }
  const auto path = sluice::saveCheckpoint(c_.checkpointDir(), info, layout(), state, stageIndex_, world_,
                                           c_.checkpoint.keepLatestK);
  if (rank_ == 0) log::info("checkpoint: " + path + " (step " + std::to_string(stepsDone) + ")");
  if (stepsDone < c_.training.steps) exportModel();  // the last step's is written at the end
  return path;
}

torch::Tensor Trainer::step(int64_t step, bool* skipped, torch::Tensor* gradNorm) {
  *skipped = false;
  transfers::beginStep();  // Note [round trip] (core/TransferGuard.h): the forwards and backwards
  auto micro = microBatchesFor(step);
  optim::zeroGradients(*optimizer_);
  if (lossScaler_) worker_->setLossScale(lossScaler_->scale());
  auto loss = worker_->runMicroBatches(micro);
  transfers::endStep();  // under logging.transfer_guard: error, throws before any update
  sumTiedGradients();
  if (faults::nanAt(rank_, step)) {
    torch::NoGradGuard noGrad;
    for (auto& p : worker_->trainableParameters()) p.mutable_grad().fill_(NAN);
  }
  // training.nan_policy: a non-finite gradient on this rank ends the job
  // (abort) or, all-reduced so every rank decides alike, drops the step (skip).
  // Note [lazy nan check]: under abort the per-parameter flags are computed
  // now but read at the next log point (checkNonFinite), so steps between log
  // points read nothing on the host; under skip the decision must precede the
  // update, so skip reads one flag per step.
  // Per parameter, whether its gradient's sum is finite: a NaN or inf element
  // makes the sum NaN or inf (an overflowing sum of finite values, far beyond
  // any gradient, would only report a false alarm). One read of each gradient,
  // on the critical path between backward and the update: isfinite().all()
  // also wrote and re-read a bool per element (2.6-3 ms per step on the
  // quickstart's stages, a trace showed).
  const auto& params = worker_->trainableParameters();
  std::vector<torch::Tensor> finite;
  for (const auto& p : params) {
    finite.push_back(p.grad().defined() ? torch::isfinite(p.grad().sum())
                                        : torch::ones({}, torch::TensorOptions().dtype(torch::kBool).device(device_)));
  }
  auto flags = finite.empty() ? torch::ones({1}, torch::kBool) : torch::stack(finite);
  auto skip = [&](const std::string& why) {
    *skipped = true;
    optim::zeroGradients(*optimizer_);  // DistAdam: also finishes its abandoned reductions
    if (rank_ == 0) log::warn("step " + std::to_string(step) + ": " + why);
    return loss;
  };
  if (c_.training.nanPolicy == "abort" && !lossScaler_) {
    nanChecks_.push_back({step, flags});
  } else {
    auto flag = flags.logical_not().any().to(torch::kInt64).reshape({1});
    world_.allReduce(flag, ReduceOp::Max);
    const bool nonFinite = hostsync::read<int64_t>(flag) != 0;
    if (lossScaler_) {
      // Note [fp16 loss scaling] (optim/LossScaler.h): every rank read the
      // same flag, so every rank takes the same branch.
      const double used = lossScaler_->scale();
      switch (lossScaler_->update(nonFinite)) {
        case optim::LossScaler::Outcome::BackOff:
          return skip("gradients overflowed at loss scale " + scaleText(used) + ", update skipped; loss scale now " +
                      scaleText(lossScaler_->scale()));
        case optim::LossScaler::Outcome::NonFinite:
          if (c_.training.nanPolicy == "skip") {
            return skip("non-finite gradients at loss scale 1, update skipped (training.nan_policy skip)");
          }
          throw Error("step " + std::to_string(step) + ": gradients are not finite (NaN or inf) even at loss scale 1, " +
                      "so lowering the scale cannot help (a non-finite forward, or float16's range exceeded: try " +
                      "bf16); training.nan_policy: skip drops such steps instead of stopping");
        case optim::LossScaler::Outcome::Apply:
          if (used != 1) optim::scaleGradients(*optimizer_, params, torch::scalar_tensor(1 / used, torch::kFloat).to(device_));
          break;
      }
    } else if (nonFinite) {
      return skip("non-finite gradients, update skipped (training.nan_policy skip)");
    }
  }
  const double optimizerStart = TraceRecorder::nowUs();
  if (clip_) *gradNorm = clip_->apply(*optimizer_, params, {&dpComm_, &pipelineComm_});
  optimizer_->step();
  trace_.add("optimizer", "compute", -1, optimizerStart, TraceRecorder::nowUs());
  return loss;
}

void Trainer::sumTiedGradients() {
  for (auto& group : tied_) {
    for (auto& p : group.params) {
      if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);  // this rank's readers gave it none
      group.comm.allReduce(p.mutable_grad(), ReduceOp::Sum);
    }
  }
}

void Trainer::checkNonFinite() {
  TransferScope scope(TransferScope::Kind::LogRead);
  for (auto& [step, flags] : nanChecks_) {
    if (hostsync::read<bool>(flags.all())) continue;
    const auto f = flags.contiguous();
    std::string badParam;
    for (int64_t i = 0; i < f.numel() && badParam.empty(); ++i) {
      if (!f[i].item<bool>()) badParam = trainableNames_.at(static_cast<size_t>(i));
    }
    throw Error("step " + std::to_string(step) + ": the gradient of " + badParam + " is not finite (NaN or inf); " +
                "training.nan_policy: skip drops such steps instead of stopping");
  }
  nanChecks_.clear();
}

// Every rank builds the whole model from the seed (identical initial
// weights everywhere); the tensors of other stages are dropped here, so a
// rank holds only its stage.
void Trainer::freeOtherStagesTensors() {
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

std::vector<pipeline::MicroBatch> Trainer::microBatchesFor(int64_t step) const {
  // Each data-parallel rank trains on its own disjoint rows of the global batch.
  const int dp = c_.pipeline.dataParallel, m = c_.pipeline.microbatches;
  const int64_t mbs = c_.training.microBatchSize;
  auto global = setup_.dataset->batch(step, c_.training.globalBatchSize);
  const int64_t rows = c_.training.globalBatchSize / dp;
  data::Batch batch{global.input.slice(0, dpRank_ * rows, (dpRank_ + 1) * rows),
                    global.target.slice(0, dpRank_ * rows, (dpRank_ + 1) * rows)};
  std::vector<pipeline::MicroBatch> micro;
  for (int i = 0; i < m; ++i) {
    // Its rows are the global batch's micro-batch dpRank * m + i, whatever
    // the layout: so is its random key (Note [random streams]).
    const RandomKey key{static_cast<uint64_t>(c_.job.seed), step, static_cast<int64_t>(dpRank_) * m + i};
    micro.push_back({batch.input.slice(0, i * mbs, (i + 1) * mbs), batch.target.slice(0, i * mbs, (i + 1) * mbs), key});
  }
  // On a GPU each micro-batch goes over once, from pinned memory, without the
  // host waiting (the copy is ordered on the compute stream before its forward).
  if (device_.is_cuda()) {
    TransferScope scope(TransferScope::Kind::Data);
    for (auto& mb : micro) {
      mb.input = mb.input.contiguous().pin_memory().to(device_, /*non_blocking=*/true);
      mb.target = mb.target.contiguous().pin_memory().to(device_, /*non_blocking=*/true);
    }
  }
  return micro;
}

// Note [lazy loss]: losses and memory peaks are read here only, every
// logging.interval steps. The global loss is the mean of the replicas' losses
// (equal shares of the global batch); a stage's peak is the max over replicas.
void Trainer::flushLogPoint(std::vector<StepRecord>& pending, const std::vector<int64_t>& peaks) {
  TransferScope scope(TransferScope::Kind::LogRead);
  log::checkFile();  // a log cut short by a full disk stops the job (with the reason)
  const int stages = c_.pipeline.stages, dp = c_.pipeline.dataParallel;
  auto mine = torch::tensor(peaks, torch::kInt64);
  auto all = torch::zeros({world_.size() * static_cast<int64_t>(peaks.size())}, torch::kInt64);
  world_.allGather(mine, all);
  if (!worker_->isLast()) return;
  std::vector<torch::Tensor> losses;
  for (auto& r : pending) losses.push_back(r.loss);
  auto stacked = torch::stack(losses).contiguous();
  if (dp > 1) dpComm_.allReduce(stacked, ReduceOp::Average);
  auto perRank = all.view({world_.size(), static_cast<int64_t>(peaks.size())});
  for (size_t i = 0; i < pending.size(); ++i) {
    pending[i].loss = stacked[i];
    pending[i].stagePeakBytes.assign(stages, 0);
    for (int r = 0; r < world_.size(); ++r) {
      auto& slot = pending[i].stagePeakBytes[r % stages];
      slot = std::max(slot, perRank[r][static_cast<int64_t>(i)].item<int64_t>());
    }
  }
  if (metrics_) {
    for (auto& r : pending) metrics_->record(r);
    metrics_->flush();
  }
}

// Note [BatchNorm across stages and replicas] (Evaluation.h): the buffers
// forward updates (read by aten::batch_norm or written by aten::add_, e.g.
// running_mean, running_var, num_batches_tracked) go from the first replica
// to the others after every step.
void Trainer::syncBuffers() {
  if (c_.pipeline.dataParallel < 2) return;
  if (!syncedBuffers_) {
    syncedBuffers_.emplace();
    std::set<std::string> names;
    for (const auto& node : graph_->nodes()) {
      if (node.op != "aten::batch_norm" && node.op != "aten::add_") continue;
      for (const auto& p : node.params) names.insert(p);
    }
    for (const auto& in : graph_->inputs()) {
      if (in.kind != InputKind::Buffer || !names.count(in.name)) continue;
      if (std::find(paramNames_.begin(), paramNames_.end(), in.name) == paramNames_.end()) continue;
      syncedBuffers_->push_back(setup_.tensorsByName({in.name})[0]);
    }
  }
  torch::NoGradGuard noGrad;
  for (auto& b : *syncedBuffers_) dpComm_.broadcast(b, 0);
}

void Trainer::train() {
  Communicator::setWaitTimeout(c_.cluster.timeoutS, "cluster.timeout_s");
  optim::LrSchedule lr{c_.optimizer.schedule, c_.optimizer.lr, c_.optimizer.minLr, c_.optimizer.warmupSteps,
                       c_.training.steps};
  std::vector<StepRecord> pending;  // steps whose loss is not read yet
  std::vector<int64_t> peaks;       // this rank's per-step peaks, same steps
  warmSteps_ = std::min<int64_t>(startStep_ + 2, c_.training.steps - 1);  // compute times count after these
  for (int s : c_.logging.traceSteps) tracedSteps_.push_back(s);
  if (tracedSteps_.empty()) {
    for (int64_t s = warmSteps_; s < std::min<int64_t>(warmSteps_ + 2, c_.training.steps); ++s) tracedSteps_.push_back(s);
  }
  // What lives outside the model now (data, buffers of the runtime): reported
  // apart. DistAdam's gradient buckets and moments, made at its construction,
  // are the model's (the plan's static bytes), as AdamW's are when they appear.
  otherBytes_ = memory::deviceAllocatorStats(device_).currentBytes - tensorBytes(setup_.tensorsByName(paramNames_));
  if (auto* dist = dynamic_cast<optim::DistAdam*>(optimizer_.get())) otherBytes_ -= dist->residentBytes();
  if (c_.memory.hardLimit) {
    const auto budget = static_cast<int64_t>(c_.memory.budgetMb * 1024.0 * 1024.0);
    memory::setDeviceAllocationLimit(device_, budget + otherBytes_, "stage " + std::to_string(stageIndex_));
    log::info("memory.hard_limit: allocations beyond " + formatBytesExact(budget) + " for the model (+ " +
              formatBytes(otherBytes_) + " outside it) fail");
  }
  // Note [stopping]: the stop requests of step s are all-reduced while step s + 1 runs.
  auto stopFlags = torch::zeros({1}, torch::kInt64);
  Work stopVote;
  counters_.trafficAtStart = Communicator::traffic();
  counters_.transfersAtStart = transfers::counts();
  counters_.computeAtStart = worker_->computeTimes().forwardSeconds + worker_->computeTimes().backwardSeconds;
  for (int64_t step = startStep_; step < c_.training.steps; ++step) {
    CommActivity activity("step " + std::to_string(step));
    const int64_t syncsBefore = hostsync::count();
    currentStep = step;
    faults::atStepStart(rank_, step);
    if (step == warmSteps_) warm_ = worker_->computeTimes();
    auto t0 = std::chrono::steady_clock::now();
    const double stepLr = lr.at(step);
    optim::setLearningRate(*optimizer_, stepLr);
    memory::resetDevicePeak(device_);
    bool skipped = false;
    torch::Tensor gradNorm;  // optimizer.clip_grad_norm: the step's global norm (undefined: skipped or off)
    const bool traced = c_.logging.trace && std::count(tracedSteps_.begin(), tracedSteps_.end(), step) > 0;
    trace_.setStep(step, traced);
    const double stepStart = TraceRecorder::nowUs();
    const double lossScale = lossScaler_ ? lossScaler_->scale() : 0;  // this step's (step() may change it)
    auto loss = this->step(step, &skipped, &gradNorm);
    trace_.add("step " + std::to_string(step), "step", -1, stepStart, TraceRecorder::nowUs());
    if (step >= warmSteps_) stepCompute_.push_back(worker_->computeTimes());
    trace_.setStep(step, false);
    const int64_t peak = memory::deviceAllocatorStats(device_).peakBytes - otherBytes_;
    modelPeak_ = std::max(modelPeak_, peak);
    peaks.push_back(peak);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    pending.push_back({step, loss, stepLr, seconds, c_.training.globalBatchSize,
                       c_.training.globalBatchSize * setup_.tokensPerSample, skipped, {}, gradNorm, lossScale});
    bool stop = false;
    if (stopVote.pending()) {
      stopVote.wait();
      stop = stopFlags.item<int64_t>() != 0;
    }
    stopFlags.fill_(stopAsked.load() ? 1 : 0);
    stopVote = world_.iallReduce(stopFlags, ReduceOp::Max);
    const int64_t done = step + 1;
    syncBuffers();
    // With checkpoints on, the last step is always saved too (training can be extended from it).
    const bool checkpoint = stop || (c_.checkpoint.interval > 0 &&
                                     (done % c_.checkpoint.interval == 0 || done == c_.training.steps));
    const bool logPoint = checkpoint || done % c_.logging.interval == 0 || done == c_.training.steps;
    if (logPoint) {
      checkNonFinite();
      flushLogPoint(pending, peaks);  // a checkpoint is also a log point: no step's metrics are lost on resume
      pending.clear();
      peaks.clear();
    }
    if (checkpoint) saveCheckpoint(done, stepLr);
    const int64_t syncs = hostsync::count() - syncsBefore;
    ++counters_.steps;
    counters_.seconds += seconds;
    if (logPoint) {
      ++counters_.logSteps;
      counters_.syncsLog += syncs;
    } else {
      counters_.syncsNonLog += syncs;
      counters_.maxSyncsNonLog = std::max(counters_.maxSyncsNonLog, syncs);
    }
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
      break;
    }
  }
  if (stopVote.pending()) stopVote.wait();
  memory::setDeviceAllocationLimit(device_, 0, "");
}

std::string Trainer::metricsReport() const {
  const auto& c = counters_;
  const auto sm = worker_->metrics();
  const auto ct = worker_->computeTimes();
  const auto traffic = Communicator::traffic();
  const double n = std::max<int64_t>(1, c.steps);
  const double compute = (ct.forwardSeconds + ct.backwardSeconds - c.computeAtStart) / n * 1e3;
  const double wait = (traffic.waitSeconds - c.trafficAtStart.waitSeconds) / n * 1e3;
  const double step = c.seconds / n * 1e3;
  const int64_t nonLog = c.steps - c.logSteps;
  char buf[600];
  std::snprintf(buf, sizeof(buf),
                "metrics report (stage %d, replica %d; %lld steps)\n"
                "  compiles %lld, cache hits %lld, recompiles %zu\n"
                "  per step: %.2f ms = compute %.2f ms (forwards and backwards) + waiting on communication %.2f ms + "
                "other host work %.2f ms\n"
                "  traffic per step: sent %s, received %s (point to point), collectives %s\n"
                "  host syncs (reads of training tensors) per step: %.2f on %lld non-log steps (at most %lld), %.2f on "
                "%lld log steps",
                stageIndex_, dpRank_, static_cast<long long>(c.steps), static_cast<long long>(sm.compiles),
                static_cast<long long>(sm.cacheHits), sm.recompileCauses.size(), step, compute, wait,
                std::max(0.0, step - compute - wait),
                formatBytes(static_cast<int64_t>((traffic.sentBytes - c.trafficAtStart.sentBytes) / n)).c_str(),
                formatBytes(static_cast<int64_t>((traffic.receivedBytes - c.trafficAtStart.receivedBytes) / n)).c_str(),
                formatBytes(static_cast<int64_t>((traffic.collectiveBytes - c.trafficAtStart.collectiveBytes) / n)).c_str(),
                nonLog > 0 ? static_cast<double>(c.syncsNonLog) / nonLog : 0.0, static_cast<long long>(nonLog),
                static_cast<long long>(c.maxSyncsNonLog),
                c.logSteps > 0 ? static_cast<double>(c.syncsLog) / c.logSteps : 0.0, static_cast<long long>(c.logSteps));
  std::string out = buf;
  out += "\n  " + transferLine(c.transfersAtStart, transfers::counts(), n, device_);
  for (auto& cause : sm.recompileCauses) out += "\n  recompiled: " + cause;
  return out;
}

void Trainer::report() {
  log::info(metricsReport());
  if (c_.logging.trace) {
    std::string steps;
    for (auto s : tracedSteps_) steps += (steps.empty() ? "" : ", ") + std::to_string(s);
    // On a GPU the process names its device; its events are the host's view
    // (when work was enqueued and waited for), not the kernels' own times.
    const auto timeline = writeTimeline(
        world_, trace_,
        "stage " + std::to_string(stageIndex_) + " / replica " + std::to_string(dpRank_) +
            (device_.is_cuda() ? " (" + device_.str() + ")" : ""),
        outDir_, stageIndex_, c_.pipeline.stages, plan_ ? &*plan_ : nullptr);
    if (rank_ == 0) {
      log::info("trace: " + timeline.path + " (steps " + steps + "; open it in ui.perfetto.dev or chrome://tracing)");
      log::info(timeline.summary);
    }
  }
  // Per pipeline rank: with interleaved stages, the sums over the rank's stages.
  const auto sm = worker_->metrics();
  char buf[600];
  std::snprintf(buf, sizeof(buf), "stage %d %s: %lld compiles, %lld cache hits, compile %.3f s, execute %.3f s",
                stageIndex_, c_.pipeline.execution.c_str(), static_cast<long long>(sm.compiles),
                static_cast<long long>(sm.cacheHits), sm.compileSeconds, sm.executeSeconds);
  log::info(buf);
  // Micro-batches timed: each went through every stage of the rank. Per
  // micro-batch: the median over timed steps of the step's compute over its
  // micro-batches (stepCompute_).
  const int64_t stepsTimed = static_cast<int64_t>(stepCompute_.size());
  std::vector<double> fwd, bwd, both;
  int64_t mbsTimed = 0;
  for (int64_t k = 0; k < stepsTimed; ++k) {
    const auto& before = k == 0 ? warm_ : stepCompute_[k - 1];
    const auto& after = stepCompute_[k];
    const int64_t mbs = (after.forwards - before.forwards) / static_cast<int64_t>(stages_.size());
    if (mbs <= 0) continue;
    mbsTimed += mbs;
    fwd.push_back((after.forwardSeconds - before.forwardSeconds) / mbs);
    bwd.push_back((after.backwardSeconds - before.backwardSeconds) / mbs);
    both.push_back(fwd.back() + bwd.back());
  }
  const double measuredCompute = partition::median(both);
  std::snprintf(buf, sizeof(buf),
                "stage %d compute per micro-batch: %.3f ms (forward %.3f ms, backward %.3f ms; medians over %lld steps, "
                "%lld micro-batches, after %lld warm-up steps)",
                stageIndex_, 1e3 * measuredCompute, 1e3 * partition::median(fwd), 1e3 * partition::median(bwd),
                static_cast<long long>(fwd.size()), static_cast<long long>(mbsTimed),
                static_cast<long long>(warmSteps_));
  log::info(buf);
  int64_t predicted = 0, window = 0;  // window: the swap window the prediction counts whole (one per rank)
  double predictedCompute = 0;  // seconds per micro-batch, the rank's stages
  if (plan_) {
    partition::PlanStage ps;  // this rank's stages together
    int64_t savedPeak = 0;
    for (auto& mine : stages_) {
      const auto& one = plan_->stages.at(mine.index);
      ps.forward += one.forward;
      ps.backward += one.backward;
      ps.loss += one.loss;
      ps.recompute += one.recompute;
      ps.swap += one.swap;
      ps.refill += one.refill;
      ps.inFlight = std::max(ps.inFlight, one.inFlight);
      window = std::max(window, one.windowBytes);
      ps.keptBytes += one.keptBytes;
      // Several stages per rank: the plan's rank peak (their holdings peak at different moments).
      predicted = one.rankPeakBytes > 0 ? one.rankPeakBytes : predicted + one.peakBytes;
      savedPeak += one.inFlight * one.keptBytes;
      predictedCompute += one.forward + one.backward + one.loss + one.recompute + one.swap + one.refill;
    }
    std::snprintf(buf, sizeof(buf),
                  "stage %d plan predicts: compute per micro-batch %.3f ms (forward %.3f, backward %.3f, loss %.3f, "
                  "recompute %.3f, swap stall %.3f, refill after waits %.3f), saved activations peak %lld bytes (%d "
                  "in flight x %lld kept)",
                  stageIndex_, 1e3 * predictedCompute, 1e3 * ps.forward, 1e3 * ps.backward, 1e3 * ps.loss,
                  1e3 * ps.recompute, 1e3 * ps.swap, 1e3 * ps.refill,
                  static_cast<long long>(savedPeak), ps.inFlight, static_cast<long long>(ps.keptBytes));
    log::info(buf);
  }
  if (savedBytes_) {
    log::info("stage " + std::to_string(stageIndex_) + " saved activations: peak " +
              std::to_string(savedBytes_->peakBytes()) + " bytes (" + formatBytes(savedBytes_->peakBytes()) +
              "; its inputs not counted: the plan holds them as boundary bytes)");
  }
  const int64_t resident = memory::residentPeakBytes();
  // Machine-readable on purpose: tests and bench/memory read this line.
  std::snprintf(buf, sizeof(buf),
                "memory: stage %d measured_peak_bytes=%lld predicted_peak_bytes=%lld outside_model_bytes=%lld "
                "resident_peak_bytes=%lld swap_window_bytes=%lld",
                stageIndex_, static_cast<long long>(modelPeak_), static_cast<long long>(predicted),
                static_cast<long long>(otherBytes_), static_cast<long long>(resident), static_cast<long long>(window));
  log::info(buf);
  for (size_t i = 0; i < worker_->size(); ++i) {
    const auto* mem = worker_->stage(i).memory();
    if (!mem) continue;
    const auto s = mem->stats();
    std::snprintf(buf, sizeof(buf),
                  "stage %d memory plan: swapped %s (%s%lld writes, %lld reads, %lld not prefetched in time, %lld "
                  "given back between Bi and W), swap stall %.3f s; recomputed %s in %lld re-runs, %.3f s",
                  worker_->stage(i).stage().index, formatBytes(s.swappedBytes).c_str(),
                  sharedSwapEngine_ ? "the rank's swap engine: " : "",
                  static_cast<long long>(s.swap.writes), static_cast<long long>(s.swap.reads),
                  static_cast<long long>(s.swap.demandReads), static_cast<long long>(s.swap.evictions),
                  s.swap.stallSeconds, formatBytes(s.recomputedBytes).c_str(), static_cast<long long>(s.recomputes),
                  s.recomputeSeconds);
    log::info(buf);
  }
  // Rank 0: the per-stage tables, predicted next to measured (compute in us).
  constexpr int kColumns = 6;
  auto mine = torch::tensor({static_cast<int64_t>(stageIndex_), modelPeak_, predicted, resident,
                             static_cast<int64_t>(std::llround(1e6 * measuredCompute)),
                             static_cast<int64_t>(std::llround(1e6 * predictedCompute))},
                            torch::kInt64);
  auto all = torch::zeros({kColumns * world_.size()}, torch::kInt64);
  world_.allGather(mine, all);
  auto percentOff = [](double meas, double pred) {
    return pred > 0 ? std::to_string(static_cast<int>(std::lround(100.0 * (meas - pred) / pred))) + "%"
                    : std::string("-");
  };
  if (rank_ == 0 && plan_) {
    // What the cost model's stage times are checked against (issue: within 10%).
    std::ostringstream os;
    os << "compute per micro-batch per rank (forward + backward + loss, median over the steps after " << warmSteps_
       << " warm-up steps; predicted: the plan's cost model, with recompute, swap stall and refill after waits)\n";
    std::snprintf(buf, sizeof(buf), "%5s %6s %12s %12s %8s\n", "rank", "stage", "measured ms", "predicted ms", "error");
    os << buf;
    auto a = all.view({world_.size(), kColumns});
    for (int r = 0; r < world_.size(); ++r) {
      const double meas = a[r][4].item<int64_t>() / 1e3, pred = a[r][5].item<int64_t>() / 1e3;
      std::snprintf(buf, sizeof(buf), "%5d %6lld %12.3f %12.3f %8s\n", r, static_cast<long long>(a[r][0].item<int64_t>()),
                    meas, pred, percentOff(meas, pred).c_str());
      os << buf;
    }
    log::info(os.str());
  }
  if (rank_ == 0) {
    std::ostringstream os;
    os << "memory per rank (model peak: counting allocator, less " << formatBytes(otherBytes_)
       << " outside the model on rank 0)\n";
    std::snprintf(buf, sizeof(buf), "%5s %6s %14s %14s %8s %14s\n", "rank", "stage", "measured", "predicted", "error",
                  "resident");
    os << buf;
    auto a = all.view({world_.size(), kColumns});
    for (int r = 0; r < world_.size(); ++r) {
      const int64_t meas = a[r][1].item<int64_t>(), pred = a[r][2].item<int64_t>();
      const std::string err = percentOff(static_cast<double>(meas), static_cast<double>(pred));
      std::snprintf(buf, sizeof(buf), "%5d %6lld %14s %14s %8s %14s\n", r, static_cast<long long>(a[r][0].item<int64_t>()),
                    formatBytes(meas).c_str(), pred > 0 ? formatBytes(pred).c_str() : "-", err.c_str(),
                    formatBytes(a[r][3].item<int64_t>()).c_str());
      os << buf;
    }
    log::info(os.str());
  }
  exportModel();
  if (metrics_) log::info("metrics: " + (fs::path(outDir_) / "metrics.jsonl").string());
  world_.barrier();
  log::closeFile();
}

std::string Trainer::settingsTable() const {
  std::ostringstream os;
  auto row = [&](const std::string& k, const std::string& v) {
    char buf[200];
    std::snprintf(buf, sizeof(buf), "  %-22s %s\n", k.c_str(), v.c_str());
    os << buf;
  };
  std::string cutText;
  for (size_t i = 0; i < cuts_.size(); ++i) cutText += (i ? ", " : "") + std::to_string(cuts_[i]);
  os << "settings\n";
  row("world", std::to_string(c_.worldSize()) + " = stages " + std::to_string(c_.pipeline.stages) +
                   " x data_parallel " + std::to_string(c_.pipeline.dataParallel));
  const std::string schedule =
      scheduleOf(c_, plan_ ? &*plan_ : nullptr) + (c_.pipeline.schedule == "auto" ? " (auto)" : "") +
      (chunks_ > 1 ? ", " + std::to_string(chunks_) + " stages per rank (stage s on rank s % " +
                         std::to_string(c_.pipeline.stages) + ")"
                   : "");
  row("schedule", schedule + ", " + std::to_string(c_.pipeline.microbatches) + " micro-batches of " +
                      std::to_string(c_.training.microBatchSize));
  row("graph", std::to_string(graph_->numNodes()) + " nodes, cuts at [" + cutText + "]");
  row("execution", c_.pipeline.execution);
  std::string memoryText = "policy " + c_.memory.policy + ", budget " +
                           (c_.memory.budgetMb > 0 ? formatBytes(static_cast<int64_t>(c_.memory.budgetMb * 1048576.0)) +
                                                         " per stage" + (c_.memory.hardLimit ? " (hard limit)" : "")
                                                   : std::string("none"));
  row("memory", memoryText);
  row("threads per rank", std::to_string(threads_) + (place_.nodes > 1 ? " on " + place_.host + " (each host: its cores / its ranks)" : ""));
  std::vector<std::string> hosts;
  std::map<std::string, std::string> onHost;
  for (int r = 0; r < static_cast<int>(place_.hostOfRank.size()); ++r) {
    const auto& h = place_.hostOfRank[r];
    if (!onHost.count(h)) hosts.push_back(h);
    onHost[h] += " (stage " + std::to_string(r % c_.pipeline.stages) + ", replica " +
                 std::to_string(r / c_.pipeline.stages) + ")";
  }
  for (auto& h : hosts) row("host " + h, onHost[h].substr(1));
  row("BLAS", blasKind());
  row("LibTorch", torchVersion());
  row("MPI", mpiLibraryVersion());
  return os.str();
}

}  // namespace sluice
