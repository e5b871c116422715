// pipeline::RankWorker: the stages one pipeline rank hosts, run as one.
//
// One StageWorker per stage of the rank: one, or pipeline.chunks under
// interleaved 1F1B (stages r, r + p, ...; Schedule.h). runMicroBatches()
// runs one step of all of them in the rank's schedule order (runStep). The
// rest presents them as one stage to the trainer: the trainable parameters of
// all (each tensor once, in stage order), compute times and module metrics
// summed, the trace and hooks set on each.
#pragma once

#include <memory>
#include <vector>

#include "pipeline/StageWorker.h"

namespace sluice::pipeline {

class RankWorker {
 public:
  // stages: this rank's, in model order (non-empty, same schedule).
  explicit RankWorker(std::vector<std::unique_ptr<StageWorker>> stages);

  torch::Tensor runMicroBatches(const std::vector<MicroBatch>& microBatches);
  std::vector<torch::Tensor> trainableParameters() const;
  // For each of trainableParameters(), how many of the rank's stages read it
  // (more than 1: a tied weight two stages of this rank share, as under zbv).
  std::vector<int> readersOfTrainableParameters() const;
  bool isFirst() const { return stages_.front()->isFirst(); }
  bool isLast() const { return stages_.back()->isLast(); }
  ComputeTimes computeTimes() const;
  StageMetrics metrics() const;
  void setTrace(TraceRecorder* trace);
  void setForwardHook(const std::function<void(int microBatch)>& hook);
  void measureSavedBytes(memory::LiveSavedBytes* counter);
  void setLossScale(double scale);  // every stage's (StageWorker::setLossScale)

  size_t size() const { return stages_.size(); }
  StageWorker& stage(size_t i) { return *stages_.at(i); }
  const StageWorker& stage(size_t i) const { return *stages_.at(i); }

 private:
  std::vector<std::unique_ptr<StageWorker>> stages_;
  std::vector<StageWorker*> raw_;
};

}  // namespace sluice::pipeline
