// train::RankTopology: whom this rank talks to. Note [2-D layout]
// (TrainerSetUp.cpp): world = stages x data_parallel; each replica's stages
// are a pipeline communicator (rank == stage), each stage's replicas a
// data-parallel communicator (DistAdam, gradient averaging). Note [tied
// parameters]: a trainable parameter read by stages on several pipeline
// ranks (tied input and output embeddings) is held by each of them; before
// every update its gradient is summed over those ranks (in rank order, one
// all-reduce per parameter), so every copy takes the same update and stays
// bitwise equal. One communicator per set of pipeline ranks holding some.
//
//   RankTopology t(world, stage, replica, tiedParameters, tensorsByName);  // collective over world
//   t.useDeviceBackend(CommBackendKind::Nccl, device);                    // collective: GPU tensors over NCCL
//   t.sumTiedGradients();                                                 // before every update
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/Communicator.h"

namespace sluice {

// Every tied parameter of the job: its name and the pipeline ranks whose
// stages read it (the same list on every rank).
using TiedParameters = std::vector<std::pair<std::string, std::vector<int>>>;

class RankTopology {
 public:
  RankTopology() = default;
  // Collective over world, in this order: the pipeline communicator, the
  // data-parallel one, then one per set of tied ranks (in the sets' order).
  // tensorsByName: this rank's copies of the tied parameters it holds.
  RankTopology(const Communicator& world, int stageIndex, int dpRank, const TiedParameters& tied,
               const std::function<std::vector<at::Tensor>(const std::vector<std::string>&)>& tensorsByName);
  // CUDA tensors between ranks over `backend` (p2p channels on the
  // pipeline, collectives on the data-parallel group). Collective.
  void useDeviceBackend(CommBackendKind backend, c10::Device device);
  // Sums each tied parameter's gradient over the ranks holding it (a
  // missing gradient counts as zeros). Collective over those ranks.
  void sumTiedGradients() const;

  Communicator pipeline, dataParallel;

 private:
  struct TiedGroup {
    std::vector<std::string> names;
    std::vector<at::Tensor> params;
    Communicator comm;  // the pipeline ranks that hold them
  };
  std::vector<TiedGroup> tied_;
};

}  // namespace sluice
