#include "pipeline/StageWorker.h"

#include <chrono>
#include <map>
#include <optional>

#include "core/Error.h"

namespace sluice::pipeline {

namespace {

bool needsGrad(const ValueInfo& v) { return v.isTensor && v.requiresGrad && c10::isFloatingType(v.dtype); }

TensorSpec specOf(const ValueInfo& v) { return TensorSpec{v.shape, v.dtype}; }

}  // namespace

// State of one micro-batch between its forward and its backward.
struct StageWorker::InFlight {
  std::vector<torch::Tensor> inputs;   // boundary inputs (leaves when they need grad)
  std::vector<torch::Tensor> outputs;  // stage outputs
  torch::Tensor loss;                  // last stage only
  std::vector<RecvWork> activationRecvs;
  std::vector<RecvWork> gradRecvs;
  std::vector<torch::Tensor> outputGrads;
};

StageWorker::StageWorker(StageGraph stage, std::vector<torch::Tensor> params, Communicator pipelineComm,
                         Schedule schedule, LossFn lossFn, ExecMode mode)
    : stage_(std::move(stage)), params_(std::move(params)), comm_(std::move(pipelineComm)),
      schedule_(std::move(schedule)), lossFn_(std::move(lossFn)),
      module_(stage_.graph, "stage" + std::to_string(stage_.index), mode) {
  SLUICE_CHECK(params_.size() == stage_.paramInputs.size(), GraphError,
               "stage " << stage_.index << " needs " << stage_.paramInputs.size() << " parameters, got "
                        << params_.size());
  SLUICE_CHECK(comm_.size() == schedule_.stages, CommError,
               "pipeline communicator has " << comm_.size() << " ranks but the schedule has " << schedule_.stages
                                            << " stages");
  SLUICE_CHECK(comm_.rank() == stage_.index, CommError,
               "pipeline rank " << comm_.rank() << " was given stage " << stage_.index);
  checkSchedule(schedule_);
  for (auto& v : stage_.boundaryInputs) inputNeedsGrad_.push_back(!isFirst() && needsGrad(v));
  for (auto& v : stage_.outputs) outputNeedsGrad_.push_back(!isLast() && needsGrad(v));
}

std::vector<torch::Tensor> StageWorker::trainableParameters() const {
  std::vector<torch::Tensor> out;
  for (auto& p : params_) {
    if (p.requires_grad()) out.push_back(p);
  }
  return out;
}

int StageWorker::tag(int microBatch, int value, size_t count) const {
  int t = microBatch * static_cast<int>(count) + value;
  SLUICE_CHECK(t <= Communicator::kMaxTag, CommError,
               "too many micro-batches x boundary values (" << schedule_.microBatches << " x " << count
                                                            << ") for MPI tags; reduce pipeline.microbatches");
  return t;
}

torch::Tensor StageWorker::runMicroBatches(const std::vector<MicroBatch>& microBatches) {
  const int m = schedule_.microBatches;
  SLUICE_CHECK(static_cast<int>(microBatches.size()) == m, Error,
               "stage " << stage_.index << " got " << microBatches.size() << " micro-batches, schedule has " << m);
  const auto& actions = schedule_.actions[stage_.index];
  const size_t nIn = stage_.boundaryInputs.size(), nOut = stage_.outputs.size();
  std::vector<InFlight> state(m);

  // Post every receive of the step now; they complete as neighbours send.
  for (auto& a : actions) {
    auto& st = state[a.microBatch];
    if (a.kind == ActionKind::RecvActivation) {
      for (size_t i = 0; i < nIn; ++i) {
        st.activationRecvs.push_back(
            comm_.irecv(specOf(stage_.boundaryInputs[i]), stage_.index - 1, tag(a.microBatch, i, nIn)));
      }
    } else if (a.kind == ActionKind::RecvGrad) {
      for (size_t i = 0; i < nOut; ++i) {
        if (outputNeedsGrad_[i]) {
          st.gradRecvs.push_back(comm_.irecv(specOf(stage_.outputs[i]), stage_.index + 1, tag(a.microBatch, i, nOut)));
        }
      }
    }
  }

  std::vector<Work> sends;
  torch::Tensor lossSum;
  for (auto& a : actions) {
    auto& st = state[a.microBatch];
    const MicroBatch& mb = microBatches[a.microBatch];
    switch (a.kind) {
      case ActionKind::RecvActivation: {
        for (size_t i = 0; i < nIn; ++i) {
          auto t = st.activationRecvs[i].wait().tensor;
          if (inputNeedsGrad_[i]) t.requires_grad_(true);
          st.inputs.push_back(t);
        }
        st.activationRecvs.clear();
        break;
      }
      case ActionKind::Forward: {
        if (isFirst()) st.inputs = {mb.input};
        std::vector<torch::Tensor> in = st.inputs;
        in.insert(in.end(), params_.begin(), params_.end());
        const auto t0 = std::chrono::steady_clock::now();
        {
          std::optional<memory::SavedTensorScope> scope;  // the stage graph's tensors only, not the loss's
          if (savedBytes_) scope.emplace(savedBytes_->factory());
          st.outputs = module_.forward(in);
        }
        if (isLast()) {
          st.loss = lossFn_(st.outputs.at(0), mb.target) / m;
          auto detached = st.loss.detach();
          lossSum = lossSum.defined() ? lossSum + detached : detached;
        }
        times_.forwardSeconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        ++times_.forwards;
        break;
      }
      case ActionKind::SendActivation: {
        for (size_t i = 0; i < nOut; ++i) {
          sends.push_back(comm_.isend(st.outputs[i].detach().contiguous(), stage_.index + 1, tag(a.microBatch, i, nOut),
                                      outputNeedsGrad_[i]));
        }
        break;
      }
      case ActionKind::RecvGrad: {
        size_t k = 0;
        st.outputGrads.assign(nOut, torch::Tensor());
        for (size_t i = 0; i < nOut; ++i) {
          if (outputNeedsGrad_[i]) st.outputGrads[i] = st.gradRecvs[k++].wait().tensor;
        }
        st.gradRecvs.clear();
        break;
      }
      case ActionKind::Backward: {
        const auto t0 = std::chrono::steady_clock::now();
        if (isLast()) {
          st.loss.backward();
        } else {
          std::vector<torch::Tensor> roots, grads;
          for (size_t i = 0; i < nOut; ++i) {
            if (outputNeedsGrad_[i] && st.outputs[i].requires_grad()) {
              roots.push_back(st.outputs[i]);
              grads.push_back(st.outputGrads[i]);
            }
          }
          if (!roots.empty()) torch::autograd::backward(roots, grads);
        }
        st.outputs.clear();
        st.outputGrads.clear();
        st.loss = torch::Tensor();
        times_.backwardSeconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        ++times_.backwards;
        break;
      }
      case ActionKind::SendGrad: {
        for (size_t i = 0; i < nIn; ++i) {
          if (!inputNeedsGrad_[i]) continue;
          // An input no node differentiated through still owes its sender a gradient: zero.
          auto g = st.inputs[i].grad();
          if (!g.defined()) g = torch::zeros_like(st.inputs[i]);
          sends.push_back(comm_.isend(g.contiguous(), stage_.index - 1, tag(a.microBatch, i, nIn)));
        }
        st.inputs.clear();
        break;
      }
    }
  }
  for (auto& w : sends) w.wait();
  return lossSum;
}

torch::Tensor StageWorker::trainStep(const std::vector<MicroBatch>& microBatches, torch::optim::Optimizer& optimizer) {
  optimizer.zero_grad();
  auto loss = runMicroBatches(microBatches);
  optimizer.step();
  return loss;
}

}  // namespace sluice::pipeline
