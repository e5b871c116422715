// Hostfiles, rank placement across hosts, the mpirun / srun / sbatch commands
// of `sluice launch`, and the root cause of a failure on another host.
#include <gtest/gtest.h>

#include <string>

#include "core/Error.h"
#include "launch/ClusterLaunch.h"
#include "launch/Hostfile.h"
#include "launch/Supervisor.h"

namespace sluice {
namespace {

std::string errorOf(const std::string& text) {
  try {
    parseHostfile(text, "hosts");
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(Hostfile, ParsesHostsSlotsAndComments) {
  auto hosts = parseHostfile("# cluster\n\nnode1 slots=4   # the head\nnode2 slots=2 max_slots=8\nnode3\n", "hosts");
  ASSERT_EQ(hosts.size(), 3u);
  EXPECT_EQ(hosts[0].host, "node1");
  EXPECT_EQ(hosts[0].slots, 4);
  EXPECT_EQ(hosts[0].line, 3);
  EXPECT_EQ(hosts[1].slots, 2);
  EXPECT_EQ(hosts[2].slots, 1);  // no slots= means 1
}

TEST(Hostfile, ErrorsNameTheLine) {
  EXPECT_NE(errorOf("a slots=1\nb slots=1\na slots=2\n").find("hosts:3: host a is listed twice"), std::string::npos);
  EXPECT_NE(errorOf("a slots=1\nb slots=0\n").find("hosts:2: slots must be >= 1 for host b, got 0"), std::string::npos);
  EXPECT_NE(errorOf("a slots=1 gpus=2\n").find("hosts:1: unknown entry 'gpus=2'"), std::string::npos);
  EXPECT_NE(errorOf("a slots=two\n").find("hosts:1: slots must be an integer, got 'two'"), std::string::npos);
  EXPECT_NE(errorOf("a slots=4 max_slots=2\n").find("hosts:1: max_slots (2) is below slots (4)"), std::string::npos);
  EXPECT_NE(errorOf("# nothing\n\n").find("hosts lists no hosts"), std::string::npos);
  EXPECT_THROW(readHostfile("/nonexistent/hosts"), ConfigError);
}

// Issue 53: a host name that mpirun would read as an option, a key given
// twice, and slot counts whose sum would overflow are refused.
TEST(Hostfile, OptionsKeysTwiceAndHugeSlotsAreRefused) {
  EXPECT_NE(errorOf("--oversubscribe\n").find("hosts:1: '--oversubscribe' is not a host name"), std::string::npos)
      << errorOf("--oversubscribe\n");
  EXPECT_NE(errorOf("a;rm slots=1\n").find("is not a host name"), std::string::npos);
  EXPECT_NE(errorOf("a slots=2 slots=4\n").find("hosts:1: slots is given twice for host a"), std::string::npos)
      << errorOf("a slots=2 slots=4\n");
  EXPECT_NE(errorOf("a slots=2147483647\nb slots=2147483647\n").find("hosts:1: slots=2147483647 for host a is more"),
            std::string::npos);
  EXPECT_EQ(errorOf("node-1.example.org slots=65536\n10.0.0.2\n[fe80::1] slots=2\n"), "");
}

TEST(ClusterLaunch, RanksFillHostsInOrderSoPipelineNeighboursShareAHost) {
  auto placement = placeRanks(parseHostfile("h1 slots=2\nh2 slots=2\n", "hosts"), 2, 2);
  ASSERT_EQ(placement.size(), 4u);
  // rank = replica x stages + stage: each host runs one whole replica.
  EXPECT_EQ(placement[0].host, "h1");
  EXPECT_EQ(placement[1].host, "h1");
  EXPECT_EQ(placement[1].stage, 1);
  EXPECT_EQ(placement[1].replica, 0);
  EXPECT_EQ(placement[2].host, "h2");
  EXPECT_EQ(placement[2].stage, 0);
  EXPECT_EQ(placement[2].replica, 1);
  EXPECT_EQ(placementTable(placement),
            "  host h1: (stage 0, replica 0) (stage 1, replica 0)\n  host h2: (stage 0, replica 1) (stage 1, replica 1)\n");
  // Uneven slots: 4 stages over 3 + 1 slots.
  auto uneven = placeRanks(parseHostfile("a slots=3\nb slots=1\nc slots=4\n", "hosts"), 4, 1);
  EXPECT_EQ(uneven[2].host, "a");
  EXPECT_EQ(uneven[3].host, "b");
  try {
    placeRanks(parseHostfile("h1 slots=2\nh2 slots=1\n", "hosts"), 2, 2);
    FAIL() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("pipeline.stages (2) x pipeline.data_parallel (2) = 4 ranks, but the hostfile "
                                         "has 2 + 1 = 3 slots on 2 hosts"),
              std::string::npos)
        << e.what();
  }
}

Config clusterConfig() {
  auto c = Config::fromYamlText(
      "pipeline: {stages: 2, data_parallel: 2, microbatches: 2}\n"
      "training: {global_batch_size: 16, micro_batch_size: 4}\n"
      "optimizer: {name: dist_adam}\n"
      "cluster: {hostfile: /etc/hosts.sluice, interface: eth1, rsh_agent: /usr/bin/ssh, env: {A: '1', B: x y},\n"
      "          extra_mpirun_args: [--mca, btl_tcp_links, '2'], master_port: 1234}\n");
  return c;
}

TEST(ClusterLaunch, ClusterKeysAreChecked) {
  auto messageOf = [](const std::string& yaml) {
    try {
      Config::fromYamlText(yaml);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(messageOf("cluster: {launcher: pbs}").find("cluster.launcher must be auto, mpirun or slurm, got 'pbs'"),
            std::string::npos);
  EXPECT_NE(messageOf("cluster: {env: {'1X': a}}").find("cluster.env: '1X' is not a variable name"), std::string::npos);
  EXPECT_NE(messageOf("cluster: {extra_mpirun_args: 3}").find("expected a list of strings"), std::string::npos);
  EXPECT_NE(messageOf("cluster: {master_port: 70000}").find("cluster.master_port must be in [1, 65535]"),
            std::string::npos);
  EXPECT_NE(messageOf("cluster: {hostfile: h, slots: 2}").find("slots"), std::string::npos);  // unknown key
}

TEST(ClusterLaunch, MpirunCommand) {
  auto c = clusterConfig();
  LaunchRequest r{"/opt/sluice", "/cfg/job.yaml", {"training.steps=5"}, false};
  auto plan = mpirunClusterPlan(c, parseHostfile("n1 slots=2\nn2 slots=2\n", "hosts"), r);
  EXPECT_EQ(commandLine(plan),
            "mpirun -np 4 --hostfile /etc/hosts.sluice --map-by slot --bind-to none --mca plm_rsh_agent /usr/bin/ssh "
            "--mca btl_tcp_if_include eth1 --mca oob_tcp_if_include eth1 -x MASTER_ADDR=n1 -x MASTER_PORT=1234 "
            "-x A=1 -x 'B=x y' --mca btl_tcp_links 2 /opt/sluice worker /cfg/job.yaml --set training.steps=5");
  EXPECT_THROW(mpirunClusterPlan(c, parseHostfile("n1 slots=3\n", "hosts"), r), ConfigError);
}

TEST(ClusterLaunch, SrunCommandAndBatchScript) {
  auto c = clusterConfig();
  c.cluster.env.erase("B");
  LaunchRequest r{"/opt/sluice", "/cfg/job.yaml", {}, false};
  EXPECT_EQ(commandLine(srunPlan(c, 2, r)),
            "srun --mpi=pmix -N 2 -n 4 --kill-on-bad-exit=1 "
            "--export=ALL,MASTER_PORT=1234,OMPI_MCA_btl_tcp_if_include=eth1,A=1 /opt/sluice worker /cfg/job.yaml");
  EXPECT_THROW(srunPlan(c, 5, r), ConfigError);  // more nodes than ranks
  c.cluster.nodes = 3;
  EXPECT_EQ(slurmNodes(c), 3);
  const std::string script = sbatchScript(c, 2, r);
  EXPECT_NE(script.find("#SBATCH --nodes=2\n#SBATCH --ntasks=4\n"), std::string::npos) << script;
  EXPECT_NE(script.find("#SBATCH --signal=B:USR1@120\n"), std::string::npos);
  EXPECT_NE(script.find("exec /opt/sluice launch /cfg/job.yaml --set cluster.launcher=slurm --set cluster.nodes=2\n"),
            std::string::npos)
      << script;
}

// Issue 53: the batch script's #SBATCH --output line (read by Slurm, not
// the shell): a path with spaces is double-quoted, one with a newline, a
// double quote or a % is refused (a newline used to write a shell command
// into the script).
TEST(ClusterLaunch, TheBatchScriptsOutputLineCannotBeBroken) {
  auto c = clusterConfig();
  LaunchRequest r{"/opt/sluice", "/cfg/job.yaml", {}, false};
  c.job.outputDir = "/runs/my job";
  EXPECT_NE(sbatchScript(c, 2, r).find("#SBATCH --output=\"/runs/my job/slurm-%j.out\"\n"), std::string::npos)
      << sbatchScript(c, 2, r);
  for (const std::string bad : {"/runs/x\ntouch /tmp/pwned", "/runs/x\"y", "/runs/100%"}) {
    c.job.outputDir = bad;
    try {
      sbatchScript(c, 2, r);
      ADD_FAILURE() << "accepted " << bad;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("#SBATCH --output line cannot carry"), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << "the message shows the newline escaped";
    }
  }
}

TEST(Supervisor, NamesTheHostOfTheRootCause) {
  EXPECT_EQ(rootCauseOf("[rank 3 on node2] error: this rank failed: boom"), "rank 3 on node2: boom");
  EXPECT_EQ(rootCauseOf("srun: error: node2: task 3: Killed"), "rank 3 on node2: Killed");
  EXPECT_EQ(rootCauseOf("srun: error: node1: tasks 0-2: Terminated"), "rank 0 on node1: Terminated");
  EXPECT_TRUE(isLauncherNoise("slurmstepd: error: *** STEP 7.0 ON node1 CANCELLED AT 2026-11-22T10:00:00 ***", false));
  EXPECT_TRUE(isLauncherNoise("srun: Job step aborted: Waiting up to 32 seconds for job step to finish.", false));
}

}  // namespace
}  // namespace sluice
