#include "train/RankTopology.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <map>

namespace sluice {

RankTopology::RankTopology(const Communicator& world, int stageIndex, int dpRank, const TiedParameters& tied,
                           const std::function<std::vector<at::Tensor>(const std::vector<std::string>&)>& tensorsByName)
    : pipeline(world.split(dpRank, stageIndex)), dataParallel(world.split(stageIndex, dpRank)) {
  std::map<std::vector<int>, std::vector<std::string>> tiedSets;
  for (auto& [name, ranks] : tied) tiedSets[ranks].push_back(name);
  for (auto& [ranks, names] : tiedSets) {
    const bool member = std::find(ranks.begin(), ranks.end(), stageIndex) != ranks.end();
    auto comm = pipeline.split(member ? 1 : 0, stageIndex);
    if (member) tied_.push_back({names, tensorsByName(names), comm});
  }
}

void RankTopology::useDeviceBackend(CommBackendKind backend, c10::Device device) {
  pipeline = pipeline.withDeviceBackend(backend, device, /*pointToPoint=*/true);
  dataParallel = dataParallel.withDeviceBackend(backend, device, /*pointToPoint=*/false);
}

void RankTopology::sumTiedGradients() const {
  for (auto& group : tied_) {
    for (auto p : group.params) {
      if (!p.grad().defined()) p.mutable_grad() = at::zeros_like(p);  // this rank's readers gave it none
      group.comm.allReduce(p.mutable_grad(), ReduceOp::Sum);
    }
  }
}

}  // namespace sluice
