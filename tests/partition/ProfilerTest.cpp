// The node-by-node profiler: per-node saved bytes, parameter bytes, a
// protobuf round trip keyed by the graph hash. No timing is asserted.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "core/Error.h"
#include "memory/SavedTensorHooks.h"
#include "partition/Profile.h"
#include "tests/TestUtil.h"

namespace sluice::partition {
namespace {

struct Fixture {
  models::Gpt gpt{nullptr};
  torch::Tensor tokens;
  std::unique_ptr<OpGraph> graph;
  Profile profile;
  Fixture() {
    torch::manual_seed(0);
    gpt = models::Gpt(test::tinyGpt(2));
    tokens = torch::randint(0, 64, {2, 8}, torch::kLong);
    graph = std::make_unique<OpGraph>(test::captureGpt(gpt, 2, 8));
    profile = profileGraph(*graph, graphInputs(*graph, *gpt, {tokens}), {1, 3});
  }
};

TEST(Profiler, SavedAndParameterBytesPerNode) {
  Fixture f;
  auto& g = *f.graph;
  ASSERT_EQ(static_cast<int>(f.profile.nodes.size()), g.numNodes());
  EXPECT_EQ(f.profile.graphHash, g.hash());
  // The first matmul (x @ W^T of block 0's attention input projection) saves
  // its activation input; W^T is a view of a parameter and does not count.
  for (auto& n : g.nodes()) {
    if (n.op != "aten::matmul") continue;
    EXPECT_EQ(f.profile.nodes[n.index].savedBytes, g.value(n.inputs[0]).bytes()) << "node " << n.index;
    break;
  }
  int64_t params = 0, profiled = 0;
  for (auto& in : g.inputs()) {
    if (in.kind != InputKind::Data) params += in.value.bytes();
  }
  for (auto& n : f.profile.nodes) profiled += n.paramBytes;
  EXPECT_EQ(profiled, params);
  for (auto& n : f.profile.nodes) {
    EXPECT_GE(n.forwardSeconds, 0);
    EXPECT_GE(n.backwardSeconds, 0);
    EXPECT_TRUE(n.recomputable) << n.op;  // the GPT has no random ops
  }
}

TEST(Profiler, TotalSavedBytesMatchAnEagerTrainingForward) {
  Fixture f;
  memory::SavedBytesCounter counter;
  for (auto& p : f.gpt->parameters()) counter.exclude(p);
  for (auto& b : f.gpt->buffers()) counter.exclude(b);
  torch::Tensor loss;
  {
    memory::SavedTensorScope scope(counter.factory());
    loss = f.gpt->forward(f.tokens).sum();
  }
  // Node by node, each node saves exactly what the same op saves in eager
  // mode, and storages shared between nodes count once in both.
  const double measured = static_cast<double>(counter.bytes()), profiled = static_cast<double>(f.profile.totalSaved());
  std::cout << "saved bytes: profile " << profiled << ", eager forward " << measured << std::endl;
  EXPECT_EQ(profiled, measured);
}

TEST(Profiler, RoundTripAndRefusals) {
  Fixture f;
  std::string path = testing::TempDir() + "/profile_roundtrip.pb";
  f.profile.save(path);
  auto back = Profile::load(path, f.graph->hash());
  ASSERT_EQ(back.nodes.size(), f.profile.nodes.size());
  for (size_t i = 0; i < back.nodes.size(); ++i) {
    EXPECT_EQ(back.nodes[i].op, f.profile.nodes[i].op);
    EXPECT_EQ(back.nodes[i].savedBytes, f.profile.nodes[i].savedBytes);
    EXPECT_DOUBLE_EQ(back.nodes[i].forwardSeconds, f.profile.nodes[i].forwardSeconds);
  }
  try {
    Profile::load(path, "0123456789abcdef");
    ADD_FAILURE() << "a profile of another graph was accepted";
  } catch (const GraphError& e) {
    EXPECT_NE(std::string(e.what()).find("another graph"), std::string::npos) << e.what();
  }
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), {});
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes.substr(0, 5);
  EXPECT_THROW(Profile::load(path), GraphError);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace sluice::partition
