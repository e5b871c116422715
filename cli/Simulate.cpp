#include "cli/Simulate.h"

#include "cli/Commands.h"

#include <algorithm>
#include <chrono>
#include <iostream>
#include <sstream>

#include "core/Error.h"
#include "core/Files.h"
#include "core/SystemInfo.h"
#include "config/Config.h"
#include "train/ModelFromConfig.h"
#include "train/Planning.h"
#include "cli/SimulateReport.h"
#include "partition/Plan.h"
#include "partition/Profile.h"
#include "pipeline/ScheduleKinds.h"

namespace sluice {
namespace {

using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::string namesOf() {
  std::string out;
  for (const auto& n : pipeline::scheduleNames()) out += (out.empty() ? "" : ", ") + n;
  return out;
}

// How the simulated ranks wait (core/WaitPolicy.h): as Work::wait does on a
// host where `ranks` ranks share `cores` cores (cores <= 0: a device each).
WaitPolicy simulatedWaits(int ranks, int cores) { return waitPolicy(cores > 0 && oversubscribed(ranks, cores)); }

// --stage-times: every named schedule, or each that applies, on the given times.
std::vector<SimulatedSchedule> simulateStageTimes(const SimulateArgs& s) {
  const auto times = parseStageTimes(s.stageTimes);
  const int given = static_cast<int>(times.size());
  SLUICE_CHECK(s.microBatches > 0, ConfigError, "sluice: simulate --stage-times needs --micro-batches M");
  const int ranks = s.ranks > 0 ? s.ranks : given;
  const int chunks = s.chunks > 0 ? s.chunks : 2;
  SLUICE_CHECK(s.ranks > 0 || given > 1, ConfigError,
               "sluice: simulate --stage-times with one F,B,W for every stage needs --ranks P");
  const std::string schedule = s.schedule.empty() ? "auto" : s.schedule;
  const auto* named = pipeline::findScheduleKind(schedule);
  SLUICE_CHECK(schedule == "auto" || named, ConfigError,
               "sluice: simulate --schedule: '" << schedule << "' is no schedule (auto, " << namesOf() << ")");
  const auto kinds = named ? std::vector<const pipeline::ScheduleKind*>{named} : partition::autoCandidates(ranks, chunks, 0);
  std::vector<SimulatedSchedule> out;
  for (const auto* kind : kinds) {
    const bool interleaves = kind->interleaves;
    const int stages = ranks * (interleaves ? chunks : 1);
    SimulationInput in;
    in.schedule = kind;
    in.ranks = ranks;
    in.chunks = interleaves ? chunks : 1;
    in.microBatches = s.microBatches;
    in.costs.comm = s.transferMs / 1e3;
    in.costs.times = given == 1 ? std::vector<pipeline::StageTimes>(stages, times[0]) : times;
    in.cores = s.cores;  // one thread per rank
    in.waits = simulatedWaits(ranks, s.cores);
    out.push_back(simulateSchedule(in));
  }
  return out;
}

// The config with the simulate flags as overrides; --micro-batches keeps
// training.global_batch_size consistent.
Config simulatedConfig(const CommandLine& a) {
  const auto& s = a.simulate;
  auto overrides = a.overrides;
  if (s.ranks > 0) overrides.push_back("pipeline.stages=" + std::to_string(s.ranks));
  if (!s.schedule.empty()) overrides.push_back("pipeline.schedule=" + s.schedule);
  if (s.chunks > 0) overrides.push_back("pipeline.chunks=" + std::to_string(s.chunks));
  if (s.memoryGb > 0) overrides.push_back("memory.budget_mb=" + std::to_string(s.memoryGb * 1e9 / 1048576.0));
  if (s.microBatches > 0) {
    // The config's own pipeline.microbatches may not match a new micro-batch size: derive it to read the shape.
    auto derived = overrides;
    derived.push_back("pipeline.microbatches=0");
    const auto base = Config::load(a.config, derived);
    overrides.push_back("pipeline.microbatches=" + std::to_string(s.microBatches));
    overrides.push_back("training.global_batch_size=" + std::to_string(static_cast<int64_t>(s.microBatches) *
                                                                       base.training.microBatchSize *
                                                                       base.pipeline.dataParallel));
  }
  return Config::load(a.config, overrides);
}

// The profile on the simulated hardware: times over --speed, the link's.
void onHardware(partition::Profile& profile, const SimulateArgs& s) {
  const double speed = s.speed > 0 ? s.speed : 1.0;
  for (auto& n : profile.nodes) {
    n.forwardSeconds /= speed;
    n.backwardSeconds /= speed;
    n.weightBackwardSeconds /= speed;
  }
  profile.lossForwardSeconds /= speed;
  profile.lossBackwardSeconds /= speed;
  // Refill (Note [refill after a wait]) is the profiled machine's caches: not carried to another device.
  if (speed != 1.0) profile.refill.pieces.clear();
  if (s.linkGBps > 0) profile.machine.p2pBandwidth = s.linkGBps * 1e9;
  if (s.latencyUs >= 0) profile.machine.p2pLatency = s.latencyUs * 1e-6;
}

// One schedule planned for the cluster, as its simulation's input.
SimulationInput inputOfPlan(const partition::Plan& plan, const Config& config, double collectiveBytesPerSecond) {
  SimulationInput in;
  in.schedule = plan.schedule;
  in.ranks = config.pipeline.stages;
  in.chunks = plan.chunks;
  in.microBatches = plan.microBatches;
  in.costs = plan.simulatedCosts;
  in.refill = plan.refillCosts();
  in.fit = config.pipeline.fitSchedule;
  in.budgetBytes = plan.budgetBytes;
  const auto placement = pipeline::placementOf(*plan.schedule, in.ranks, plan.chunks);
  int64_t mostParams = 0;
  for (int r = 0; r < in.ranks; ++r) {
    int64_t peak = 0, params = 0;
    for (int k : placement.stagesOf(r)) {
      const auto& st = plan.stages.at(k);
      peak = std::max(peak, plan.chunks > 1 ? st.rankPeakBytes : st.peakBytes);
      params += st.paramBytes;
    }
    in.rankPeakBytes.push_back(peak);
    mostParams = std::max(mostParams, params);
  }
  const int d = config.pipeline.dataParallel;
  // DistAdam: a reduce-scatter of the gradients and an all-gather of the parameters, ring-wise.
  if (d > 1) in.optimizerSeconds = 2.0 * (d - 1) / d * static_cast<double>(mostParams) / collectiveBytesPerSecond;
  return in;
}

// --cores in ranks' worth for the one pipeline simulated: the job's threads
// per rank (job.threads_per_rank; 0: the cores split between the ranks, at
// least one each), and the cores shared with the other replicas, which run
// the same actions at the same moments.
double rankCores(const Config& config, int cores) {
  if (cores <= 0) return 0;
  const int threads =
      config.job.threadsPerRank > 0 ? config.job.threadsPerRank : std::max(1, cores / config.worldSize());
  return static_cast<double>(cores) / threads / config.pipeline.dataParallel;
}

std::vector<SimulatedSchedule> simulateProfile(const CommandLine& a) {
  const auto& s = a.simulate;
  SLUICE_CHECK(!a.profile.empty(), ConfigError,
               "sluice: simulate needs --profile FILE (from `sluice profile`) with CONFIG, or --stage-times");
  SLUICE_CHECK(s.transferMs == 0, ConfigError,
               "sluice: simulate --transfer-ms goes with --stage-times; with a profile the link is --link-gbps and "
               "--latency-us");
  const auto config = simulatedConfig(a);
  auto setup = makeModelSetup(config);
  const auto graph = setup.capture(config.training.microBatchSize);
  auto profile = partition::Profile::load(a.profile, graph.hash());
  onHardware(profile, s);
  auto settings = planSettings(config);
  const double collective = s.collectiveGBps > 0 ? s.collectiveGBps * 1e9 : profile.machine.p2pBandwidth;
  const auto& cuts = config.pipeline.cuts;
  const auto kinds = settings.schedule.isAuto()
                         ? partition::autoCandidates(settings.stages, settings.chunks, static_cast<int>(cuts.size()))
                         : std::vector<const pipeline::ScheduleKind*>{&settings.schedule.kind()};
  std::vector<SimulatedSchedule> out;
  for (const auto* kind : kinds) {
    const int chunks = kind->interleaves ? settings.chunks : 1;
    std::cerr << "sluice: planning " << kind->name << " for " << settings.stages << " ranks x " << chunks
              << " stages, " << settings.microBatches << " micro-batches (" << graph.numNodes() << " nodes) ..."
              << std::flush;
    const auto t0 = Clock::now();
    auto st = settings;
    st.schedule = pipeline::ScheduleChoice::of(*kind);
    try {
      const auto plan = partition::makePlanFor(graph, profile, st, cuts);
      std::cerr << " " << secondsSince(t0) << " s" << std::endl;
      auto in = inputOfPlan(plan, config, collective);
      in.cores = rankCores(config, s.cores);
      in.waits = simulatedWaits(config.worldSize(), s.cores);
      out.push_back(simulateSchedule(in));
    } catch (const PlanError& e) {
      std::cerr << " does not fit" << std::endl;
      out.push_back(failedSchedule(*kind, chunks, e.what()));
    }
  }
  return out;
}

}  // namespace

int runSimulate(const CommandLine& a) {
  const auto& s = a.simulate;
  const bool times = !s.stageTimes.empty();
  SLUICE_CHECK(!times || (a.config.empty() && a.profile.empty()), ConfigError,
               "sluice: simulate takes either CONFIG and --profile FILE or --stage-times, not both");
  const auto t0 = Clock::now();
  const auto all = times ? simulateStageTimes(s) : simulateProfile(a);
  std::cout << simulationTable(all);
  const auto* best = fastest(all);
  if (!best) {
    std::cerr << "sluice: simulate: no schedule could be simulated (above, why)" << std::endl;
    return 1;
  }
  std::cout << "\n" << simulationDetail(*best);
  if (!s.trace.empty()) {
    writeFileAtomically(s.trace, simulatedTrace(*best));
    std::cout << "wrote " << s.trace << " (`sluice trace show " << s.trace << " -o step.svg` draws it)\n";
  }
  std::cout << "simulated in " << secondsSince(t0) << " s" << std::endl;
  return 0;
}

namespace cli {
int simulateCommand(const CommandLine& line, int, char**) { return runSimulate(line); }
}  // namespace cli

}  // namespace sluice
