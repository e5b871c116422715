// The Trainer's step (train/Trainer.h): one optimizer step's micro-batches
// and update, with training.nan_policy, fp16 loss scaling, tied gradients and
// clipping; the log points that read losses and peaks (Note [lazy loss]); and
// the buffers synced across replicas after every step.
#include <algorithm>
#include <cmath>
#include <set>

#include "core/Capture.h"
#include "core/HostSync.h"
#include "core/Log.h"
#include "core/TransferGuard.h"
#include "launch/Faults.h"
#include "train/TrainerImpl.h"
#include "train/GradientVerdict.h"
#include "optim/OptimizerState.h"

namespace sluice {

torch::Tensor TrainerImpl::step(int64_t step, bool* skipped, torch::Tensor* gradNorm) {
  *skipped = false;
  transfers::beginStep();  // Note [round trip] (core/TransferGuard.h): the forwards and backwards
  auto micro = microBatchesFor(step);
  optim::zeroGradients(optimizer());
  if (lossScaler_) worker_->setLossScale(lossScaler_->scale());
  auto loss = worker_->runMicroBatches(micro);
  transfers::endStep();  // under logging.transfer_guard: error, throws before any update
  topology_.sumTiedGradients();
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
  if (!updateGoesAhead(step, flags, params, skipped)) return loss;
  const double optimizerStart = TraceRecorder::nowUs();
  if (clip_) *gradNorm = clip_->apply(optimizer(), params, {&topology_.dataParallel, &topology_.pipeline});
  optimizer().step();
  trace_.add("optimizer", "compute", -1, optimizerStart, TraceRecorder::nowUs());
  return loss;
}

// training.nan_policy and fp16 loss scaling on the step's per-parameter
// finite flags (see step()): whether the update goes ahead. When it does not,
// the gradients are zeroed and *skipped is set; under abort without loss
// scaling the flags wait for the next log point and the update goes ahead.
bool TrainerImpl::updateGoesAhead(int64_t step, const torch::Tensor& flags, const std::vector<torch::Tensor>& params,
                              bool* skipped) {
  if (c_.training.nanPolicy == NanPolicy::Abort && !lossScaler_) {
    nanChecks_.push_back({step, flags});  // Note [lazy nan check]: read at the next log point
    return true;
  }
  auto flag = flags.logical_not().any().to(torch::kInt64).reshape({1});
  world_.allReduce(flag, ReduceOp::Max);
  const bool nonFinite = hostsync::read<int64_t>(flag) != 0;
  const auto verdict = gradientVerdict(nonFinite, c_.training.nanPolicy, lossScaler_ ? &*lossScaler_ : nullptr, step);
  switch (verdict.action) {
    case GradientVerdict::Action::Fail:
      throw Error(verdict.message);
    case GradientVerdict::Action::Skip:
      *skipped = true;
      optim::zeroGradients(optimizer());  // DistAdam: also finishes its abandoned reductions
      if (rank_ == 0) log::warn("step " + std::to_string(step) + ": " + verdict.message);
      return false;
    case GradientVerdict::Action::Apply:
      break;
  }
  if (verdict.unscale != 1) {
    optim::scaleGradients(optimizer(), params, torch::scalar_tensor(verdict.unscale, torch::kFloat).to(device_));
  }
  return true;
}

void TrainerImpl::checkNonFinite() {
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

std::vector<pipeline::MicroBatch> TrainerImpl::microBatchesFor(int64_t step) const {
  // Each data-parallel rank trains on its own disjoint rows of the global batch.
  const int dp = c_.pipeline.dataParallel, m = c_.pipeline.microbatches;
  const int64_t mbs = c_.training.microBatchSize;
  auto global = setup_.dataset->batch(step, c_.training.globalBatchSize);
  const int64_t rows = c_.training.globalBatchSize / dp;
  data::Batch batch{global.input, global.target};
  if (dp > 1) {  // its own rows only: the global batch's memory goes (the plan counts one replica's data)
    batch = {global.input.slice(0, dpRank_ * rows, (dpRank_ + 1) * rows).clone(),
             global.target.slice(0, dpRank_ * rows, (dpRank_ + 1) * rows).clone()};
  }
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
void TrainerImpl::flushLogPoint(std::vector<StepRecord>& pending, const std::vector<int64_t>& peaks) {
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
  if (dp > 1) topology_.dataParallel.allReduce(stacked, ReduceOp::Average);
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
void TrainerImpl::syncBuffers() {
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
  for (auto& b : *syncedBuffers_) topology_.dataParallel.broadcast(b, 0);
}

}  // namespace sluice
