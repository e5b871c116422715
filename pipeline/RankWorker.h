// pipeline::RankWorker: the stages one pipeline rank hosts, run as one.
//
// One StageWorker per stage of the rank: one, or pipeline.chunks under
// interleaved 1F1B (stages r, r + p, ...; Schedule.h). runMicroBatches()
// runs one step of all of them in the rank's schedule order (runStep). The
// rest presents them as one stage to the trainer: the trainable parameters of
// all (each tensor once, in stage order), compute times and module metrics
// summed, the trace and hooks set on each.
//
// Note [reader gradients]: a parameter that several nodes read (a tied
// embedding: the token embedding and the output head) gets one gradient
// per reader, each summed over the step's micro-batches, and then those
// added in reader order. (One process would add the readers' parts per
// micro-batch; a cut between the readers, whose gradients are then added
// across ranks, train/RankTopology.h Note [tied parameters], could not, so
// the sums would differ in the last bits.) With separateReaderGradients()
// the rank's first reader of each such parameter (in model order)
// accumulates into its .grad and every later one into a leaf of its own
// (core/GraphSplit.h gives each reader its own input); runMicroBatches()
// then adds those into .grad in that order. So with two readers every
// layout computes (first reader's sum) + (second's), bitwise; with more,
// split over ranks, the ranks' partial sums are added in rank order
// (within rounding). It costs one more gradient of the parameter per
// extra reader on the rank until the step's end (the cost model counts
// it). Off under DistAdam's hooks mode, whose reductions start from the
// parameter's own accumulation.
#pragma once

#include <memory>
#include <vector>

#include "pipeline/StageWorker.h"

namespace sluice::pipeline {

// One optimizer step of every stage this rank hosts (all of them, each once;
// same schedule), in the schedule's order for this rank. Before each compute
// action it posts the receives needed up to the next compute action (of any
// of its stages). Returns the loss (the last stage's), undefined elsewhere.
at::Tensor runStep(const std::vector<StageWorker*>& stages, const std::vector<MicroBatch>& microBatches);

class RankWorker {
 public:
  // stages: this rank's, in model order (non-empty, same schedule).
  explicit RankWorker(std::vector<std::unique_ptr<StageWorker>> stages);

  torch::Tensor runMicroBatches(const std::vector<MicroBatch>& microBatches);
  // Note [reader gradients]; from the next step on.
  void separateReaderGradients();
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
  bool separate_ = false;
  void addReaderGradients();
};

}  // namespace sluice::pipeline
