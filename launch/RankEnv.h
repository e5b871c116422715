// launch::RankEnv: where this rank runs, and the torchrun names for it.
//
// discoverPlace() all-gathers the ranks' host names (a collective on the
// world communicator), so every rank knows every rank's host. Local rank,
// ranks on this host and node index come from the launcher that started the
// rank (Open MPI: OMPI_COMM_WORLD_LOCAL_RANK / _LOCAL_SIZE; Slurm:
// SLURM_LOCALID, SLURM_NODEID) where it says, else from the host names
// (nodes numbered in the order of their lowest rank). exportTorchrunNames()
// sets RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, NODE_RANK, GROUP_RANK,
// MASTER_ADDR (kept when the launcher set it; else rank 0's host) and
// MASTER_PORT (kept, else the given port) for user code and libraries.
// threadsForRank() is the rank's intra-op threads.
#pragma once

#include <string>
#include <vector>

#include "config/Config.h"
#include "core/Communicator.h"

namespace sluice {

struct RankPlace {
  int rank = 0, world = 1;
  int localRank = 0, localSize = 1;
  int nodeRank = 0, nodes = 1;
  std::string host;
  std::vector<std::string> hostOfRank;
  std::string launchedBy;  // "mpirun", "slurm" or "" (a single process)
};

RankPlace discoverPlace(const Communicator& world);
void exportTorchrunNames(const RankPlace& place, int defaultMasterPort);
// "rank 2 of 4 on host h2 (node 1 of 2, local rank 0 of 2; started by mpirun)"
std::string describePlace(const RankPlace& place);
// "RANK=2 LOCAL_RANK=0 ... MASTER_PORT=29500", as exported.
std::string torchrunNamesText();
// Threads each rank should use: config.job.threads_per_rank, else cores / ranks on this node.
int threadsForRank(const Config& config, int cores, int ranksOnNode);

}  // namespace sluice
