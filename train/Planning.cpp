#include "train/Planning.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <sstream>

#include "core/Capture.h"
#include "core/Error.h"
#include "core/Log.h"
#include "launch/Faults.h"
#include "memory/SwapTier.h"
#include "partition/Profiler.h"
#include "partition/Refill.h"
#include "pipeline/Schedule.h"
#include "pipeline/ScheduleKinds.h"

namespace sluice {

partition::Profile profileModel(const Config& c, const ModelSetup& setup, const OpGraph& graph,
                                const Communicator& comm) {
  KeepBuffers keep(*setup.module);  // profiling runs forward many times
  auto batch = setup.dataset->batch(0, c.training.microBatchSize);
  batch.input = batch.input.to(setup.device);  // profiled where the job runs
  batch.target = batch.target.to(setup.device);
  auto inputs = graphInputs(graph, *setup.module, setup.dataInputs(batch));
  log::info("profiling " + std::to_string(graph.numNodes()) + " nodes at micro-batch size " +
            std::to_string(c.training.microBatchSize) + " ...");
  auto target = batch.target;
  auto loss = setup.loss;
  auto lossOfOutput = [&](const torch::Tensor& out) { return loss(out, target); };
  partition::ProfileOptions options;
  options.loss = lossOfOutput;  // its times come from the whole passes, like the nodes'
  options.startTogether = [&comm] { comm.barrier(); };
  auto profile = partition::profileGraph(graph, inputs, options);
  partition::averageOverRanks(profile, comm);  // the refill pieces come from the node times: the same on every rank
  // Note [refill after a wait] (partition/Refill.h): what a stage's work loses when its rank waited.
  faults::inProfile(comm.rank());  // tests/cli/faults.sh: a failure here must end every rank
  if (setup.device.is_cpu()) {
    log::info("profile: timing forwards and backwards right after a wait ...");
    profile.refill = partition::measureRefill(graph, inputs, profile, comm);
    log::info("profile: refill " + profile.refill.describe());
  } else {
    // The refill is a CPU core's: its caches taken by the other rank while it
    // waited. A GPU's kernels do not run on the waiting host thread's core.
    log::info("profile: no refill after waits on " + setup.device.str());
  }
  torch::Tensor output;
  {
    torch::NoGradGuard noGrad;
    output = setup.forward(setup.dataInputs(batch));
  }
  // The loss alone: its saved bytes and workspace (from its first run), and
  // its times only if the passes did not time it.
  auto lp = partition::profileLoss(lossOfOutput, output,
                                   options.inContext ? partition::ProfileOptions{0, 1} : partition::ProfileOptions{});
  if (!options.inContext) {
    profile.lossForwardSeconds = lp.forwardSeconds;
    profile.lossBackwardSeconds = lp.backwardSeconds;
  }
  profile.lossSavedBytes = lp.savedBytes;
  profile.lossWorkspaceBytes = lp.workspaceBytes;
  profile.microBatchSize = static_cast<int>(c.training.microBatchSize);
  profile.dataBytes = static_cast<int64_t>(batch.input.nbytes() + batch.target.nbytes());
  return profile;
}

int64_t swapWindowBytes(const Config& c) {
  const double mb = c.memory.swapWindowMb > 0 ? c.memory.swapWindowMb : c.memory.budgetMb > 0 ? c.memory.budgetMb / 8 : 64;
  return static_cast<int64_t>(mb * 1024.0 * 1024.0);
}

std::string swapDir(const Config& c) { return c.memory.swapDir.empty() ? memory::defaultSwapDir() : c.memory.swapDir; }

memory::MemoryPlan memoryPlanFor(const partition::Plan& plan, int stage, const Config& c) {
  memory::MemoryPlan out;
  out.swapWindowBytes = plan.swapWindowBytes > 0 ? plan.swapWindowBytes : swapWindowBytes(c);
  for (auto& d : plan.stageDecisions(stage)) {
    memory::StorageDecision s;
    s.key = {d.node, d.slot};
    s.action = d.action;  // the same enum (partition::Action is memory::TensorAction)
    s.segment = d.segment;
    s.bytes = d.bytes;
    out.decisions.push_back(std::move(s));
  }
  return out;
}

partition::PlanSettings planSettings(const Config& c) {
  partition::PlanSettings s;
  s.method = c.pipeline.partitionMethod;
  s.minOpLevelGain = c.pipeline.minOpLevelGain;
  s.stages = c.pipeline.stages;
  s.microBatches = c.pipeline.microbatches;
  s.schedule = c.pipeline.schedule;  // a row, or auto (partition/AutoSchedule.h)
  s.chunks = c.pipeline.chunks;
  s.fitSchedule = c.pipeline.fitSchedule;
  s.budgetBytes = static_cast<int64_t>(c.memory.budgetMb * 1024.0 * 1024.0);
  s.dataParallel = c.pipeline.dataParallel;
  s.distAdam = c.optimizer.name == optim::OptimizerKind::DistAdam && c.optimizer.distAdamMode != optim::DistAdamMode::AllReduce;
  s.distAdamBucketBytes = static_cast<int64_t>(c.optimizer.distAdamBucketMb * 1048576.0);
  s.policy = c.memory.policy;
  s.swap = c.memory.swap;
  s.graphs = c.pipeline.execution == ExecMode::Graphs;
  // memory.swap_window_mb, or (0) an eighth of the budget, whatever the budget becomes.
  s.swapWindowBytes = c.memory.swapWindowMb > 0 ? static_cast<int64_t>(c.memory.swapWindowMb * 1048576.0) : 0;
  s.swapWindowShare = c.memory.swapWindowMb > 0 ? 0.0 : 0.125;
  return s;
}

const pipeline::ScheduleKind& scheduleOf(const Config& c, const partition::Plan* plan) {
  if (!c.pipeline.schedule.isAuto()) return c.pipeline.schedule.kind();
  return plan ? *plan->schedule : pipeline::scheduleKind("1f1b");
}

int chunksOf(const Config& c, const partition::Plan* plan) {
  if (!c.pipeline.schedule.isAuto()) return c.pipeline.chunks;
  return plan ? plan->chunks : 1;
}

partition::Plan planForJob(const Config& c, const ModelSetup& setup, const OpGraph& graph, const Communicator& world,
                           const std::string& scratchDir) {
  if (!c.pipeline.plan.empty()) {
    auto plan = partition::Plan::load(c.pipeline.plan);
    // A plan file decides the schedule under auto (its own); else it must be for the configured one.
    const int chunks = c.pipeline.schedule.isAuto() ? plan.chunks : c.pipeline.chunks;
    plan.checkMatches(graph, c.pipeline.stages * chunks, c.pipeline.plan);
    if (world.rank() == 0 && !c.pipeline.schedule.isAuto() && plan.schedule != &c.pipeline.schedule.kind()) {
      log::warn("pipeline.plan " + c.pipeline.plan + " was made for " + plan.schedule->name + ", but the job runs " +
                c.pipeline.schedule.name() + ": its cuts and memory actions are used, its predictions are " +
                plan.schedule->name + "'s (partition again with pipeline.schedule: " + c.pipeline.schedule.name() +
                " for this schedule's)");
    }
    return plan;
  }
  partition::Profile profile;
  if (c.pipeline.profile.empty()) {
    // Collective: ranks 0 and 1 time p2p; rank 0 times the swap tier where swaps would go.
    auto machine = partition::measureMachine(world, c.memory.swap ? scratchDir : std::string());
    // Every rank profiles at once (the machine loaded as in training); rank 0
    // plans with the averaged times.
    profile = profileModel(c, setup, graph, world);
    profile.machine = machine;
  }
  // A failure on rank 0 (the plan, or reading pipeline.profile) reaches every rank in the bytes.
  std::string bytes, failure;
  if (world.rank() == 0) {
    try {
      if (!c.pipeline.profile.empty()) {
        profile = partition::Profile::load(c.pipeline.profile, graph.hash());
        log::info("plan: from the profile " + c.pipeline.profile + " (pipeline.profile; not profiled again)");
      }
      auto settings = planSettings(c);
      std::string why;
      bytes = partition::makePlanFor(graph, profile, settings, c.pipeline.cuts, &why).toBytes();
      if (!why.empty()) log::info(why);
    } catch (const Error& e) {
      failure = e.what();
    }
  }
  auto send = [&](std::string& s) {
    auto size = torch::tensor({static_cast<int64_t>(s.size())}, torch::kInt64);
    world.broadcast(size, 0);
    auto buf = torch::zeros({size.item<int64_t>()}, torch::kUInt8);
    if (world.rank() == 0) std::memcpy(buf.data_ptr(), s.data(), s.size());
    world.broadcast(buf, 0);
    s.assign(static_cast<const char*>(buf.data_ptr()), static_cast<size_t>(buf.numel()));
  };
  send(failure);
  if (!failure.empty()) throw PlanError(failure);
  send(bytes);
  return partition::Plan::fromBytes(bytes, "from rank 0");
}

}  // namespace sluice
