// The Trainer's checkpoint phase and glue (train/Trainer.h): the plan a
// checkpoint carries, restoring this rank's part of one, saving one, and
// writing a TorchScript model's trained weights (Note [model.pt]). The
// format itself and its atomic commit live in checkpoint/Checkpoint.h.
#include <algorithm>
#include <filesystem>
#include <mutex>

#include "core/Capture.h"
#include "core/CommActivity.h"
#include "core/Files.h"
#include "core/Log.h"
#include "core/TensorFile.h"
#include "core/TransferGuard.h"
#include "train/Planning.h"
#include "telemetry/TensorBoard.h"
#include "train/TrainerImpl.h"
#include "models/TorchScript.h"
#include "optim/OptimizerState.h"
#include "pipeline/ScheduleKinds.h"

namespace sluice {
namespace fs = std::filesystem;

std::optional<partition::Plan> TrainerImpl::planOfCheckpoint() const {
  if (!resume_ || !c_.pipeline.plan.empty() || !c_.pipeline.cuts.empty()) return std::nullopt;
  const auto bytes = checkpointPlanBytes(*resume_);
  if (bytes.empty()) return std::nullopt;
  auto saved = partition::Plan::fromBytes(bytes, resume_->path + "/plan.pb");
  const auto want = planSettings(c_);
  // Under pipeline.schedule auto the plan holds the schedule auto chose (and
  // its chunks: 1 unless it interleaves): the same choice when it is one auto
  // would weigh now. Comparing it with "auto" itself never matched, so every
  // restart planned anew and could switch schedules mid-run.
  bool scheduleSame = !want.schedule.isAuto() && saved.schedule == &want.schedule.kind() && saved.chunks == want.chunks;
  if (want.schedule.isAuto()) {
    const auto candidates = partition::autoCandidates(want.stages, want.chunks, static_cast<int>(c_.pipeline.cuts.size()));
    scheduleSame = std::find(candidates.begin(), candidates.end(), saved.schedule) != candidates.end() &&
                   saved.chunks == (saved.schedule->interleaves ? want.chunks : 1);
  }
  // Same graph, stage count and everything the plan was chosen for; else plan anew.
  const bool same = saved.graphHash == graph_->hash() && scheduleSame &&
                    static_cast<int>(saved.stages.size()) == want.stages * saved.chunks &&
                    saved.microBatches == want.microBatches &&
                    saved.dataParallel == want.dataParallel && saved.budgetBytes == want.budgetBytes &&
                    saved.policy == want.policy;
  if (rank_ == 0) {
    log::info(same ? "plan: the one saved with " + resume_->path + " (same pipeline settings)"
                   : "plan: the pipeline settings differ from " + resume_->path + "'s; planning anew");
  }
  if (!same) return std::nullopt;
  return saved;
}

CheckpointLayout TrainerImpl::layout() const {
  CheckpointLayout l;
  l.stages = c_.pipeline.stages;
  l.dataParallel = c_.pipeline.dataParallel;
  l.cuts = cuts_;
  l.graphHash = graph_->hash();
  l.model = modelFields(c_);
  return l;
}

void TrainerImpl::restore() {
  TransferScope scope(TransferScope::Kind::Setup);
  const std::string dir = resume_ ? resume_->path : "";
  const fs::path out = c_.job.outputDir;
  if (resume_) applyRestoredState();
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

// restore()'s resuming: this rank's part of the checkpoint (read in plan())
// into the stage's tensors, the optimizer's state, the random generator and
// the loss scaler; training goes on from the checkpoint's step.
void TrainerImpl::applyRestoredState() {
  const std::string& dir = resume_->path;
  const auto& manifest = *resume_;
  const auto& state = *restored_;
  {
    torch::NoGradGuard noGrad;
    auto tensors = setup_.tensorsByName(paramNames_);
    for (size_t i = 0; i < tensors.size(); ++i) {
      const auto found = state.tensors.find(paramNames_[i]);
      if (found == state.tensors.end()) continue;  // a buffer the model derives (TrainerImpl::plan): its own
      const auto& saved = found->second;
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
  optim::setAdamState(optimizer(), worker_->trainableParameters(), adam);
  if (state.rng.defined()) {
    auto gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(state.rng);
  }
  if (lossScaler_ && manifest.lossScale > 0) lossScaler_->restore(manifest.lossScale, manifest.lossScaleGoodSteps);
  if (lossScaler_ && rank_ == 0) {
    log::info(std::string("loss scale: ") +
              (manifest.lossScale > 0 ? "the checkpoint's, " : "the checkpoint has none (not fp16), training.loss_scale: ") +
              optim::scaleText(lossScaler_->scale()));
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

std::map<std::string, torch::Tensor> TrainerImpl::stageTensors() const {
  std::map<std::string, torch::Tensor> named;
  auto tensors = setup_.tensorsByName(paramNames_);
  for (size_t i = 0; i < tensors.size(); ++i) named[paramNames_[i]] = tensors[i];
  return named;
}

// Note [model.pt]: a TorchScript model's trained weights go back into the
// user's module: each stage's first replica writes its parameters and buffers
// (by module path) to a part file in output_dir, rank 0 puts them into the
// module loaded from model.path and saves output_dir/model.pt atomically.
void TrainerImpl::exportModel() {
  if (!c_.model.spec->torchScriptFile) return;
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

std::string TrainerImpl::saveCheckpoint(int64_t stepsDone, double lr) {
  CommActivity activity("checkpoint of step " + std::to_string(stepsDone));
  TransferScope scope(TransferScope::Kind::Setup);
  RankState state;
  // Full Adam state: collective over the data-parallel group (DistAdam gathers its shards).
  auto adam = optim::adamState(optimizer(), worker_->trainableParameters());
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

}  // namespace sluice
