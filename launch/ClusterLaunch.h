// launch::ClusterLaunch: `sluice launch`, the ranks of one job started on
// several machines by Open MPI's mpirun (with a hostfile) or Slurm's srun.
//
// World layout: rank = replica x stages + stage (Note [2-D layout] in
// Trainer.cpp), and ranks fill the hosts in hostfile order, each up to its
// slots, so a replica's consecutive stages (pipeline neighbours, which trade
// activations and gradients every micro-batch) share a host whenever its
// slots allow; only the data-parallel reductions and the pipeline edges at
// host boundaries cross the network. The world must fit the slots.
//
// The commands (printed by `sluice launch`, and only printed with --dry-run):
//   mpirun -np W --hostfile F --map-by slot --bind-to none
//          --mca plm_rsh_agent AGENT [--mca btl_tcp_if_include IF --mca oob_tcp_if_include IF]
//          -x MASTER_ADDR=<first host> -x MASTER_PORT=P [-x K=V]... [extra args]
//          SLUICE worker CONFIG [--set k=v]...
//   srun --mpi=pmix -N NODES -n W --kill-on-bad-exit=1 --export=ALL,MASTER_PORT=P[,K=V]...
//          SLUICE worker CONFIG [--set k=v]...
// SLUICE and CONFIG are absolute paths: every host must see them at the same
// path (a shared file system), as it must see job.output_dir and
// checkpoint.dir.
#pragma once

#include <string>
#include <vector>

#include "config/Config.h"
#include "launch/Hostfile.h"
#include "launch/Launch.h"

namespace sluice {

struct RankHost {
  int rank = 0, stage = 0, replica = 0;
  std::string host;
};

// Throws ConfigError with the arithmetic when the world does not fit the slots.
std::vector<RankHost> placeRanks(const std::vector<HostSlots>& hosts, int stages, int dataParallel);
// One line per host: its ranks as (stage, replica).
std::string placementTable(const std::vector<RankHost>& placement);

enum class LaunchEngine { Mpirun, Slurm };
bool inSlurmAllocation();  // SLURM_JOB_ID is set
LaunchEngine chooseEngine(const Config& c);  // cluster.launcher; auto = slurm inside an allocation

struct LaunchRequest {
  std::string self;        // the sluice executable (absolute)
  std::string configPath;  // absolute
  std::vector<std::string> overrides;
  bool asRoot = false;
};

LaunchPlan mpirunClusterPlan(const Config& c, const std::vector<HostSlots>& hosts, const LaunchRequest& r);
// Nodes for srun: cluster.nodes, else the hosts of cluster.hostfile that the
// world uses, else the allocation's; a ConfigError naming the keys otherwise.
int slurmNodes(const Config& c);
LaunchPlan srunPlan(const Config& c, int nodes, const LaunchRequest& r);
// A batch script that runs `sluice launch` (so srun) in its allocation, with
// SIGUSR1 two minutes before the time limit (stop, checkpoint, exit 0).
std::string sbatchScript(const Config& c, int nodes, const LaunchRequest& r);

// The plan as one shell command line (quoted where needed).
std::string commandLine(const LaunchPlan& plan);

}  // namespace sluice
