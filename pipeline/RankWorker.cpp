#include "pipeline/RankWorker.h"

#include <algorithm>
#include <map>
#include <set>

#include "core/Error.h"
#include "pipeline/Schedule.h"

namespace sluice::pipeline {

// The rank driver: every stage of this rank through the rank's action list.
torch::Tensor runStep(const std::vector<StageWorker*>& stages, const std::vector<MicroBatch>& microBatches) {
  SLUICE_CHECK(!stages.empty(), Error, "runStep: no stages");
  const Schedule& schedule = stages[0]->schedule();
  const int rank = schedule.rankOf(stages[0]->stage().index);
  std::map<int, StageWorker*> byStage;
  for (auto* w : stages) byStage[w->stage().index] = w;
  for (int s : schedule.placement().stagesOf(rank)) {
    SLUICE_CHECK(byStage.count(s), Error,
                 "rank " << rank << " hosts stage " << s << " in schedule " << schedule.name << " but has no worker for it");
  }
  SLUICE_CHECK(byStage.size() == stages.size(), Error, "runStep: stages of other ranks or repeated");
  const auto& actions = schedule.actions.at(rank);
  for (auto* w : stages) w->beginStep(microBatches);
  const bool swapping = std::any_of(stages.begin(), stages.end(), [](StageWorker* w) { return w->swaps(); });
  for (size_t x = 0; x < actions.size(); ++x) {
    const Action& a = actions[x];
    for (auto* w : stages) w->reapSends();
    if (isCompute(a)) {
      // Post the receives needed up to the next compute action, so they arrive while this one runs.
      for (size_t y = x + 1; y < actions.size(); ++y) {
        byStage.at(actions[y].stage)->postReceives(actions[y]);
        if (isCompute(actions[y])) break;
      }
    }
    // The swap-ins to read ahead (Note [rank prefetch order], Schedule.h).
    const auto reads = [&](const Action& piece) { return byStage.at(piece.stage)->readsSwapped(piece); };
    if (swapping) {
      for (size_t y : prefetchTargets(actions, x, reads)) byStage.at(actions[y].stage)->prefetch(actions[y]);
    }
    // Whether a BackwardInput's weight half is the rank's next compute action.
    bool weightNext = false;
    if (a.kind == ActionKind::BackwardInput) {
      for (size_t y = x + 1; y < actions.size(); ++y) {
        if (!isCompute(actions[y])) continue;
        weightNext = actions[y].kind == ActionKind::BackwardWeight && actions[y].stage == a.stage &&
                     actions[y].microBatch == a.microBatch;
        break;
      }
    }
    byStage.at(a.stage)->execute(a, weightNext);
  }
  torch::Tensor loss;
  for (auto* w : stages) {
    auto l = w->endStep();
    if (w->isLast()) loss = l;
  }
  return loss;
}

RankWorker::RankWorker(std::vector<std::unique_ptr<StageWorker>> stages) : stages_(std::move(stages)) {
  SLUICE_CHECK(!stages_.empty(), Error, "RankWorker: no stages");
  for (auto& s : stages_) raw_.push_back(s.get());
}

torch::Tensor RankWorker::runMicroBatches(const std::vector<MicroBatch>& microBatches) {
  auto loss = runStep(raw_, microBatches);
  if (separate_) addReaderGradients();
  return loss;
}

void RankWorker::separateReaderGradients() {
  std::set<const c10::TensorImpl*> seen;  // trainable parameters with a reader before (model order)
  for (auto& s : stages_) {
    const auto& entries = s->parameterEntries();
    std::vector<char> marked(entries.size(), 0);
    for (size_t i = 0; i < entries.size(); ++i) {
      if (entries[i].requires_grad()) marked[i] = seen.insert(entries[i].unsafeGetTensorImpl()).second ? 0 : 1;
    }
    s->setReaderLeaves(std::move(marked));
  }
  separate_ = true;
}

// Note [reader gradients]: the later readers' sums, in model order.
void RankWorker::addReaderGradients() {
  torch::NoGradGuard noGrad;
  for (auto& s : stages_) {
    for (auto& [param, leaf] : s->readerLeaves()) {
      const auto& g = leaf.grad();
      if (!g.defined()) continue;
      if (param.grad().defined()) {
        param.mutable_grad().add_(g);  // in place: keeps an optimizer's binding of .grad (DistAdam)
      } else {
        param.mutable_grad() = g;
      }
      leaf.mutable_grad() = torch::Tensor();  // its memory goes now, not at the next step
    }
  }
}

std::vector<torch::Tensor> RankWorker::trainableParameters() const {
  std::vector<torch::Tensor> out;
  std::set<const void*> seen;  // a tensor two stages read (tied weights) is one parameter
  for (auto& s : stages_) {
    for (auto& p : s->trainableParameters()) {
      if (seen.insert(p.unsafeGetTensorImpl()).second) out.push_back(p);
    }
  }
  return out;
}

std::vector<int> RankWorker::readersOfTrainableParameters() const {
  std::map<const void*, int> readers;
  for (auto& s : stages_) {
    for (auto& p : s->trainableParameters()) ++readers[p.unsafeGetTensorImpl()];
  }
  std::vector<int> out;
  for (auto& p : trainableParameters()) out.push_back(readers.at(p.unsafeGetTensorImpl()));
  return out;
}

ComputeTimes RankWorker::computeTimes() const {
  ComputeTimes sum;
  for (auto& s : stages_) {
    const auto& t = s->computeTimes();
    sum.forwardSeconds += t.forwardSeconds;
    sum.backwardSeconds += t.backwardSeconds;
    sum.forwards += t.forwards;
    sum.backwards += t.backwards;
  }
  return sum;
}

StageMetrics RankWorker::metrics() const {
  StageMetrics sum;
  for (auto& s : stages_) {
    const auto& m = s->module().metrics();
    sum.compiles += m.compiles;
    sum.cacheHits += m.cacheHits;
    sum.compileSeconds += m.compileSeconds;
    sum.executeSeconds += m.executeSeconds;
    sum.recompileCauses.insert(sum.recompileCauses.end(), m.recompileCauses.begin(), m.recompileCauses.end());
  }
  return sum;
}

void RankWorker::setTrace(TraceRecorder* trace) {
  for (auto& s : stages_) s->setTrace(trace);
}

void RankWorker::setForwardHook(const std::function<void(int)>& hook) {
  for (auto& s : stages_) s->setForwardHook(hook);
}

void RankWorker::measureSavedBytes(memory::LiveSavedBytes* counter) {
  for (auto& s : stages_) s->measureSavedBytes(counter);
}

void RankWorker::setLossScale(double scale) {
  for (auto& s : stages_) s->setLossScale(scale);
}

}  // namespace sluice::pipeline
