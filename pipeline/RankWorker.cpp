#include "pipeline/RankWorker.h"

#include <map>
#include <set>

#include "core/Error.h"

namespace sluice::pipeline {

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
