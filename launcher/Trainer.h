// launcher::Trainer: what one rank of a training job does, phase by phase.
//
//   Trainer t(config);
//   t.setUp();      // MPI world matches the config, threads, model, captured graph
//   t.plan();       // the split: pipeline.cuts, pipeline.plan, or a plan made now;
//                   // and this stage's memory plan (keep / swap / recompute)
//   t.buildStage(); // communicators, run outputs, the stage worker, the optimizer
//   t.train();      // the step loop: metrics.jsonl with losses and per-stage memory peaks
//   t.report();     // per rank: compiles, compute per micro-batch, memory measured vs
//                   // predicted; rank 0 prints the per-stage memory table
//
// Every phase is collective over the world (all ranks call it in order) and
// throws on error; the CLI reports the error and stops all ranks. Memory is
// measured with the counting allocator (memory/CountingAllocator.h), which
// the trainer installs; bytes allocated outside the model (data, the
// communicator's buffers of other code) at the start of training are
// reported apart, so the model's peak is comparable with the plan's.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/Communicator.h"
#include "core/GraphSplit.h"
#include "core/OpGraph.h"
#include "launcher/Config.h"
#include "launcher/Metrics.h"
#include "launcher/ModelSetup.h"
#include "memory/MemoryPlan.h"
#include "memory/SavedTensorHooks.h"
#include "optim/LrSchedule.h"
#include "partition/Plan.h"
#include "pipeline/StageWorker.h"

namespace sluice {

class Trainer {
 public:
  explicit Trainer(Config config);
  ~Trainer();

  void setUp();
  void plan();
  void buildStage();
  void train();
  void report();
  void run();

  // After train(): this rank's peak of allocated bytes over the training
  // steps, less what lived outside the model when training started.
  int64_t modelPeakBytes() const { return modelPeak_; }

 private:
  void freeOtherStagesTensors();
  std::vector<pipeline::MicroBatch> microBatchesFor(int64_t step) const;
  void flushLogPoint(std::vector<StepRecord>& pending, const std::vector<int64_t>& peaks);
  std::string settingsTable() const;

  Config c_;
  Communicator world_, pipelineComm_, dpComm_;
  int rank_ = 0, threads_ = 1, stageIndex_ = 0, dpRank_ = 0;
  ModelSetup setup_;
  std::optional<OpGraph> graph_;
  std::vector<int> cuts_;
  std::optional<partition::Plan> plan_;
  memory::MemoryPlan memoryPlan_;
  std::optional<StageGraph> stage_;
  std::string outDir_;
  std::unique_ptr<pipeline::StageWorker> worker_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::unique_ptr<MetricsWriter> metrics_;
  std::unique_ptr<memory::LiveSavedBytes> savedBytes_;
  pipeline::ComputeTimes warm_;
  int64_t warmSteps_ = 0;
  int64_t otherBytes_ = 0, modelPeak_ = 0;
};

}  // namespace sluice
