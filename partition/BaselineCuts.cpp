#include "partition/BaselineCuts.h"

#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <regex>

#include "core/Error.h"

namespace sluice::partition {
namespace {

// Among valid cuts after `after` that leave room for `remaining` more cuts,
// the one with the least distance(cut) (ties: the earlier).
int nearestValidCut(const std::vector<int>& valid, int after, int remaining, const std::function<double(int)>& distance) {
  int best = -1;
  for (size_t i = 0; i < valid.size(); ++i) {
    if (valid[i] <= after || valid.size() - i - 1 < static_cast<size_t>(remaining)) continue;
    if (best < 0 || distance(valid[i]) < distance(best)) best = valid[i];
  }
  SLUICE_CHECK(best >= 0, PlanError, "partition: too few valid cut points for this many stages");
  return best;
}

}  // namespace

std::vector<int> uniformCuts(const OpGraph& graph, int stages) {
  std::map<int, int> firstNodeOfBlock;
  const auto block = blockOfNodes(graph);
  for (int j = 0; j < graph.numNodes(); ++j) {
    if (block[j] >= 0) firstNodeOfBlock.emplace(block[j], j);
  }
  const int blocks = static_cast<int>(firstNodeOfBlock.size());
  SLUICE_CHECK(blocks >= stages, PlanError,
               "partition: method uniform splits numbered blocks (module paths like h.3.), and this model has "
                   << blocks << ", fewer than " << stages << " stages; use --method profile or parameters");
  std::vector<int> starts;
  for (auto& [block, node] : firstNodeOfBlock) starts.push_back(node);
  auto valid = graph.validCuts();
  std::vector<int> cuts;
  for (int k = 1; k < stages; ++k) {
    const int target = starts[static_cast<size_t>(k) * blocks / stages];
    cuts.push_back(nearestValidCut(valid, cuts.empty() ? 0 : cuts.back(), stages - 1 - k,
                                   [&](int c) { return std::abs(c - target); }));
  }
  return cuts;
}

std::vector<int> parameterCuts(const OpGraph& graph, int stages) {
  const int n = graph.numNodes();
  std::vector<int64_t> prefix(n + 1, 0);
  std::map<std::string, int64_t> bytes;
  for (auto& in : graph.inputs()) bytes[in.name] = in.value.bytes();
  std::map<std::string, bool> seen;
  for (auto& node : graph.nodes()) {
    int64_t b = 0;
    for (auto& name : node.params) {
      if (!seen[name]) seen[name] = true, b += bytes[name];
    }
    prefix[node.index + 1] = prefix[node.index] + b;
  }
  auto valid = graph.validCuts();
  std::vector<int> cuts;
  for (int k = 1; k < stages; ++k) {
    // The valid cut whose parameter prefix is nearest the target share.
    const double target = static_cast<double>(k) * prefix[n] / stages;
    cuts.push_back(nearestValidCut(valid, cuts.empty() ? 0 : cuts.back(), stages - 1 - k,
                                   [&](int c) { return std::abs(prefix[c] - target); }));
  }
  return cuts;
}

std::vector<int> layerBoundaries(const OpGraph& graph) {
  const int n = graph.numNodes();
  const auto block = blockOfNodes(graph);
  std::map<int, int> first, last;  // block -> its first and last node
  for (int j = 0; j < n; ++j) {
    if (block[j] < 0) continue;
    first.emplace(block[j], j);
    last[block[j]] = j;
  }
  // Layer boundaries: each block's first node, and the node after the last block.
  std::vector<int> bounds{0};
  for (auto& [b, j] : first) {
    if (j > bounds.back()) bounds.push_back(j);
  }
  if (!last.empty() && last.rbegin()->second + 1 < n) bounds.push_back(last.rbegin()->second + 1);
  bounds.push_back(n);
  // Snap inner boundaries to valid cuts (keeping them increasing).
  auto valid = graph.validCuts();
  std::vector<int> snapped{0};
  for (size_t i = 1; i + 1 < bounds.size(); ++i) {
    int best = -1;
    for (int c : valid) {
      if (c <= snapped.back() || c >= n) continue;
      if (best < 0 || std::abs(c - bounds[i]) < std::abs(best - bounds[i])) best = c;
    }
    if (best > snapped.back()) snapped.push_back(best);
  }
  snapped.push_back(n);
  return snapped;
}

std::vector<int> layerCuts(const OpGraph& graph, const Profile& profile, int stages) {
  const auto snapped = layerBoundaries(graph);
  const int layers = static_cast<int>(snapped.size()) - 1;
  SLUICE_CHECK(layers >= stages, PlanError,
               "partition: method layers splits between layers (the nodes before the first numbered block like h.0., "
               "each block, the nodes after the last), and this model has "
                   << layers << ", fewer than " << stages << " stages; use --method profile");
  std::vector<double> time(layers, 0);
  for (int l = 0; l < layers; ++l) {
    for (int j = snapped[l]; j < snapped[l + 1]; ++j) time[l] += profile.nodes[j].forwardSeconds + profile.nodes[j].backwardSeconds;
  }
  time.back() += profile.lossForwardSeconds + profile.lossBackwardSeconds;
  // best[s][l]: the smallest slowest-group time of layers [0, l) in s groups; from[s][l]: where the last group starts.
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(stages + 1, std::vector<double>(layers + 1, inf));
  std::vector<std::vector<int>> from(stages + 1, std::vector<int>(layers + 1, 0));
  best[0][0] = 0;
  for (int s = 1; s <= stages; ++s) {
    for (int l = s; l <= layers; ++l) {
      double group = 0;
      for (int k = l - 1; k >= s - 1; --k) {
        group += time[k];
        const double worst = std::max(best[s - 1][k], group);
        if (worst < best[s][l]) best[s][l] = worst, from[s][l] = k;
      }
    }
  }
  std::vector<int> cuts;
  for (int s = stages, l = layers; s > 1; --s) {
    l = from[s][l];
    cuts.insert(cuts.begin(), snapped[l]);
  }
  return cuts;
}

// The block number of each node: that of the first numbered module path it
// reads ("h.3.attn..." -> 3), or -1.
std::vector<int> blockOfNodes(const OpGraph& graph) {
  static const std::regex numbered(R"(^[A-Za-z_]+\.(\d+)\.)");
  std::vector<int> block(graph.numNodes(), -1);
  for (auto& n : graph.nodes()) {
    for (auto& name : n.params) {
      std::smatch m;
      if (std::regex_search(name, m, numbered)) {
        block[n.index] = std::stoi(m[1]);
        break;
      }
    }
  }
  return block;
}

}  // namespace sluice::partition
