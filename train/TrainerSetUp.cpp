// The Trainer's first phases (train/Trainer.h): set-up (the MPI world against
// the config, this rank's place, threads and device, the model and its
// captured graph) and planning (the split, this rank's stages and memory
// plans, tied parameters, and this rank's part of the checkpoint resumed from).
#include <ATen/Parallel.h>

#include <cstdlib>
#include <map>
#include <set>
#include <string>

#include "core/HeapPolicy.h"
#include "core/Device.h"
#include "core/Error.h"
#include "core/Log.h"
#include "core/SystemInfo.h"
#include "core/TransferGuard.h"
#include "train/Planning.h"
#include "train/TrainerImpl.h"
#include "memory/CountingAllocator.h"
#include "memory/SwapTier.h"

namespace sluice {

void TrainerImpl::setUp() {
  memory::installCountingAllocator();
  Communicator::setWaitTimeout(c_.cluster.initTimeoutS, "cluster.init_timeout_s");
  installStopHandlers();
  // Freed activation-sized blocks stay in the heap (Note [malloc churn],
  // core/HeapPolicy.h); main() has done so already, a library caller may not have.
  keepFreedMemoryInHeap();
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
  useRankDevice();
  setup_ = makeModelSetup(c_);
  {
    TransferScope scope(TransferScope::Kind::Setup);
    setup_.toDevice(device_);
    graph_.emplace(setup_.capture(c_.training.microBatchSize));
  }
  if (rank_ == 0 && graph_->fusedAttentions() > 0)
    log::info("capture: " + std::to_string(graph_->fusedAttentions()) +
              " causal attentions fused into scaled_dot_product_attention (Note [attention fusion])");
  // Note [2-D layout]: world rank = dataParallelRank x stages + stage. Each
  // replica's stages are a pipeline communicator (rank == stage); each stage's
  // replicas are a data-parallel communicator for DistAdam.
  stageIndex_ = rank_ % c_.pipeline.stages;
  dpRank_ = rank_ / c_.pipeline.stages;
}

// This rank's device (job.device): the model is built from the seed on the
// host (the same weights everywhere), then moved there and captured there.
void TrainerImpl::useRankDevice() {
  device_ = rankDevice(c_.job.device, place_.localRank);
  useDevice(device_);
  if (device_.is_cuda()) {
    if (rank_ == 0) {
      log::info("device: " + device_.str() + " (job.device cuda; precision " +
                choiceName(precisionChoices(), c_.training.precision) + ")");
    }
    transfers::setMode(c_.logging.transferGuard);
    // The hook boxes every op's arguments on the host (GPU-SUSPECTS, suspect
    // 4): with the guard off there is nothing to watch, so nothing is installed.
    if (c_.logging.transferGuard != TransferGuardMode::Off) transfers::installHook();
    // Exact first (the correctness contract): on a GPU some backward kernels add
    // with atomics in any order (embedding's, index_add's); their
    // deterministic variants make runs and layouts comparable bitwise.
    // cuBLAS is deterministic on one stream; the workspace setting keeps it
    // so and silences PyTorch's warning. warn_only: an op without a
    // deterministic kernel still runs, with PyTorch's warning naming it.
    ::setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", /*overwrite=*/0);
    at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/true);
    // Note [uninitialized fill]: deterministic mode also makes PyTorch fill
    // every new CUDA allocation (empty, clone, contiguous, casts) with NaN, a
    // kernel per allocation that only matters to an op that reads memory it
    // never wrote. Sluice's ops write what they allocate, so the fill is off;
    // SLUICE_FILL_UNINITIALIZED=1 turns it back on (to compare, or to hunt
    // such a read).
    const char* fill = std::getenv("SLUICE_FILL_UNINITIALIZED");
    at::globalContext().setDeterministicFillUninitializedMemory(fill && std::string(fill) == "1");
  }
}

void TrainerImpl::plan() {
  const auto& m = c_.memory;
  cuts_ = c_.pipeline.cuts;
  // A plan decides the split (without cuts) and what is kept; a memory plan
  // is needed for a budget under policy plan, and for full_recompute.
  const bool memoryDecisions = m.policy == memory::MemoryPolicy::FullRecompute ||
                               (m.policy == memory::MemoryPolicy::Plan && m.budgetMb > 0);
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
  // A profile given is planned from (the report then has the predictions), even where nothing must be decided.
  if (!c_.pipeline.plan.empty() || !c_.pipeline.profile.empty() || split || memoryDecisions) {
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
  placement_ =
      pipeline::placementOf(scheduleOf(c_, plan_ ? &*plan_ : nullptr), c_.pipeline.stages, chunks_);
  for (int s : placement_.stagesOf(stageIndex_)) {
    stages_.push_back(stages[s]);
    memoryPlans_.push_back(plan_ ? memoryPlanFor(*plan_, static_cast<int>(s), c_) : memory::MemoryPlan{});
    for (auto& name : stages[s].paramInputs) {
      if (named.insert(name).second) paramNames_.push_back(name);
    }
  }
  trainableAndTied(stages);
  if (c_.training.precision == Precision::Fp16) lossScaler_.emplace(c_.training.lossScale, c_.training.lossScaleWindow);
  SLUICE_CHECK(tiedRanks_.empty() || c_.optimizer.name != optim::OptimizerKind::DistAdam ||
                   c_.optimizer.distAdamMode != optim::DistAdamMode::Hooks,
               ConfigError,
               "config error: " << tiedRanks_.front().first << " is read by stages on several pipeline ranks (tied "
                                << "weights); its gradient is summed over them before the update, which DistAdam's "
                                << "hooks mode would reduce before: use optimizer.dist_adam.mode after_backward or "
                                << "allreduce, or cuts that keep its readers on one stage");
  // This rank's part of the checkpoint is read (and its checksums checked) now, before any output is written.
  if (resume_) {
    resumeSameLayout_ = resume_->layout == layout();
    // A buffer the model derives and the checkpoint lacks keeps the model's own value.
    restored_ = loadCheckpoint(*resume_, withoutDerivedBuffers(*resume_, paramNames_, *setup_.module),
                               trainableNames_, rank_, resumeSameLayout_);
  }
}

// The trainable parameters of this rank's stages, the tied ones of the job,
// and (optimizer.clip_grad_norm) each one's entry in the job's norm vector.
void TrainerImpl::trainableAndTied(const std::vector<StageGraph>& stages) {
  for (auto& name : paramNames_) {
    if (setup_.tensorsByName({name})[0].requires_grad()) trainableNames_.push_back(name);
  }
  // Note [tied parameters] (Trainer.h): the same on every rank (every rank splits the whole graph).
  std::map<std::string, std::set<int>> holders;
  for (size_t s = 0; s < stages.size(); ++s) {
    for (auto& name : stages[s].paramInputs) holders[name].insert(placement_.rankOf(static_cast<int>(s)));
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
}

}  // namespace sluice
