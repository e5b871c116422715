// pipeline::runStep: one optimizer step of the stages a rank hosts, in its
// schedule's order (see StageWorker.h).
#include "pipeline/StageWorker.h"

#include <algorithm>
#include <map>

#include "core/Error.h"
#include "pipeline/Schedule.h"

namespace sluice::pipeline {

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

}  // namespace sluice::pipeline
