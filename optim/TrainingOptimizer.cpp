#include "optim/TrainingOptimizer.h"

#include "core/Bytes.h"

namespace sluice::optim {

namespace {

class AdamWOptimizer final : public TrainingOptimizer {
 public:
  AdamWOptimizer(const std::vector<torch::Tensor>& params, const torch::optim::AdamWOptions& o) : adamw_(params, o) {}
  torch::optim::Optimizer& optimizer() override { return adamw_; }
  int64_t residentBytes() const override { return 0; }
  void setTrace(TraceRecorder*) override {}
  std::string describe() const override { return "AdamW"; }

 private:
  torch::optim::AdamW adamw_;
};

class DistAdamOptimizer final : public TrainingOptimizer {
 public:
  DistAdamOptimizer(const std::vector<torch::Tensor>& params, const Communicator& comm, const OptimizerOptions& o)
      : dist_(params, comm, o.adamw, o.distAdamMode, o.expectedRanks, o.bucketBytes), ranks_(comm.size()) {
    if (o.readers.empty()) {
      dist_.setAccumulationSteps(o.accumulationSteps);
    } else {
      std::vector<int> steps;
      for (int r : o.readers) steps.push_back(o.accumulationSteps * r);
      dist_.setAccumulationSteps(steps);
    }
  }
  torch::optim::Optimizer& optimizer() override { return dist_; }
  int64_t residentBytes() const override { return dist_.residentBytes(); }
  void setTrace(TraceRecorder* trace) override { dist_.setTrace(trace); }
  std::string describe() const override {
    return "DistAdam (" + toString(dist_.mode()) + ") over " + std::to_string(ranks_) + " ranks, " +
           std::to_string(dist_.bucketCount()) + " bucket(s): " + formatBytes(dist_.stateBytes()) +
           " of optimizer state on this rank (" + std::to_string(dist_.stateBytes()) + " bytes)";
  }

 private:
  DistAdam dist_;
  int ranks_;
};

}  // namespace

std::unique_ptr<TrainingOptimizer> makeTrainingOptimizer(const OptimizerOptions& options,
                                                         const std::vector<torch::Tensor>& params,
                                                         const Communicator& dataParallel) {
  if (options.kind == OptimizerKind::DistAdam) return std::make_unique<DistAdamOptimizer>(params, dataParallel, options);
  return std::make_unique<AdamWOptimizer>(params, options.adamw);
}

}  // namespace sluice::optim
