#include "launcher/Job.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <sstream>

#include "core/Communicator.h"
#include "core/Error.h"
#include "core/Files.h"
#include "core/GraphSplit.h"
#include "core/Log.h"
#include "core/SystemInfo.h"
#include "launcher/Metrics.h"
#include "launcher/ModelSetup.h"
#include "memory/MemoryAccounting.h"
#include "optim/DistAdam.h"
#include "optim/LrSchedule.h"
#include "launcher/Planning.h"
#include "memory/SavedTensorHooks.h"
#include "partition/Plan.h"

namespace sluice {
namespace fs = std::filesystem;

namespace {

int envInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : fallback;
}

// The torchrun names, for user code and libraries that read them.
void exportRankEnv(int rank, int world) {
  setenv("RANK", std::to_string(rank).c_str(), 1);
  setenv("WORLD_SIZE", std::to_string(world).c_str(), 1);
  setenv("LOCAL_RANK", std::to_string(envInt("OMPI_COMM_WORLD_LOCAL_RANK", 0)).c_str(), 1);
  setenv("LOCAL_WORLD_SIZE", std::to_string(envInt("OMPI_COMM_WORLD_LOCAL_SIZE", 1)).c_str(), 1);
}

std::string settingsTable(const Config& c, int threads, const std::vector<int>& cuts, int nodes) {
  std::ostringstream os;
  auto row = [&](const std::string& k, const std::string& v) {
    char buf[160];
    std::snprintf(buf, sizeof(buf), "  %-22s %s\n", k.c_str(), v.c_str());
    os << buf;
  };
  std::string cutText;
  for (size_t i = 0; i < cuts.size(); ++i) cutText += (i ? ", " : "") + std::to_string(cuts[i]);
  os << "settings\n";
  row("world", std::to_string(c.worldSize()) + " = stages " + std::to_string(c.pipeline.stages) + " x data_parallel " +
                   std::to_string(c.pipeline.dataParallel));
  row("schedule", c.pipeline.schedule + ", " + std::to_string(c.pipeline.microbatches) + " micro-batches of " +
                      std::to_string(c.training.microBatchSize));
  row("graph", std::to_string(nodes) + " nodes, cuts at [" + cutText + "]");
  row("execution", c.pipeline.execution);
  row("threads per rank", std::to_string(threads));
  row("BLAS", blasKind());
  row("LibTorch", torchVersion());
  row("MPI", mpiLibraryVersion());
  return os.str();
}

// Swap and recompute are planned but not executed yet: a plan that needs them
// is refused rather than run over its budget.
void requireKeepOnly(const partition::Plan& plan, const std::string& origin) {
  if (!plan.freesTensors()) return;
  int64_t keepAll = 0;
  for (auto& s : plan.stages) keepAll = std::max(keepAll, s.staticBytes + s.inFlight * s.savedBytes);
  throw PlanError("plan " + origin + " swaps or recomputes the saved tensors of " + std::to_string(plan.decisions.size()) +
                  " nodes to fit memory.budget_mb, and this version of Sluice does not execute swap or recompute yet. "
                  "With every tensor kept, these cuts need " + memory::formatBytes(keepAll) +
                  " per stage: raise memory.budget_mb to at least " + std::to_string((keepAll + (1 << 20) - 1) >> 20) +
                  " or use more stages");
}

}  // namespace

int threadsForRank(const Config& config, int cores, int ranksOnNode) {
  if (config.job.threadsPerRank > 0) return config.job.threadsPerRank;
  return std::max(1, cores / std::max(1, ranksOnNode));
}

void runWorker(const Config& c) {
  auto world = Communicator::world();
  const int rank = world.rank();
  log::setRank(world.size() > 1 ? rank : -1);
  SLUICE_CHECK(world.size() == c.worldSize(), ConfigError,
               "config error: the job needs pipeline.stages (" << c.pipeline.stages << ") x pipeline.data_parallel ("
                   << c.pipeline.dataParallel << ") = " << c.worldSize() << " ranks but MPI started "
                   << world.size());
  exportRankEnv(rank, world.size());
  const int threads = threadsForRank(c, hardwareCores(), envInt("OMPI_COMM_WORLD_LOCAL_SIZE", 1));
  at::set_num_threads(threads);

  auto setup = makeModelSetup(c);
  auto graph = setup.capture(c.training.microBatchSize);
  const int stages = c.pipeline.stages;
  // The split: pipeline.cuts if given, else pipeline.plan, else a plan made now (pipeline.partition.method).
  std::vector<int> cuts = c.pipeline.cuts;
  std::optional<partition::Plan> plan;
  if (cuts.empty() && (stages > 1 || !c.pipeline.plan.empty())) {
    plan = planForJob(c, setup, graph, world, fs::temp_directory_path().string());
    cuts = plan->cuts();
    requireKeepOnly(*plan, c.pipeline.plan.empty() ? "the plan made for this job" : c.pipeline.plan);
  }
  auto stageGraphs = splitGraph(graph, cuts);
  // Note [2-D layout]: world rank = dataParallelRank x stages + stage. Each
  // replica's stages are a pipeline communicator (rank == stage); each stage's
  // replicas are a data-parallel communicator for DistAdam.
  const int stageIndex = rank % stages, dpRank = rank / stages, dp = c.pipeline.dataParallel;
  auto pipelineComm = world.split(dpRank, stageIndex);
  auto dpComm = world.split(stageIndex, dpRank);
  auto& stage = stageGraphs.at(stageIndex);

  // Outputs only once the job is known to be runnable (bad cuts fail above):
  // rank 0 creates the folder, the others wait for it.
  const fs::path out = c.job.outputDir;
  if (rank == 0) {
    fs::create_directories(out / "logs");
    writeFileAtomically((out / "config.resolved.yaml").string(), c.toYaml());
  }
  world.barrier();
  log::openFile((out / "logs" / ("rank_" + std::to_string(rank) + ".log")).string());
  if (rank == 0) {
    log::info("resolved config\n" + c.toYaml() + settingsTable(c, threads, cuts, graph.numNodes()) + "data: " +
              setup.dataset->describe());
    if (plan) {
      plan->save((out / "plan.pb").string());
      log::info("plan (" + (out / "plan.pb").string() + ")\n" + plan->table());
    }
    if (c.pipeline.microbatches < stages) {
      log::warn("pipeline.microbatches (" + std::to_string(c.pipeline.microbatches) + ") < pipeline.stages (" +
                std::to_string(stages) + "): most ranks idle most of the step; use at least " +
                std::to_string(stages) + " (ideally 4x) micro-batches");
    }
  }

  auto mode = c.pipeline.execution == "eager" ? ExecMode::Eager : ExecMode::Compiled;
  pipeline::StageWorker worker(stage, setup.tensorsByName(stage.paramInputs), pipelineComm,
                               pipeline::makeSchedule(c.pipeline.schedule, stages, c.pipeline.microbatches),
                               setup.loss, mode);
  auto params = worker.trainableParameters();
  std::unique_ptr<memory::LiveSavedBytes> savedBytes;
  if (c.logging.measureMemory) {
    savedBytes = std::make_unique<memory::LiveSavedBytes>();
    for (auto& t : setup.tensorsByName(stage.paramInputs)) savedBytes->exclude(t);
    worker.measureSavedBytes(savedBytes.get());
  }
  log::info("stage " + std::to_string(stage.index) + ": nodes [" + std::to_string(stage.firstNode) + ", " +
            std::to_string(stage.endNode) + "), " + std::to_string(params.size()) + " parameter tensors (" +
            memory::formatBytes(memory::tensorBytes(params)) + "), " + std::to_string(stage.boundaryInputs.size()) +
            " boundary inputs, " + std::to_string(stage.outputs.size()) + " outputs");

  auto adamw = torch::optim::AdamWOptions(c.optimizer.lr)
                   .betas({c.optimizer.beta1, c.optimizer.beta2})
                   .eps(c.optimizer.eps)
                   .weight_decay(c.optimizer.weightDecay);
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  if (c.optimizer.name == "dist_adam") {
    auto dist = std::make_unique<optim::DistAdam>(params, dpComm, adamw, optim::parseDistAdamMode(c.optimizer.distAdamMode),
                                                  dp);
    dist->setAccumulationSteps(c.pipeline.microbatches);  // reduce on the last micro-batch's backward
    log::info("DistAdam (" + c.optimizer.distAdamMode + ") over " + std::to_string(dp) + " ranks: " +
              memory::formatBytes(dist->stateBytes()) + " of optimizer state on this rank (" +
              std::to_string(dist->stateBytes()) + " bytes)");
    optimizer = std::move(dist);
  } else {
    optimizer = std::make_unique<torch::optim::AdamW>(params, adamw);
  }
  optim::LrSchedule lr{c.optimizer.schedule, c.optimizer.lr, c.optimizer.minLr, c.optimizer.warmupSteps,
                       c.training.steps};
  std::unique_ptr<MetricsWriter> metrics;
  std::vector<StepRecord> pending;  // last stage: steps whose loss is not read yet
  if (worker.isLast() && dpRank == 0) metrics = std::make_unique<MetricsWriter>((out / "metrics.jsonl").string(), c.training.steps);

  const int m = c.pipeline.microbatches;
  const int64_t mbs = c.training.microBatchSize;
  const int64_t warmSteps = std::min<int64_t>(2, c.training.steps - 1);  // compute times count after these
  pipeline::ComputeTimes warm;
  for (int64_t step = 0; step < c.training.steps; ++step) {
    if (step == warmSteps) warm = worker.computeTimes();
    auto t0 = std::chrono::steady_clock::now();
    // Each data-parallel rank trains on its own disjoint rows of the global batch.
    auto global = setup.dataset->batch(step, c.training.globalBatchSize);
    const int64_t rows = c.training.globalBatchSize / dp;
    data::Batch batch{global.input.slice(0, dpRank * rows, (dpRank + 1) * rows),
                      global.target.slice(0, dpRank * rows, (dpRank + 1) * rows)};
    std::vector<pipeline::MicroBatch> micro;
    for (int i = 0; i < m; ++i) {
      micro.push_back({batch.input.slice(0, i * mbs, (i + 1) * mbs), batch.target.slice(0, i * mbs, (i + 1) * mbs)});
    }
    const double stepLr = lr.at(step);
    optim::setLearningRate(*optimizer, stepLr);
    auto loss = worker.trainStep(micro, *optimizer);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (worker.isLast()) {
      pending.push_back({step, loss, stepLr, seconds, c.training.globalBatchSize,
                         c.training.globalBatchSize * setup.tokensPerSample});
      if ((step + 1) % c.logging.interval == 0 || step + 1 == c.training.steps) {
        // Note [lazy loss]: losses are read here only. The global loss is the
        // mean of the replicas' losses (equal shares of the global batch).
        std::vector<torch::Tensor> losses;
        for (auto& r : pending) losses.push_back(r.loss);
        auto stacked = torch::stack(losses).contiguous();
        if (dp > 1) dpComm.allReduce(stacked, ReduceOp::Average);
        for (size_t i = 0; i < pending.size(); ++i) pending[i].loss = stacked[i];
        if (metrics) {
          for (auto& r : pending) metrics->record(r);
          metrics->flush();
        }
        pending.clear();
      }
    }
  }
  const auto& sm = worker.module().metrics();
  char buf[256];
  std::snprintf(buf, sizeof(buf), "stage %d %s: %lld compiles, %lld cache hits, compile %.3f s, execute %.3f s",
                stage.index, c.pipeline.execution.c_str(), static_cast<long long>(sm.compiles),
                static_cast<long long>(sm.cacheHits), sm.compileSeconds, sm.executeSeconds);
  log::info(buf);
  const auto& ct = worker.computeTimes();
  const double mbsTimed = std::max<int64_t>(1, ct.forwards - warm.forwards);
  std::snprintf(buf, sizeof(buf), "stage %d compute per micro-batch: forward %.3f ms, backward %.3f ms (over %lld micro-batches after %lld warm-up steps)",
                stage.index, 1e3 * (ct.forwardSeconds - warm.forwardSeconds) / mbsTimed,
                1e3 * (ct.backwardSeconds - warm.backwardSeconds) / mbsTimed,
                static_cast<long long>(ct.forwards - warm.forwards), static_cast<long long>(warmSteps));
  log::info(buf);
  if (plan) {
    const auto& ps = plan->stages.at(stage.index);
    std::snprintf(buf, sizeof(buf),
                  "stage %d plan predicts: compute per micro-batch %.3f ms (forward %.3f, backward %.3f, loss %.3f), "
                  "saved activations peak %lld bytes (%d in flight x %lld kept)",
                  stage.index, 1e3 * (ps.forward + ps.backward + ps.loss), 1e3 * ps.forward, 1e3 * ps.backward,
                  1e3 * ps.loss, static_cast<long long>(ps.inFlight * ps.keptBytes), ps.inFlight,
                  static_cast<long long>(ps.keptBytes));
    log::info(buf);
  }
  if (savedBytes) {
    log::info("stage " + std::to_string(stage.index) + " saved activations: peak " +
              std::to_string(savedBytes->peakBytes()) + " bytes (" + memory::formatBytes(savedBytes->peakBytes()) + ")");
  }
  if (metrics) log::info("metrics: " + (out / "metrics.jsonl").string());
  world.barrier();
  log::closeFile();
}

}  // namespace sluice
