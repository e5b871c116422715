// partition/BaselineCuts: the cuts of the peers Sluice's profile method is
// measured against (Plan.h's methods uniform, parameters and layers), and
// the layer boundaries the profile method prefers when op-level cuts would
// gain too little (PlanSettings::minOpLevelGain).
//
// Layers are the nodes before the first numbered block (module paths like
// "h.3."), each block, and the nodes after the last. All functions are pure;
// they throw PlanError when the graph has too few layers or valid cuts for
// the stages asked for.
#pragma once

#include <vector>

#include "core/OpGraph.h"
#include "partition/Profile.h"

namespace sluice::partition {

// Equal numbers of numbered blocks per stage (Megatron's split).
std::vector<int> uniformCuts(const OpGraph& graph, int stages);
// Per node, the number of the transformer block whose parameters it reads
// first (module paths like "h.3."), or -1.
std::vector<int> blockOfNodes(const OpGraph& graph);
// Equal parameter bytes per stage (DeepSpeed's partition_method=parameters).
std::vector<int> parameterCuts(const OpGraph& graph, int stages);
// 0, the layer boundaries (each block's first node and the node after the
// last block, each snapped to the nearest valid cut, increasing), and the
// node count: layer l is nodes [b[l], b[l + 1]).
std::vector<int> layerBoundaries(const OpGraph& graph);
// Layer-level balance by profiled time (torchgpipe's balance_by_time,
// PipeDream's layer-level split): each layer's forward + backward time from
// the profile (the loss counts to the last), split into `stages` contiguous
// groups minimising the slowest group's time. Cuts fall only on
// layerBoundaries(). PlanError when there are fewer layers than stages.
std::vector<int> layerCuts(const OpGraph& graph, const Profile& profile, int stages);

}  // namespace sluice::partition
