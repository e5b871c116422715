// StageWorker's graphed path, pipeline.execution: graphs (Note [graphed
// stages], pipeline/StageGraphs.h): the same inputs, random keys, loss and
// gradient order as eager, through a StageGraphs slot per micro-batch in flight.
#include "pipeline/StageWorker.h"
#include "pipeline/StageWorkerInFlight.h"

namespace sluice::pipeline {

void StageWorker::graphedForward(int mb, InFlight& st, const MicroBatch& data, at::Tensor& lossSum) {
  const int m = schedule_.microBatches;
  if (isFirst()) st.inputs = firstStageInputs(data);
  const size_t nIn = st.inputs.size();
  std::vector<at::Tensor> in = st.inputs;
  if (isLast()) in.push_back(data.target);  // the loss's target, a static input like the others
  RandomKey key = data.random;
  if (key.microBatch < 0) key.microBatch = mb;
  // What eager computes for the micro-batch, run to warm up and to capture.
  auto run = [&](const std::vector<at::Tensor>& inputs) {
    std::vector<at::Tensor> args(inputs.begin(), inputs.begin() + static_cast<std::ptrdiff_t>(nIn));
    args.insert(args.end(), stepParams_.begin(), stepParams_.end());
    GraphedForward f;
    f.outputs = module_.forward(args);
    if (isLast()) {
      f.loss = lossFn_(f.outputs.at(0), inputs.back()) / m;
      f.outputs.clear();  // the loss's graph holds what its backward needs
    }
    return f;
  };
  st.graphSlot = slots_.acquire(mb);
  auto f = graphs_->forward(st.graphSlot, in, key, stepParams_, run);
  if (isLast()) {
    st.loss = f.loss;
    lossSum = lossSum.defined() ? lossSum + f.loss : f.loss;
  } else {
    st.outputs = std::move(f.outputs);
  }
}

void StageWorker::graphedBackward(InFlight& st) {
  st.inputGrads = graphs_->backward(st.graphSlot, st.outputGrads, lossScale_);
  st.outputEdges.clear();
  st.outputGrads.clear();
  st.loss = at::Tensor();
}

void StageWorker::graphedWeights(int mb, InFlight& st) {
  graphs_->accumulateWeights(st.graphSlot, stepParams_);
  slots_.release(mb);
  st.graphSlot = -1;
}

}  // namespace sluice::pipeline
