// Note [random streams]: a random node's draws are a function of (seed, step,
// micro-batch, node) alone: the same on the whole graph and on its stages
// chained, whatever was drawn before; each component of the key changes them;
// without a key the generator is used as it is; compiled execution, which
// cannot key nodes, is refused for a graph that draws.
#include <gtest/gtest.h>

#include <ATen/Context.h>
#include <torch/csrc/jit/ir/ir.h>

#include "core/Capture.h"
#include "core/Error.h"
#include "core/GraphSplit.h"
#include "core/RandomStream.h"
#include "core/StageModule.h"
#include "tests/TestUtil.h"

namespace sluice {
namespace {

struct DropoutGpt {
  models::Gpt gpt{nullptr};
  std::unique_ptr<OpGraph> graph;
  torch::Tensor tokens;
  DropoutGpt() {
    torch::manual_seed(7);
    auto o = test::tinyGpt(2);
    o.dropout = 0.5;
    gpt = models::Gpt(o);
    graph = std::make_unique<OpGraph>(test::captureGpt(gpt, 2, 8));
    tokens = torch::randint(0, 64, {2, 8}, torch::kLong);
  }
  // The logits of the stages of `cuts` run one after the other (eager).
  torch::Tensor run(const std::vector<int>& cuts) {
    torch::NoGradGuard noGrad;
    std::vector<torch::Tensor> carry{tokens};
    for (auto& st : splitGraph(*graph, cuts)) {
      StageModule m(st.graph, "stage" + std::to_string(st.index), ExecMode::Eager, {}, st.nodeIndex);
      std::vector<torch::Tensor> in = carry;
      for (auto& p : tensorsByName(*gpt, st.paramInputs)) in.push_back(p);
      carry = m.forward(in);
    }
    return carry.at(0);
  }
};

TEST(RandomStream, KeyedDrawsDependOnTheKeyAloneNotOnTheSplitOrWhatRanBefore) {
  DropoutGpt m;
  int dropouts = 0;
  for (auto& n : m.graph->nodes()) dropouts += n.op == "aten::dropout";
  ASSERT_GE(dropouts, 4) << "the model should have dropout nodes";
  const int cut = m.graph->numNodes() / 2;
  torch::Tensor whole, split, again, otherStep, otherMicroBatch, otherSeed;
  {
    RandomKeyScope key({1234, 5, 3}, c10::kCPU);
    whole = m.run({});
    torch::rand({777});  // draws in between change nothing
    split = m.run({cut});
    again = m.run({});
  }
  {
    RandomKeyScope key({1234, 6, 3}, c10::kCPU);
    otherStep = m.run({});
  }
  {
    RandomKeyScope key({1234, 5, 2}, c10::kCPU);
    otherMicroBatch = m.run({});
  }
  {
    RandomKeyScope key({1235, 5, 3}, c10::kCPU);
    otherSeed = m.run({});
  }
  EXPECT_TRUE(torch::equal(whole, split)) << "a cut changed the draws";
  EXPECT_TRUE(torch::equal(whole, again));
  EXPECT_FALSE(torch::equal(whole, otherStep));
  EXPECT_FALSE(torch::equal(whole, otherMicroBatch));
  EXPECT_FALSE(torch::equal(whole, otherSeed));
  // Without a key: the global generator, so two runs differ.
  EXPECT_EQ(activeRandomKey(), nullptr);
  EXPECT_FALSE(torch::equal(m.run({}), m.run({})));
}

TEST(RandomStream, ScopesNestAndSeedsMixEveryWord) {
  EXPECT_EQ(streamSeed({1, 2, 3}, 4), streamSeed({1, 2, 3}, 4));
  EXPECT_NE(streamSeed({1, 2, 3}, 4), streamSeed({1, 2, 3}, 5));
  EXPECT_NE(streamSeed({1, 2, 3}, 4), streamSeed({1, 2, 4}, 4));
  EXPECT_NE(streamSeed({1, 2, 3}, 4), streamSeed({1, 3, 3}, 4));
  EXPECT_NE(streamSeed({1, 2, 3}, 4), streamSeed({2, 2, 3}, 4));
  EXPECT_NE(streamSeed({0, 0, 1}, 0), streamSeed({0, 0, 0}, 1)) << "swapped words must not collide";
  {
    RandomKeyScope outer({1, 2, 3}, c10::kCPU);
    {
      RandomKeyScope inner({9, 9, 9}, c10::kCPU);
      EXPECT_EQ(activeRandomKey()->seed, 9u);
    }
    EXPECT_EQ(activeRandomKey()->seed, 1u);
    EXPECT_TRUE(seedForNode(0));
  }
  EXPECT_FALSE(seedForNode(0));
}

// A CUDA graph capture cannot reseed a generator (pipeline/StageGraphs.h):
// under a scope with a hook, each random node calls the hook, in node order,
// with its stream id, and the generator is left as it was.
TEST(RandomStream, AHookStandsInForTheReseedOfEveryRandomNode) {
  struct Recorder final : RandomNodeHook {
    std::vector<int64_t> nodes;
    void beforeRandomNode(int64_t node) override { nodes.push_back(node); }
  };
  DropoutGpt m;
  auto stage = splitGraph(*m.graph, {}).at(0);
  const auto expected = randomStreamIds(*stage.graph, stage.nodeIndex);
  ASSERT_FALSE(expected.empty()) << "the GPT draws (dropout 0.5)";
  StageModule module(stage.graph, "stage0", ExecMode::Eager, {}, stage.nodeIndex);
  std::vector<torch::Tensor> in{m.tokens};
  for (auto& p : tensorsByName(*m.gpt, stage.paramInputs)) in.push_back(p);
  torch::NoGradGuard noGrad;
  auto cpu = at::globalContext().defaultGenerator(c10::kCPU);
  torch::manual_seed(1234);
  Recorder hook;
  {
    RandomKeyScope scope({1, 2, 3}, c10::kCPU, &hook);
    module.forward(in);
  }
  EXPECT_EQ(hook.nodes, std::vector<int64_t>(expected.begin(), expected.end()));
  EXPECT_EQ(cpu.current_seed(), 1234u) << "the hook stands in for the reseed";
  {
    RandomKeyScope scope({1, 2, 3}, c10::kCPU);
    module.forward(in);
  }
  EXPECT_NE(cpu.current_seed(), 1234u) << "without a hook each random node reseeds";
  // Positions without a stream id are left out.
  auto ids = stage.nodeIndex;
  size_t pos = 0;
  for (auto* node : stage.graph->nodes()) {
    if (drawsRandom(node)) break;
    ++pos;
  }
  ids[pos] = -1;
  EXPECT_EQ(randomStreamIds(*stage.graph, ids), std::vector<int>(expected.begin() + 1, expected.end()));
}

TEST(RandomStream, CompiledExecutionOfAGraphThatDrawsIsRefusedNamingTheFix) {
  DropoutGpt m;
  auto stage = splitGraph(*m.graph, {}).at(0);
  try {
    StageModule compiled(stage.graph, "stage0", ExecMode::Compiled, {}, stage.nodeIndex);
    FAIL() << "compiled execution of a graph with dropout was accepted";
  } catch (const GraphError& e) {
    EXPECT_NE(std::string(e.what()).find("aten::dropout"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("pipeline.execution: eager"), std::string::npos) << e.what();
  }
  // A graph captured in eval mode draws nothing: compiled is fine.
  m.gpt->eval();
  auto evalGraph = test::captureGpt(m.gpt, 2, 8);
  auto evalStage = splitGraph(evalGraph, {}).at(0);
  for (auto* node : evalStage.graph->nodes()) EXPECT_FALSE(drawsRandom(node)) << node->kind().toQualString();
  StageModule compiled(evalStage.graph, "eval", ExecMode::Compiled, {}, evalStage.nodeIndex);
}

}  // namespace
}  // namespace sluice
