// The `sluice` command line and the checks main.cpp makes before anything
// starts: flags of another command, an unknown command, each command's help,
// a hostfile read from disk, a missing trace, a checkpoint.dir that is a file.
// (main.cpp turns each ConfigError into its message and exit 2;
// tests/cli/bad_config.sh checks that on the real binary for a few of them.)
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/Error.h"
#include "cli/CommandLine.h"
#include "config/Config.h"
#include "launch/Hostfile.h"
#include "launch/OutputLock.h"
#include "telemetry/TimelineSvg.h"

namespace sluice {
namespace {

constexpr auto npos = std::string::npos;

// parseCommandLine's ConfigError, or "" when it parsed.
std::string errorOfArgs(std::vector<std::string> args) {
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  try {
    parseCommandLine(static_cast<int>(argv.size()), argv.data());
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

template <class F>
std::string configErrorOf(F f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

void writeFile(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

TEST(CommandLine, AFlagOfAnotherCommandIsRefusedNamingTheCommand) {
  EXPECT_NE(errorOfArgs({"sluice", "train", "c.yaml", "--budget-mb", "10"})
                .find("sluice: train does not take --budget-mb (another command does"),
            npos);
  EXPECT_NE(errorOfArgs({"sluice", "train", "c.yaml", "-o", "x.pb"}).find("sluice: train does not take -o"), npos);
  EXPECT_NE(errorOfArgs({"sluice", "frobnicate", "c.yaml"}).find("sluice: unknown command 'frobnicate'"), npos);
  // Issue 53: with --help too (CLI11 printed the general help and exited 0).
  EXPECT_NE(errorOfArgs({"sluice", "frobnicate", "--help"}).find("sluice: unknown command 'frobnicate'"), npos);
  EXPECT_EQ(errorOfArgs({"sluice", "partition", "c.yaml", "--profile", "p.pb", "-o", "x.pb", "--budget-mb", "10"}), "");
}

TEST(CommandLine, EachCommandsHelpNamesItsOwnFlags) {
  std::vector<std::string> args{"sluice", "partition", "--help"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  testing::internal::CaptureStdout();
  const auto parsed = parseCommandLine(static_cast<int>(argv.size()), argv.data());
  const std::string help = testing::internal::GetCapturedStdout();
  EXPECT_FALSE(parsed) << "help is printed, not a command to run";
  EXPECT_TRUE(help.rfind("Usage: sluice partition ", 0) == 0 || help.find("\nUsage: sluice partition ") != npos) << help;
  EXPECT_NE(help.find("--budget-mb"), npos) << help;
  EXPECT_EQ(help.find("--trace"), npos) << "partition's help lists train's --trace:\n" << help;
}

// readHostfile names the file (parseHostfile's line errors: ClusterLaunchTest).
TEST(Hostfile, FilesAreNamedInTheirErrors) {
  const std::string dir = testing::TempDir();
  writeFile(dir + "empty_hosts", "");
  writeFile(dir + "dup_hosts", "h1 slots=1\nh2 slots=1\nh1 slots=1\n");
  writeFile(dir + "zero_hosts", "h1 slots=2\nh2 slots=0\n");
  writeFile(dir + "key_hosts", "h1 slots=2 gpus=4\n");
  const auto error = [](const std::string& path) { return configErrorOf([&] { readHostfile(path); }); };
  EXPECT_NE(error(dir + "nope_hosts").find("hostfile error: " + dir + "nope_hosts does not exist"), npos);
  EXPECT_NE(error(dir + "empty_hosts").find("hostfile error: " + dir + "empty_hosts lists no hosts"), npos);
  EXPECT_NE(error(dir + "dup_hosts").find("hostfile error: " + dir + "dup_hosts:3: host h1 is listed twice"), npos);
  EXPECT_NE(error(dir + "zero_hosts").find("hostfile error: " + dir + "zero_hosts:2: slots must be >= 1 for host h2, got 0"),
            npos);
  EXPECT_NE(error(dir + "key_hosts").find("hostfile error: " + dir + "key_hosts:1: unknown entry 'gpus=4'"), npos);
}

TEST(TraceShow, AMissingTraceIsNamed) {
  const std::string path = testing::TempDir() + "nope.json";
  EXPECT_NE(configErrorOf([&] { timelineSvg(path); }).find("the trace '" + path + "' does not exist"), npos);
}

// A checkpoint.dir that is a file is found when the job locks its outputs,
// before any work; the output folder that lock made is gone again.
TEST(OutputLock, ACheckpointDirThatIsAFileIsRefusedAndNothingStays) {
  const std::string dir = testing::TempDir();
  writeFile(dir + "a_file", "");
  auto config = Config::fromYamlText("job: {output_dir: " + dir + "out}\nmodel: {name: gpt}\n",
                                     {"checkpoint.interval=5", "checkpoint.dir=" + dir + "a_file"});
  EXPECT_NE(configErrorOf([&] { lockJobOutputs(config, false); })
                .find("checkpoint.dir '" + dir + "a_file' is a file, not a directory"),
            npos);
  EXPECT_FALSE(std::filesystem::exists(dir + "out")) << "the refused job left its output folder";
  // Issue 53: also with checkpoint.interval 0, since a stop signal writes a checkpoint there.
  config.checkpoint.interval = 0;
  EXPECT_NE(configErrorOf([&] { lockJobOutputs(config, false); }).find("is a file, not a directory"), npos);
}

// Issue 53: one job, one tree. While job A holds its output directory, a job
// whose checkpoint.dir lies inside it, or whose output directory contains
// it, is refused naming A's directory; once A ends both may start. A job
// that would start afresh over an earlier run's metrics or checkpoints is
// refused unless it resumes or says job.overwrite: true.
TEST(OutputLock, JobsDoNotNestInEachOthersDirectoriesOrOverwriteARun) {
  namespace fs = std::filesystem;
  const fs::path root = fs::path(testing::TempDir()) / "nest";
  fs::remove_all(root);
  auto config = [&](const std::string& out, std::vector<std::string> more = {}) {
    more.push_back("job.output_dir=" + (root / out).string());
    return Config::fromYamlText("model: {name: gpt}\n", more);
  };
  {
    auto a = lockJobOutputs(config("a"), false);  // job A, live
    const auto inside = configErrorOf(
        [&] { lockJobOutputs(config("b", {"checkpoint.dir=" + (root / "a" / "ck").string()}), false); });
    EXPECT_NE(inside.find("checkpoint.dir '" + (root / "a" / "ck").string() + "' is inside '" + (root / "a").string() +
                          "', which another sluice job is using (pid "),
              npos)
        << inside;
    const auto around = configErrorOf([&] { lockJobOutputs(config(""), false); });
    EXPECT_NE(around.find("is around '" + (root / "a").string() + "'"), npos) << around;
  }
  EXPECT_NO_THROW(lockJobOutputs(config("", {"job.overwrite=true"}), false)) << "A has ended: its lock file is stale";
  fs::create_directories(root / "run");
  writeFile((root / "run" / "metrics.jsonl").string(), "{\"step\": 0}\n");
  const auto earlier = configErrorOf([&] { lockJobOutputs(config("run"), false); });
  EXPECT_NE(earlier.find("holds an earlier run (" + (root / "run" / "metrics.jsonl").string()), npos) << earlier;
  EXPECT_NE(earlier.find("set job.overwrite: true to replace the earlier run"), npos) << earlier;
  EXPECT_NE(earlier.find("it has no checkpoint to resume (checkpoint.resume: auto found none in "), npos) << earlier;
  EXPECT_NO_THROW(lockJobOutputs(config("run"), /*resumes=*/true));
  EXPECT_NO_THROW(lockJobOutputs(config("run", {"job.overwrite=true"}), false));
  fs::remove_all(root);
}

}  // namespace
}  // namespace sluice
