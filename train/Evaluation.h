// train::Evaluator: forward-only passes over the held-out split
// (training.eval_interval, data.eval_split), through the same pipeline.
//
// The model is captured a second time in eval mode (BatchNorm reads its
// running statistics, dropout is off). That graph has the training graph's
// ops in the same order, less training-only ones (BatchNorm's batch counter
// update); mapEvalCuts() aligns the two node lists and moves each training
// cut to the same place in the eval graph, so every stage evaluates with the
// parameters and buffers it trains (GraphError when they do not align).
//
// run() is collective over the world: each replica takes every D-th
// micro-batch of the split (micro-batches of training.micro_batch_size; a
// last partial one is left out), no autograd graph and no saved tensors are
// kept, and the last stages' sums are added over the replicas. The mean loss
// and accuracy are returned on the last stage's first replica (the metrics
// writer); other ranks get samples = 0.
//
// Note [BatchNorm across stages and replicas]: running statistics are
// updated by each micro-batch's forward on the stage that holds the
// BatchNorm, in micro-batch order, exactly as one process looping over the
// micro-batches would. Replicas see different micro-batches, so after every
// step the first replica's buffers are broadcast to the others (PyTorch DDP's
// broadcast_buffers rule; Trainer::syncBuffers), and evaluation and model.pt
// use those.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "core/Communicator.h"
#include "core/OpGraph.h"
#include "config/Config.h"
#include "models/ModelSetup.h"
#include "data/FashionMnist.h"
#include "data/TokenFile.h"
#include "pipeline/StageWorker.h"

namespace sluice {

std::vector<int> mapEvalCuts(const OpGraph& train, const OpGraph& eval, const std::vector<int>& cuts);

struct EvalResult {
  double loss = 0, accuracy = -1;  // accuracy -1: not a classifier
  int64_t samples = 0;
  double seconds = 0;
};

class Evaluator {
 public:
  // cuts: the training split (every stage of every rank); schedule: the
  // training schedule, whose placement says which stages this pipeline rank
  // (stageIndex) hosts (several under interleaved and zbv, talking on
  // boundaryComms as in training, StageWorker.h).
  Evaluator(const Config& config, const ModelSetup& setup, const OpGraph& trainGraph, const std::vector<int>& cuts,
            int stageIndex, int dpRank, Communicator pipelineComm, Communicator dpComm,
            const pipeline::Schedule& schedule, std::vector<Communicator> boundaryComms = {});
  EvalResult run();

 private:
  const Config& c_;
  int dpRank_;
  bool classifier_;  // accuracy too (not when the model returns its own loss)
  c10::Device device_;  // where the stages run (the model's device)
  Communicator dpComm_;
  // The held-out samples: Fashion-MNIST's data.eval_split, or the token file at data.eval_path.
  std::unique_ptr<data::Dataset> data_;
  std::function<data::Batch(int64_t, int64_t)> slice_;  // samples [begin, end) in file order
  int64_t samples_ = 0;
  std::vector<std::unique_ptr<pipeline::StageWorker>> workers_;  // this rank's stages, in model order
};

}  // namespace sluice
