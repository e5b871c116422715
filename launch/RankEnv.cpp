#include "launch/RankEnv.h"

#include <algorithm>

#include <unistd.h>

#include <climits>
#include <cstdlib>

#include "core/Error.h"

namespace sluice {
namespace {

constexpr int kHostChars = 64;

int envInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

std::string thisHost() {
  char buf[HOST_NAME_MAX + 1] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "unknown";
  return buf;
}

}  // namespace

RankPlace discoverPlace(const Communicator& world) {
  RankPlace p;
  p.rank = world.rank();
  p.world = world.size();
  p.host = thisHost();
  // Host names as int64 codes (the communicator's all-gather takes tensors).
  auto mine = torch::zeros({kHostChars}, torch::kInt64);
  for (size_t i = 0; i < p.host.size() && i < kHostChars; ++i) mine[i] = static_cast<unsigned char>(p.host[i]);
  auto all = torch::zeros({p.world * kHostChars}, torch::kInt64);
  world.allGather(mine, all);
  auto codes = all.accessor<int64_t, 1>();
  std::vector<std::string> nodeOrder;
  for (int r = 0; r < p.world; ++r) {
    std::string h;
    for (int i = 0; i < kHostChars && codes[r * kHostChars + i] != 0; ++i) h += static_cast<char>(codes[r * kHostChars + i]);
    p.hostOfRank.push_back(h);
    bool seen = false;
    for (auto& n : nodeOrder) seen = seen || n == h;
    if (!seen) nodeOrder.push_back(h);
  }
  p.nodes = static_cast<int>(nodeOrder.size());
  int localRank = 0, localSize = 0;
  for (int r = 0; r < p.world; ++r) {
    if (p.hostOfRank[r] != p.host) continue;
    if (r < p.rank) ++localRank;
    ++localSize;
  }
  int nodeRank = 0;
  while (nodeOrder[nodeRank] != p.host) ++nodeRank;
  if (std::getenv("OMPI_COMM_WORLD_SIZE")) {
    p.launchedBy = "mpirun";
    p.localRank = envInt("OMPI_COMM_WORLD_LOCAL_RANK", localRank);
    p.localSize = envInt("OMPI_COMM_WORLD_LOCAL_SIZE", localSize);
    p.nodeRank = nodeRank;
  } else if (std::getenv("SLURM_PROCID")) {
    p.launchedBy = "slurm";
    p.localRank = envInt("SLURM_LOCALID", localRank);
    p.localSize = localSize;
    p.nodeRank = envInt("SLURM_NODEID", nodeRank);
  } else {
    p.localRank = localRank;
    p.localSize = localSize;
    p.nodeRank = nodeRank;
  }
  return p;
}

void exportTorchrunNames(const RankPlace& p, int defaultMasterPort) {
  setenv("RANK", std::to_string(p.rank).c_str(), 1);
  setenv("WORLD_SIZE", std::to_string(p.world).c_str(), 1);
  setenv("LOCAL_RANK", std::to_string(p.localRank).c_str(), 1);
  setenv("LOCAL_WORLD_SIZE", std::to_string(p.localSize).c_str(), 1);
  setenv("NODE_RANK", std::to_string(p.nodeRank).c_str(), 1);
  setenv("GROUP_RANK", std::to_string(p.nodeRank).c_str(), 1);
  setenv("MASTER_ADDR", p.hostOfRank.empty() ? p.host.c_str() : p.hostOfRank[0].c_str(), /*overwrite=*/0);
  setenv("MASTER_PORT", std::to_string(defaultMasterPort).c_str(), /*overwrite=*/0);
}

std::string describePlace(const RankPlace& p) {
  return "rank " + std::to_string(p.rank) + " of " + std::to_string(p.world) + " on host " + p.host + " (node " +
         std::to_string(p.nodeRank) + " of " + std::to_string(p.nodes) + ", local rank " + std::to_string(p.localRank) +
         " of " + std::to_string(p.localSize) + (p.launchedBy.empty() ? "" : "; started by " + p.launchedBy) + ")";
}

std::string torchrunNamesText() {
  std::string out;
  for (const char* name : {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "NODE_RANK", "GROUP_RANK",
                           "MASTER_ADDR", "MASTER_PORT"}) {
    const char* v = std::getenv(name);
    out += (out.empty() ? "" : " ") + std::string(name) + "=" + (v ? v : "");
  }
  return out;
}

int threadsForRank(const Config& config, int cores, int ranksOnNode) {
  if (config.job.threadsPerRank > 0) return config.job.threadsPerRank;
  return std::max(1, cores / std::max(1, ranksOnNode));
}

}  // namespace sluice
