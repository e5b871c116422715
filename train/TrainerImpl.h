// train::TrainerImpl: the Trainer's members and its phases' work (internal
// to train/; the public entry is train/Trainer.h, which owns one). Each
// phase lives in the file named for it: TrainerSetUp.cpp (setUp, plan),
// Trainer.cpp (buildStage, with the stages assembled by train/StageAssembly.h;
// train), TrainerStep.cpp (one step),
// TrainerCheckpoint.cpp (restore, checkpoints, model.pt), TrainerReport.cpp
// (report: gathering and logging; the report's numbers and text are
// train/RunReport.h's pure functions). The phases' contract,
// Note [stopping] and the memory accounting: train/Trainer.h.
#pragma once

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/Communicator.h"
#include "core/TransferGuard.h"
#include "core/GraphSplit.h"
#include "core/OpGraph.h"
#include "checkpoint/Checkpoint.h"
#include "train/RankTopology.h"
#include "train/RunReport.h"
#include "train/Trainer.h"
#include "config/Config.h"
#include "train/Evaluation.h"
#include "telemetry/Metrics.h"
#include "train/ModelFromConfig.h"
#include "launch/RankEnv.h"
#include "memory/MemoryPlan.h"
#include "memory/SavedTensorHooks.h"
#include "optim/GradClip.h"
#include "optim/LossScaler.h"
#include "optim/LrSchedule.h"
#include "optim/TrainingOptimizer.h"
#include "partition/Plan.h"
#include "pipeline/RankWorker.h"

namespace sluice {

class TrainerImpl {
 public:
  explicit TrainerImpl(Config config);
  ~TrainerImpl();

  void setUp();
  void plan();
  void buildStage();
  void restore();
  void train();
  void report();
  void run();

  // After train(): this rank's peak of allocated bytes over the training
  // steps, less what lived outside the model when training started.
  int64_t modelPeakBytes() const { return modelPeak_; }

 private:
  // setUp()'s and plan()'s parts (train/TrainerSetUp.cpp). useRankDevice: device_,
  // and under CUDA the transfer guard and deterministic kernels.
  void useRankDevice();
  void trainableAndTied(const std::vector<StageGraph>& stages);
  // train()'s parts: the state kept across steps, the work before the first
  // step, and what follows each step (returns whether to stop after it).
  struct StepLoop {
    std::vector<StepRecord> pending;  // steps whose loss is not read yet
    std::vector<int64_t> peaks;       // this rank's per-step peaks, same steps
    torch::Tensor stopFlags;          // Note [stopping]: this rank's request, in stopVote
    Work stopVote;
  };
  void beginTraining();
  bool endStep(int64_t step, double stepLr, double seconds, int64_t syncsBefore, StepLoop& loop);
  // buildStage()'s parts, in order (with train/StageAssembly.h's).
  void connect();
  void openOutputs();
  void logStages() const;
  torch::optim::Optimizer& optimizer() { return optimizer_->optimizer(); }
  // report()'s parts (train/TrainerReport.cpp): glue that gathers the
  // inputs (worker metrics, counters, the plan, the ranks' rows) and logs
  // what train/RunReport.h makes of them. reportCompute: logs the compile
  // line and the compute per micro-batch, returns its medians; reportPrediction: the plan's prediction for this rank's
  // stages together, logged (none without a plan).
  void reportTrace();
  ComputeMedians reportCompute();
  RankPrediction reportPrediction() const;
  void reportMemory(const RankPrediction& prediction, int64_t resident);
  void reportRankTables(double measuredCompute, const RankPrediction& prediction, int64_t resident);
  void reportUtilisation();
  void freeOtherStagesTensors();
  std::vector<pipeline::MicroBatch> microBatchesFor(int64_t step) const;
  void flushLogPoint(std::vector<StepRecord>& pending, const std::vector<int64_t>& peaks);
  // The settings table (logged with the resolved config): gathers
  // RunSettings from the config, placement, cuts and hosts (train/TrainerReport.cpp).
  std::string settingsTable() const;
  // One step's update, or none when a gradient is not finite on some rank
  // (training.nan_policy skip; every rank decides alike). Returns the loss.
  // gradNorm: the global gradient norm under optimizer.clip_grad_norm (a device tensor, read at log points).
  torch::Tensor step(int64_t step, bool* skipped, torch::Tensor* gradNorm);
  // step()'s decision on its per-parameter finite flags (train/TrainerStep.cpp).
  bool updateGoesAhead(int64_t step, const torch::Tensor& flags, const std::vector<torch::Tensor>& params,
                       bool* skipped);
  // This stage's parameters and buffers by module path (checkpoints, model.pt).
  std::map<std::string, torch::Tensor> stageTensors() const;
  void exportModel();
  void syncBuffers();
  std::string saveCheckpoint(int64_t stepsDone, double lr);
  void applyRestoredState();  // restore()'s part when resuming (train/TrainerCheckpoint.cpp)
  // The plan saved with the checkpoint resumed from, when the pipeline settings are still the same.
  std::optional<partition::Plan> planOfCheckpoint() const;
  CheckpointLayout layout() const;

  Config c_;
  Communicator world_;
  RankTopology topology_;  // the pipeline and data-parallel communicators, the tied groups (connect)
  int rank_ = 0, threads_ = 1, stageIndex_ = 0, dpRank_ = 0;
  c10::Device device_ = c10::Device(c10::kCPU);  // job.device: this rank's (rankDevice)
  RankPlace place_;
  TraceRecorder trace_;  // logging.trace
  std::vector<std::string> deviceTraceLines_;  // logging.trace_ops: per traced step (core/DeviceTrace.h describe)
  std::vector<std::pair<int64_t, torch::Tensor>> nanChecks_;  // (step, per-parameter finite flags), Note [lazy nan check]
  void checkNonFinite();
  // The metrics report (end of run, and on SIGUSR2): compiles, time split,
  // traffic, host syncs per step; gathers RunReport.h's MetricsNumbers from
  // counters_, the worker and the communicators' and transfer guard's totals.
  std::string metricsReport() const;
  struct StepCounters {
    int64_t steps = 0, logSteps = 0, syncsNonLog = 0, syncsLog = 0, maxSyncsNonLog = 0;
    double seconds = 0;
    Communicator::Traffic trafficAtStart;
    TransferCounts transfersAtStart;  // host<->device copies (core/TransferGuard.h)
    double computeAtStart = 0;
    void add(double stepSeconds, int64_t syncs, bool logPoint) {
      ++steps;
      seconds += stepSeconds;
      if (logPoint) {
        ++logSteps;
        syncsLog += syncs;
      } else {
        syncsNonLog += syncs;
        maxSyncsNonLog = std::max(maxSyncsNonLog, syncs);
      }
    }
  } counters_;
  std::vector<int64_t> tracedSteps_;
  ModelSetup setup_;
  std::optional<OpGraph> graph_;
  std::vector<int> cuts_;
  std::optional<partition::Plan> plan_;
  std::optional<Manifest> resume_;     // the checkpoint to resume from (checkpoint.resume)
  std::optional<RankState> restored_;  // this rank's part of it, read in plan(), applied in restore()
  bool resumeSameLayout_ = false;
  // This rank's stages (one, or pipeline.chunks under interleaved: stages
  // rank, rank + stages, ...; zbv: rank and 2 stages - 1 - rank; placement_),
  // their memory plans, and the names of the parameters and buffers they read
  // (each once, in stage order).
  int chunks_ = 1;
  pipeline::Placement placement_;
  std::vector<StageGraph> stages_;
  std::vector<memory::MemoryPlan> memoryPlans_;
  std::vector<std::string> paramNames_;
  std::vector<Communicator> boundaryComms_;  // interleaved: one per boundary (StageWorker.h)
  bool sharedSwapEngine_ = false;  // this rank's stages swap through one engine (several stages per rank)
  std::string outDir_;
  std::unique_ptr<pipeline::RankWorker> worker_;
  std::unique_ptr<optim::TrainingOptimizer> optimizer_;
  std::optional<optim::GradClip> clip_;  // optimizer.clip_grad_norm > 0
  std::optional<optim::LossScaler> lossScaler_;  // training.precision: fp16
  std::unique_ptr<MetricsWriter> metrics_;
  std::unique_ptr<Evaluator> evaluator_;                      // training.eval_interval > 0
  std::optional<std::vector<torch::Tensor>> syncedBuffers_;  // Trainer::syncBuffers
  std::unique_ptr<memory::LiveSavedBytes> savedBytes_;
  pipeline::ComputeTimes warm_;
  // Per timed step (after warmSteps_): the rank's forward and backward
  // seconds in that step. The report gives their medians, like for like with
  // the profile's medians: a burst of load from outside (another process, a
  // neighbour on the host) that lands on a few steps moves a mean, not a median.
  std::vector<pipeline::ComputeTimes> stepCompute_;
  int64_t warmSteps_ = 0;
  int64_t otherBytes_ = 0, modelPeak_ = 0;
  int64_t startStep_ = 0;  // steps already done (restored from a checkpoint)
  bool stoppedEarly_ = false;
  std::vector<std::string> trainableNames_;
  // Every tied parameter of the job (Note [tied parameters], train/RankTopology.h).
  TiedParameters tiedRanks_;
};

}  // namespace sluice
