// Splitting an OpGraph into contiguous pipeline stages.
//
// Stage s runs nodes [cuts[s-1], cuts[s]) (with cuts[-1] = 0 and
// cuts[S-1] = numNodes). Its graph inputs are, in order:
//   1. boundary inputs: stage 0 gets the model's data inputs; stage s > 0
//      gets liveAcross(cuts[s-1]) from stage s-1, i.e. *every* value a later
//      node reads (residual streams, masks, position ids, ...), not only the
//      "current" activation;
//   2. the parameters and buffers its nodes read, in capture order; a
//      parameter that several nodes of the whole graph read (a tied
//      embedding) is one input per reading node of the stage, in node order,
//      so its name repeats in paramInputs (Note [reader inputs]: the trainer
//      can then give each reader its own gradient, summed in reader order
//      whatever the cuts, pipeline/RankWorker.h).
// Its outputs are liveAcross(its end cut), or the model outputs for the last
// stage, packed in one tuple (GraphFunction needs one output; StageModule
// unpacks it). A value live across several cuts is passed through the stages in
// between (an output that is the stage's own input). Constant-like nodes are
// cloned into every stage that reads them.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/OpGraph.h"

namespace sluice {

struct StageGraph {
  int index = 0;
  int firstNode = 0;  // inclusive
  int endNode = 0;    // exclusive
  std::shared_ptr<torch::jit::Graph> graph;
  std::vector<ValueInfo> boundaryInputs;  // graph inputs [0, boundaryInputs.size())
  std::vector<std::string> paramInputs;   // module paths (repeated per reader: see 2.); the graph inputs that follow
  std::vector<ValueInfo> outputs;
  // For each node of `graph` in order (its NodeProgram positions), the
  // OpGraph node index it was cloned from; -1 for cloned constants and the
  // output tuple.
  std::vector<int> nodeIndex;
};

// Throws GraphError when a cut is out of order, out of range, or invalid
// (a non-tensor value would cross it); the message lists nearby valid cuts.
std::vector<StageGraph> splitGraph(const OpGraph& graph, const std::vector<int>& cuts);

}  // namespace sluice
