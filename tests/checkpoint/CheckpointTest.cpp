// Checkpoint files on one rank (Communicator::self()): the tensor container,
// the commit protocol (manifest and `latest` last, keep_latest_k), loading by
// parameter name, and the refusals; and the supervisor's reading of launcher
// output (root cause, noise). Multi-rank checkpoints, restarts and resume
// into other layouts are tested on real ranks in tests/cli/checkpoint.sh.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/Communicator.h"
#include "core/Error.h"
#include "core/Files.h"
#include "core/TensorFile.h"
#include "checkpoint/Checkpoint.h"
#include "launch/Supervisor.h"

namespace sluice {
namespace {
namespace fs = std::filesystem;

struct TempDir {
  fs::path path;
  TempDir() {
    char tmpl[] = "/tmp/sluice_ckpt_XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path); }
};

TEST(TensorFile, RoundTripsDtypesShapesAndNames) {
  std::map<std::string, torch::Tensor> in{
      {"h.0.attn.c_attn.weight", torch::randn({3, 4})},
      {"steps", torch::tensor({int64_t{7}, int64_t{-2}})},
      {"rng", torch::randint(0, 255, {16}, torch::kUInt8)},
      {"scalar", torch::tensor(2.5, torch::kDouble)},
      {"empty", torch::zeros({0, 3})},
      {"view", torch::arange(12, torch::kFloat).view({3, 4}).t()},  // not contiguous
  };
  auto out = decodeTensors(encodeTensors(in), "test");
  ASSERT_EQ(out.size(), in.size());
  for (auto& [name, t] : in) {
    ASSERT_TRUE(out.count(name)) << name;
    EXPECT_EQ(out[name].scalar_type(), t.scalar_type()) << name;
    EXPECT_TRUE(torch::equal(out[name], t)) << name;
  }
}

TEST(TensorFile, TruncatedOrForeignBytesAreErrors) {
  const auto bytes = encodeTensors({{"w", torch::randn({8})}});
  for (size_t cut : {size_t{0}, size_t{5}, size_t{20}, bytes.size() - 1}) {
    try {
      decodeTensors(bytes.substr(0, cut), "f.tensors");
      ADD_FAILURE() << "decoded " << cut << " of " << bytes.size() << " bytes";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("f.tensors"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(decodeTensors(bytes + "x", "f"), Error);
  EXPECT_THROW(decodeTensors(std::string(64, 'z'), "f"), Error);
}

CheckpointLayout layoutOf(const std::string& embd) {
  CheckpointLayout l;
  l.stages = 1;
  l.cuts = {};
  l.graphHash = "abc";
  l.model = {{"name", "gpt"}, {"embd", embd}};
  return l;
}

RankState stateAt(float value) {
  RankState s;
  s.tensors["w"] = torch::full({4}, value);
  s.tensors["b"] = torch::full({2}, -value);
  optim::AdamState a;
  a.expAvg = torch::full({4}, value / 10);
  a.expAvgSq = torch::full({4}, value / 100);
  a.step = static_cast<int64_t>(value);
  s.adam["w"] = a;
  s.rng = torch::randint(0, 255, {8}, torch::kUInt8);
  return s;
}

TEST(Checkpoint, SavesCommitsAndLoadsByName) {
  TempDir dir;
  auto self = Communicator::self();
  for (int step : {2, 4, 6}) {
    CheckpointInfo info;
    info.step = step;
    info.planBytes = "plan-bytes";
    saveCheckpoint(dir.path.string(), info, layoutOf("64"), stateAt(static_cast<float>(step)), 0, self,
                   /*keepLatestK=*/2);
  }
  // keep_latest_k 2: step 2 removed; `latest` names step 6.
  EXPECT_FALSE(fs::exists(dir.path / "step_00000002"));
  EXPECT_TRUE(fs::exists(dir.path / "step_00000004" / "manifest.yaml"));
  EXPECT_EQ(readFile((dir.path / "latest").string()), "step_00000006\n");

  auto m = openCheckpoint((dir.path / "step_00000006").string(), layoutOf("64"));
  EXPECT_EQ(m.step, 6);
  EXPECT_TRUE(m.layout == layoutOf("64"));
  EXPECT_EQ(checkpointPlanBytes(m), "plan-bytes");
  auto want = stateAt(6);
  auto got = loadCheckpoint(m, {"b", "w"}, {"w"}, 0, /*sameLayout=*/true);
  EXPECT_TRUE(torch::equal(got.tensors.at("w"), want.tensors.at("w")));
  EXPECT_TRUE(torch::equal(got.tensors.at("b"), want.tensors.at("b")));
  EXPECT_TRUE(torch::equal(got.adam.at("w").expAvgSq, want.adam.at("w").expAvgSq));
  EXPECT_EQ(got.adam.at("w").step, 6);
  EXPECT_TRUE(got.rng.defined());
  // Another layout: no generator state (it belongs to the old rank).
  EXPECT_FALSE(loadCheckpoint(m, {"w"}, {"w"}, 0, /*sameLayout=*/false).rng.defined());
}

// What a kill during a save leaves: files without a manifest. Not loadable,
// never counted for keep_latest_k, and `latest` still names the previous one.
TEST(Checkpoint, TornAndForeignCheckpointsAreRefused) {
  TempDir dir;
  auto self = Communicator::self();
  CheckpointInfo info;
  info.step = 3;
  saveCheckpoint(dir.path.string(), info, layoutOf("64"), stateAt(3), 0, self, 1);
  const auto good = (dir.path / "step_00000003").string();
  fs::create_directories(dir.path / "step_00000005");
  writeFileDurably((dir.path / "step_00000005" / "rank_0.tensors").string(), "partial");
  auto expectRefusal = [](const std::function<void()>& f, const std::string& text) {
    try {
      f();
      ADD_FAILURE() << "accepted; expected: " << text;
    } catch (const CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
    }
  };
  expectRefusal([&] { openCheckpoint((dir.path / "step_00000005").string(), layoutOf("64")); },
                "is incomplete or not a checkpoint (no manifest.yaml)");
  expectRefusal([&] { openCheckpoint(good, layoutOf("32")); },
                "was made for another model: model.embd is 64 there and 32 in this config");
  // A flipped byte: same size, caught by the checksum when the file is read.
  const auto file = (fs::path(good) / "rank_0.tensors").string();
  auto bytes = readFile(file);
  bytes[bytes.size() / 2] ^= 0x40;
  writeFileDurably(file, bytes);
  auto m = openCheckpoint(good, layoutOf("64"));
  expectRefusal([&] { loadCheckpoint(m, {"w"}, {}, 0, true); }, "rank_0.tensors is corrupted: checksum");
  // Truncated: caught on open.
  writeFileDurably(file, bytes.substr(0, bytes.size() - 10));
  expectRefusal([&] { openCheckpoint(good, layoutOf("64")); }, "rank_0.tensors is truncated");
}

// Issue 53: a hand-edited manifest cannot move training to another step
// (step: 3 in step_4's directory, or step: -7), name a file outside the
// checkpoint (../../other/rank_1.tensors), or make a file that lacks a
// tensor it claims end in a library's "map::at".
TEST(Checkpoint, EditedManifestsAreRefusedWithTheirReason) {
  TempDir dir;
  auto self = Communicator::self();
  CheckpointInfo info;
  info.step = 4;
  saveCheckpoint(dir.path.string(), info, layoutOf("64"), stateAt(4), 0, self, 1);
  const auto good = dir.path / "step_00000004";
  const auto manifest = (good / "manifest.yaml").string();
  const std::string original = readFile(manifest);
  auto refusal = [&](const std::string& from, const std::string& to) -> std::string {
    std::string edited = original;
    const auto at = edited.find(from);
    EXPECT_NE(at, std::string::npos) << from << " not in:\n" << original;
    if (at == std::string::npos) return "";
    edited.replace(at, from.size(), to);
    writeFileDurably(manifest, edited);
    try {
      auto m = openCheckpoint(good.string(), layoutOf("64"));
      loadCheckpoint(m, {"b", "w"}, {"w"}, 0, true);
    } catch (const CheckpointError& e) {
      return e.what();
    }
    return "accepted";
  };
  EXPECT_NE(refusal("step: 4", "step: 3").find("says step 3 but the checkpoint is step_00000004"), std::string::npos);
  EXPECT_NE(refusal("step: 4", "step: -7").find("says step -7, not a step count"), std::string::npos);
  EXPECT_NE(refusal("name: rank_0.tensors", "name: ../../other/rank_0.tensors")
                .find("names the file '../../other/rank_0.tensors' for rank 0"),
            std::string::npos);
  writeFileDurably(manifest, original);
  auto m = openCheckpoint(good.string(), layoutOf("64"));
  m.files[0].tensors.push_back("ghost");
  try {
    loadCheckpoint(m, {"ghost"}, {}, 0, true);
    ADD_FAILURE() << "a tensor the file lacks was loaded";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("rank_0.tensors lacks tensor/ghost, which manifest.yaml says it holds"),
              std::string::npos)
        << e.what();
  }
}

TEST(Supervisor, NamesTheRootCauseAndDropsLauncherNoise) {
  EXPECT_EQ(rootCauseOf("[rank 1] error: this rank failed: SLUICE_FAULT: injected failure"),
            "rank 1: SLUICE_FAULT: injected failure");
  EXPECT_EQ(rootCauseOf("mpirun noticed that process rank 0 with PID 4242 on node vm exited on signal 9 (Killed)."),
            "rank 0 on vm died on signal 9 (Killed)");
  EXPECT_EQ(rootCauseOf("[rank 1] step 3/6  loss 4.8312"), "");
  EXPECT_TRUE(isLauncherNoise("[vm:01234] [[1234,0],0] ORTE_ERROR_LOG: Data unpack had inadequate space in file "
                              "../../../orte/util/show_help.c at line 501",
                              false));
  EXPECT_TRUE(isLauncherNoise("mpirun: Forwarding signal 10 to job", false));
  EXPECT_FALSE(isLauncherNoise("[rank 0] checkpoint: runs/x/checkpoints/step_00000005 (step 5)", false));
}

}  // namespace
}  // namespace sluice
