// partition::profileGraph and the measurements around it: how a Profile
// (partition/Profile.h, which says what each field holds and how it is
// measured) is made, from a graph and its inputs on this process and the
// ranks of a communicator.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <string>
#include <vector>

#include "core/Communicator.h"
#include "core/OpGraph.h"
#include "partition/Profile.h"

namespace sluice::partition {

struct ProfileOptions {
  int warmup = 3;
  int iterations = 15;
  // Node times from whole forward and backward passes (ContextTiming.h) rather
  // than from each node run alone; the isolated pass still gives the memory
  // facts and each node's weight-gradient share.
  bool inContext = true;
  // The loss on the graph's first output (optional): with inContext, timed
  // inside the passes too, giving Profile::loss{Forward,Backward}Seconds.
  std::function<at::Tensor(const at::Tensor&)> loss;
  // Ranks profiling at once: called right before the whole passes (a barrier),
  // so that every rank's passes run beside the others' passes, as training's
  // stages run beside each other, and not beside their isolated timing or
  // nothing (unaligned, one profile's ranks differed by 15%).
  std::function<void()> startTogether;
};

// inputs: one tensor per graph input, in graph input order (data, params, buffers).
Profile profileGraph(const OpGraph& graph, const std::vector<at::Tensor>& inputs, const ProfileOptions& options = {});
struct LossProfile {
  double forwardSeconds = 0, backwardSeconds = 0;  // medians
  int64_t savedBytes = 0, workspaceBytes = 0;
};
// loss(output) with output made a leaf: times, saved bytes and workspace.
LossProfile profileLoss(const std::function<at::Tensor(const at::Tensor&)>& loss, const at::Tensor& output,
                        const ProfileOptions& options = {});
// Averages node and loss times over the ranks of comm (collective; every rank
// must have profiled the same graph). Profiling on every rank at once loads the
// machine as training does (shared caches, memory bandwidth, clock boost).
void averageOverRanks(Profile& profile, const Communicator& comm);
MachineProfile measureMachine(const Communicator& comm, const std::string& dir);

}  // namespace sluice::partition
