// partition::Plan: what `sluice partition` writes and `sluice train` runs.
//
// A Plan is a stage split of one captured graph (keyed by its hash: the model
// and the micro-batch shape), the per-node memory actions of each stage, and
// the cost model's predictions (CostModel.h). makePlan() builds one from a
// Profile with one of its methods (PartitionMethod.h), among them:
//   profile     the exact optimum of the cost model (Partitioner.h);
//   uniform     equal numbers of transformer blocks per stage (Megatron's
//               split): blocks are the numbered module paths, e.g. "h.3.";
//   parameters  equal parameter bytes per stage (DeepSpeed's
//               partition_method=parameters).
// uniform and parameters get the cost model's best memory actions for their
// cuts, so the three are compared on equal terms. The memory policy says who
// decides what is kept:
//   plan            the partitioner: per saved storage keep, swap or recompute,
//                   whatever fits memory.budget_mb at the best predicted time;
//   none            everything is kept (an error if that does not fit);
//   full_recompute  the baseline of Megatron's full recompute and DeepSpeed's
//                   activation checkpointing: every storage saved inside a
//                   transformer block (numbered module paths, h.N.) is
//                   recomputed, except what leaves the block (its output).
// save() writes a temp file and renames it; load() throws PlanError for a
// missing, truncated or foreign file; checkMatches() throws PlanError when the
// plan was made for another graph or stage count.
#pragma once

#include <optional>
#include <functional>
#include <string>
#include <vector>

#include "core/OpGraph.h"
#include "memory/MemoryPlan.h"
#include "partition/BaselineCuts.h"
#include "partition/PartitionMethod.h"
#include "partition/Partitioner.h"
#include "partition/Profile.h"
#include "pipeline/ScheduleKinds.h"
#include "pipeline/ScheduleSimulation.h"

namespace sluice::partition {

struct PlanSettings {
  PartitionMethod method = PartitionMethod::Profile;
  // profile: cut inside a layer only when predicted at least this share of
  // the step faster than the best cuts on layer boundaries (Note [layer
  // boundaries first], Plan.cpp); 0: the op-level optimum always.
  double minOpLevelGain = 0.03;
  int stages = 1;
  int microBatches = 1;
  // A row of pipeline/ScheduleKinds.h's table; auto only for makePlanFor
  // (AutoSchedule.h), which plans each candidate row.
  pipeline::ScheduleChoice schedule = pipeline::ScheduleChoice::of(pipeline::scheduleKind("1f1b"));
  bool fitSchedule = true;         // zb-h1, interleaved-zb: fitted to the stage times (pipeline::ScheduleCosts)
  int chunks = 1;                  // stages per rank (interleaved): the graph is cut into stages x chunks pieces,
                                   // each held to budgetBytes / chunks so that a rank's pieces fit budgetBytes
  int64_t budgetBytes = 0;         // per stage; 0: none
  int dataParallel = 1;
  bool distAdam = false;           // optimizer state sharded over dataParallel (DistAdam, not its allreduce mode)
  int64_t distAdamBucketBytes = 25ll << 20;  // its buckets' cap (optimizer.dist_adam.bucket_mb)
  memory::MemoryPolicy policy = memory::MemoryPolicy::Plan;  // plan | none | full_recompute
  bool swap = true;                // a swap tier is available (memory.swap_dir)
  bool graphs = false;             // pipeline.execution: graphs: peaks count the graph pools (Note [graph pools], Prediction.cpp)
  int64_t swapWindowBytes = 0;     // the swap window: these bytes ...
  double swapWindowShare = 0.125;  // ... + this share of the budget (64 MiB without a budget)
  // Told each planning phase as it starts ("relaxed shares 1.6x", "refining
  // cuts, round 3"), for progress output on long searches; may be empty.
  std::function<void(const std::string&)> progress;
};

struct PlanStage {
  int index = 0, firstNode = 0, endNode = 0, inFlight = 0;
  std::vector<std::string> boundaryInputs, params;
  int64_t paramBytes = 0;
  double forward = 0, backward = 0, comm = 0, swap = 0, recompute = 0, loss = 0, time = 0;
  int64_t savedBytes = 0, keptBytes = 0, swappedBytes = 0, recomputedBytes = 0, staticBytes = 0, peakBytes = 0;
  int64_t boundaryBytes = 0, heldBytes = 0, transientBytes = 0, windowBytes = 0;
  double swapIO = 0;
  // zb-h1 and interleaved-zb: the times its schedule is fitted to (Plan::scheduleCosts).
  double scheduleForward = 0, scheduleBackwardInput = 0, scheduleBackwardWeight = 0;
  // Per micro-batch: what its actions that follow a wait add (Note [refill
  // after a wait], Refill.h); part of `time`, and of the step time. The share
  // it comes from: an action's extra time after a wait of
  // Plan::refillWaitSeconds or more, over its time.
  double refill = 0, refillShare = 0;
  int64_t rankPeakBytes = 0;  // several stages per rank: the hosting rank's predicted peak (proto)
};

// A saved storage that is not kept: (producer node, slot), see memory/MemoryPlan.h.
struct TensorDecision {
  int node = 0, slot = 0, stage = 0;
  std::string op;
  int64_t bytes = 0;
  Action action = Action::Keep;
  std::vector<int> segment;  // recompute: nodes re-run, inside the stage
};

struct Plan {
  std::string graphHash, profileBlas;
  // The schedule it was planned for: a row of pipeline/ScheduleKinds.h's
  // table (the file holds its name; load() refuses a name that is no row).
  const pipeline::ScheduleKind* schedule = &pipeline::scheduleKind("1f1b");
  PartitionMethod method = PartitionMethod::Profile;
  memory::MemoryPolicy policy = memory::MemoryPolicy::Plan;
  int64_t swapWindowBytes = 0;
  int microBatches = 1, microBatchSize = 0, dataParallel = 1, profileThreads = 0;
  int chunks = 1;  // stages per rank (interleaved): stages.size() = ranks x chunks, stage s on rank s % ranks
  int64_t budgetBytes = 0;
  std::vector<PlanStage> stages;
  std::vector<TensorDecision> decisions;  // swap and recompute only
  double stepTime = 0, bubbleFraction = 0;
  double scheduleComm = 0;  // see scheduleCosts()
  // profile method, when it kept layer boundaries (PlanSettings::minOpLevelGain):
  // the op-level cuts it passed over and their predicted step; else empty and 0.
  std::vector<int> opLevelCuts;
  double opLevelStepTime = 0, minOpLevelGain = 0;
  // The wait after which the stages' refill shares apply in full (0: none measured).
  double refillWaitSeconds = 0;
  // The schedule training runs when it runs this plan's: its row on the
  // plan's stages, micro-batches and chunks, fitted to scheduleCosts() when
  // there are any (and `fit`: pipeline.fit_schedule), as its prediction was.
  pipeline::Schedule runSchedule(bool fit) const;
  // What the step is simulated on under any schedule (`sluice simulate`):
  // each stage's forward, backward, input- and weight-gradient backward and
  // the one-way message time. Set by makePlan and planForCuts; not saved.
  pipeline::ScheduleCosts simulatedCosts;

  // The costs the zero-bubble schedules are fitted to (pipeline::makeSchedule):
  // what the plan's step time was simulated with. Empty for other schedules
  // and for plans made before they were recorded (those run the unit-cost schedule).
  std::optional<pipeline::ScheduleCosts> scheduleCosts() const;
  // The refill shares its step was simulated with (Note [refill after a
  // wait], Refill.h): each stage's, charged after waits of refillWaitSeconds.
  // None (not charged) for plans of profiles without refill pieces.
  pipeline::RefillCosts refillCosts() const;

  std::vector<int> cuts() const;
  bool freesTensors() const { return !decisions.empty(); }
  void save(const std::string& path) const;
  std::string toBytes() const;
  static Plan fromBytes(const std::string& bytes, const std::string& origin);
  static Plan load(const std::string& path);
  // stages: the pieces the job cuts the graph into (pipeline.stages x pipeline.chunks).
  void checkMatches(const OpGraph& graph, int stages, const std::string& origin) const;
  // One row per stage: nodes, params, predicted time, memory vs budget, swapped/recomputed bytes.
  std::string table() const;
  std::string placementText() const;  // which rank hosts which stage, in words (chunks > 1)
  std::string rankPeaksText() const;  // each rank's predicted peak and the budget (chunks > 1; "" otherwise)
  // The decisions of one stage.
  std::vector<TensorDecision> stageDecisions(int stage) const;
};

// The cost-model inputs for a graph and its profile (which must match).
Problem makeProblem(const OpGraph& graph, const Profile& profile, const PlanSettings& settings);
// For zb-h1, interleaved and interleaved-zb the profile method's cuts are a
// local optimum of the schedule's simulated step: no single cut moved by up
// to kRefineReach nodes gives a shorter one (Plan.cpp, refineForSchedule).
constexpr int kRefineReach = 16;
// Throws PlanError (no plan fits; an unknown method or policy) or GraphError.
Plan makePlan(const OpGraph& graph, const Profile& profile, const PlanSettings& settings);
// The plan for given cuts (settings.method is recorded as given): the best
// memory actions for them and the predictions.
Plan planForCuts(const OpGraph& graph, const Profile& profile, const PlanSettings& settings,
                 const std::vector<int>& cuts);

}  // namespace sluice::partition
