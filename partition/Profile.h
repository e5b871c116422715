// partition::Profile: what the partitioner knows about a graph and a machine
// (torch-free: the partitioner reads it; partition/Profiler.h makes it).
//
// profileGraph() (Profiler.h) runs the graph node by node through the dispatcher. Each
// node runs on detached copies of its inputs (leaves), so its forward and its
// backward (torch::autograd::grad of its outputs w.r.t. those leaves) are
// timed alone; times are medians over `iterations` runs after `warmup` runs.
// Those isolated times give each node's weight-gradient share; the times the
// profile keeps come, by default, from whole passes (partition/ContextTiming.h:
// each node timed inside one forward and one backward of the whole graph).
// Memory comes from one more forward of the whole graph, run as training runs
// a stage (NodeProgram + StageMemory recording MemoryFacts): every storage
// autograd saves, attributed to the node that created it (Note [storage
// keys], memory/MemoryPlan.h), its savers and in-place writers, and each
// node's workspace (counting allocator: the most it allocates while it runs,
// in that forward or in its isolated backward). Parameter storages never
// count as saved (they are in param_bytes).
// measureMachine() times p2p between ranks 0 and 1 (if the communicator has
// two or more ranks; collective over it) and the swap tier (the file tier
// training uses, in `dir`, on every rank at once since they share the disk;
// skipped when dir is empty): its bandwidth, and how much slower a fixed
// compute load runs while a thread swaps beside it (per byte swapped).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "memory/MemoryFacts.h"

namespace sluice::partition {

struct NodeProfile {
  int index = 0;
  std::string op;
  double forwardSeconds = 0, backwardSeconds = 0;
  int64_t outputBytes = 0, savedBytes = 0, paramBytes = 0;
  bool recomputable = true;  // false: writes a parameter or buffer in place
  bool random = false;
  int64_t workspaceBytes = 0;
  // The part of backwardSeconds that computes parameter gradients (what a
  // zero-bubble schedule defers to W): backwardSeconds x the weight share
  // timed once per node with the two halves run separately.
  double weightBackwardSeconds = 0;
  // The most its forward allocates beyond what was allocated when it started
  // (its outputs and temporaries): what re-running it for a recompute costs.
  int64_t forwardWorkspaceBytes = 0;
};

struct MachineProfile {
  double p2pBandwidth = 0, p2pLatency = 0;  // bytes/s, s
  double swapWriteBandwidth = 0, swapReadBandwidth = 0;
  // Compute time lost per byte swapped (written and read back) while the I/O
  // thread works: the kernel's share of the cores (measured, see measureMachine).
  double swapCpuSecondsPerByte = 0;
  int threads = 1;
  std::string blas;
};

// Note [refill after a wait] (Refill.h): how much longer the forward and
// backward of nodes [firstNode, endNode) run when their rank waited
// RefillProfile::waitSeconds before them, as a share of their time.
struct RefillPiece {
  int firstNode = 0, endNode = 0;
  double share = 0;
};
// No pieces: not measured (then nothing is charged).
struct RefillProfile {
  double waitSeconds = 0;
  int rounds = 0;
  std::vector<RefillPiece> pieces;  // in node order, covering the graph

  // One line: "after a 20 ms wait, ...: nodes [0, 73) +3.0%; ... (6 rounds)".
  std::string describe() const;
};

struct Profile {
  std::string graphHash;
  int iterations = 0;
  std::vector<NodeProfile> nodes;
  MachineProfile machine;
  double lossForwardSeconds = 0, lossBackwardSeconds = 0;
  int64_t lossSavedBytes = 0, lossWorkspaceBytes = 0;
  // One micro-batch's input and target as the dataset gives them (every rank
  // holds the step's data for the whole step); 0: not known.
  int64_t dataBytes = 0;
  int microBatchSize = 0;
  memory::MemoryFacts facts;
  RefillProfile refill;  // Note [refill after a wait]; 0s when not measured

  double totalForward() const;
  double totalBackward() const;
  int64_t totalSaved() const;
  // Protobuf, written to a temp file then renamed. load() throws PlanError-like
  // GraphError on a truncated file and when expectedHash is given and differs.
  void save(const std::string& path) const;
  static Profile load(const std::string& path, const std::string& expectedHash = "");
  std::string summary(int topNodes = 12) const;  // a table a person can read
};

}  // namespace sluice::partition
