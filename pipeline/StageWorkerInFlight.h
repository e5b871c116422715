// pipeline::StageWorker::InFlight (internal to pipeline/: StageWorker.cpp
// and StageWorkerGraphs.cpp): what a micro-batch holds between its forward
// and its backward.
#pragma once

#include <memory>
#include <vector>

#include "pipeline/StageWorker.h"

namespace sluice::pipeline {

// State of one micro-batch between its forward and its backward.
struct StageWorker::InFlight {
  std::vector<torch::Tensor> inputs;                // boundary inputs (leaves when they need grad)
  std::vector<torch::Tensor> outputs;               // stage outputs, until sent
  std::vector<torch::autograd::Edge> outputEdges;   // where each output's gradient enters autograd
  torch::Tensor loss;                               // last stage only
  std::vector<RecvWork> activationRecvs;
  std::vector<RecvWork> gradRecvs;
  bool activationsPosted = false, gradsPosted = false;
  std::vector<torch::Tensor> outputGrads;
  std::unique_ptr<BackwardSplit> split;  // between BackwardInput and BackwardWeight
  std::vector<torch::Tensor> inputGrads;  // from BackwardInput (or a graphed backward), until sent
  int graphSlot = -1;                     // pipeline.execution: graphs: the slot it holds
};

}  // namespace sluice::pipeline
