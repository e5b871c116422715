// The node-by-node profiler: saved bytes attributed to the node that made
// the storage, parameter bytes, recompute segments, a protobuf round trip
// keyed by the graph hash. No timing is asserted.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <map>

#include "core/Capture.h"
#include "core/Error.h"
#include "memory/SavedTensorHooks.h"
#include "partition/ContextTiming.h"
#include "partition/Profile.h"
#include "partition/Profiler.h"
#include "partition/Segments.h"
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
    // As written (unfused): the saved bytes are checked against the eager module's.
    graph = std::make_unique<OpGraph>(test::captureGpt(gpt, 2, 8, CaptureOptions{/*fuseAttention=*/false}));
    profile = profileGraph(*graph, graphInputs(*graph, *gpt, {tokens}), {1, 3});
  }
};

TEST(Profiler, SavedAndParameterBytesPerNode) {
  Fixture f;
  auto& g = *f.graph;
  ASSERT_EQ(static_cast<int>(f.profile.nodes.size()), g.numNodes());
  EXPECT_EQ(f.profile.graphHash, g.hash());
  // The first matmul (x @ W^T of block 0's attention input projection) saves
  // its activation input, which layer_norm made: the bytes are layer_norm's.
  // W^T is a view of a parameter and is no saved storage at all.
  const auto& facts = f.profile.facts;
  std::map<std::string, std::pair<int, int>> producedBy;
  for (auto& n : g.nodes()) {
    for (size_t i = 0; i < n.outputs.size(); ++i) producedBy[n.outputs[i].name] = {n.index, static_cast<int>(i)};
  }
  for (auto& n : g.nodes()) {
    if (n.op != "aten::matmul") continue;
    auto [ln, out] = producedBy.at(n.inputs[0]);
    EXPECT_EQ(g.nodes()[ln].op, "aten::layer_norm");
    const auto& where = facts.outputs.at(ln).at(out);
    ASSERT_EQ(where.kind, memory::ValueStorage::Node);
    EXPECT_EQ(where.key.node, ln);
    const int x = facts.find(where.key);
    ASSERT_GE(x, 0);
    EXPECT_EQ(facts.storages[x].bytes, g.value(n.inputs[0]).bytes());
    EXPECT_NE(std::find(facts.storages[x].savers.begin(), facts.storages[x].savers.end(), n.index),
              facts.storages[x].savers.end());
    // layer_norm also saves its own mean and rstd: more than its output.
    EXPECT_GT(f.profile.nodes[ln].savedBytes, g.value(n.inputs[0]).bytes());
    auto [t, tOut] = producedBy.at(n.inputs[1]);
    EXPECT_EQ(facts.outputs.at(t).at(tOut).kind, memory::ValueStorage::Parameter);
    break;
  }
  for (auto& st : facts.storages) {
    for (int saver : st.savers) EXPECT_GE(saver, st.key.node);
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
    EXPECT_TRUE(n.recomputable) << n.op;  // nothing writes a parameter in place
    EXPECT_FALSE(n.random) << n.op;       // no dropout in this GPT
    EXPECT_GE(n.workspaceBytes, 0);
    // A recompute re-runs the forward alone: what it allocates (outputs and temporaries).
    EXPECT_GE(n.forwardWorkspaceBytes, 0);
    if (n.op == "aten::matmul") { EXPECT_GE(n.forwardWorkspaceBytes, n.outputBytes) << n.op; }
  }
}

// A recompute segment re-runs what nothing keeps: every input of a segment
// node that the segment does not produce is a parameter, a data input, a
// constant, a non-tensor scalar, or lives on a saved storage (kept, swapped
// or itself recomputed). For the attention probabilities that reaches back
// through q @ k^T, the scale and the mask to the qkv projection, whose
// reshaped views matmul saves as copies (so qkv itself is saved by nobody).
// The weight-gradient part of each node's backward (zero-bubble schedules
// defer it): all of it for nodes that differentiate only into parameters or
// values made from them (embedding, the transpose of a weight), none for
// nodes that read no parameter, a strict part for x @ W^T (the transposed
// weight is made from a parameter alone, so it counts as one).
TEST(Profiler, WeightGradientShareFollowsWhatANodeDifferentiatesInto) {
  Fixture f;
  auto& g = *f.graph;
  std::map<std::string, int> producer;
  for (auto& n : g.nodes()) {
    for (auto& o : n.outputs) producer[o.name] = n.index;
  }
  int matmuls = 0;
  for (auto& n : g.nodes()) {
    const auto& p = f.profile.nodes[n.index];
    EXPECT_GE(p.weightBackwardSeconds, 0.0) << n.op;
    EXPECT_LE(p.weightBackwardSeconds, p.backwardSeconds * (1 + 1e-9)) << n.op;
    if (n.op == "aten::embedding" || n.op == "aten::t") { EXPECT_DOUBLE_EQ(p.weightBackwardSeconds, p.backwardSeconds) << n.op; }
    if (n.op == "aten::softmax" || n.op == "aten::gelu") { EXPECT_EQ(p.weightBackwardSeconds, 0.0) << n.op; }
    if (n.op == "aten::matmul" && producer.count(n.inputs[1]) && g.nodes()[producer[n.inputs[1]]].op == "aten::t") {
      ++matmuls;
      EXPECT_GT(p.weightBackwardSeconds, 0.0);
      EXPECT_LT(p.weightBackwardSeconds, p.backwardSeconds);
    }
  }
  EXPECT_GT(matmuls, 0) << "expected x @ W^T matmuls in the tiny GPT";
}

TEST(Profiler, RecomputeSegmentsCloseOverWhatNothingSaved) {
  Fixture f;
  auto& g = *f.graph;
  const auto& facts = f.profile.facts;
  auto storages = savedStorages(g, facts);
  ASSERT_FALSE(storages.empty());
  std::map<std::string, std::pair<int, int>> producedBy;
  for (auto& n : g.nodes()) {
    for (size_t i = 0; i < n.outputs.size(); ++i) producedBy[n.outputs[i].name] = {n.index, static_cast<int>(i)};
  }
  auto saved = [&](const memory::StorageKey& k) {
    const int x = facts.find(k);
    return x >= 0 && !facts.storages[x].savers.empty();
  };
  for (auto& s : storages) {
    ASSERT_TRUE(std::is_sorted(s.segment.begin(), s.segment.end()));
    EXPECT_NE(std::find(s.segment.begin(), s.segment.end(), s.producer), s.segment.end());
    for (int node : s.segment) {
      for (auto& in : g.nodes()[node].inputs) {
        auto it = producedBy.find(in);
        if (it == producedBy.end()) continue;  // graph input or constant
        auto [m, out] = it->second;
        if (std::binary_search(s.segment.begin(), s.segment.end(), m)) continue;
        const auto& where = facts.outputs[m][out];
        const bool available = where.kind == memory::ValueStorage::Parameter ||
                               where.kind == memory::ValueStorage::External ||
                               (where.kind == memory::ValueStorage::Node && saved(where.key)) ||
                               (where.kind == memory::ValueStorage::NotTensor && !g.value(in).isTensor);
        EXPECT_TRUE(available) << "segment of node " << s.producer << " reads %" << in << " from node " << m
                               << " (" << g.nodes()[m].op << "), which nothing keeps";
      }
    }
  }
  int softmax = -1;
  for (auto& n : g.nodes()) {
    if (n.op == "aten::softmax") {
      softmax = n.index;
      break;
    }
  }
  bool found = false;
  for (auto& s : storages) {
    if (s.producer != softmax) continue;
    found = true;
    std::vector<std::string> tail;
    for (size_t i = s.segment.size() >= 4 ? s.segment.size() - 4 : 0; i < s.segment.size(); ++i) {
      tail.push_back(g.nodes()[s.segment[i]].op);
    }
    EXPECT_EQ(tail, (std::vector<std::string>{"aten::matmul", "aten::mul", "aten::masked_fill", "aten::softmax"}));
    EXPECT_EQ(g.nodes()[s.segment.front()].op, "aten::matmul") << "back to the qkv projection";
  }
  EXPECT_TRUE(found) << "the softmax output is saved (by softmax and by att @ v)";
}

TEST(Profiler, TotalSavedBytesMatchAnEagerTrainingForward) {
  Fixture f;
  memory::SavedBytesCounter counter;
  for (auto& p : f.gpt->parameters()) counter.exclude(p);
  for (auto& b : f.gpt->buffers()) counter.exclude(b);
  counter.exclude(f.tokens);  // a stage's boundary input: held anyway, never a saved activation
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
  f.profile.refill.waitSeconds = 0.02;
  f.profile.refill.rounds = 8;
  f.profile.refill.pieces = {{0, 5, 0.1}, {5, f.graph->numNodes(), 0.03}};
  f.profile.dataBytes = 1234;
  f.profile.save(path);
  auto back = Profile::load(path, f.graph->hash());
  ASSERT_EQ(back.nodes.size(), f.profile.nodes.size());
  for (size_t i = 0; i < back.nodes.size(); ++i) {
    EXPECT_EQ(back.nodes[i].op, f.profile.nodes[i].op);
    EXPECT_EQ(back.nodes[i].savedBytes, f.profile.nodes[i].savedBytes);
    EXPECT_EQ(back.nodes[i].workspaceBytes, f.profile.nodes[i].workspaceBytes);
    EXPECT_EQ(back.nodes[i].forwardWorkspaceBytes, f.profile.nodes[i].forwardWorkspaceBytes);
    EXPECT_DOUBLE_EQ(back.nodes[i].forwardSeconds, f.profile.nodes[i].forwardSeconds);
  }
  ASSERT_EQ(back.facts.storages.size(), f.profile.facts.storages.size());
  for (size_t i = 0; i < back.facts.storages.size(); ++i) {
    EXPECT_EQ(back.facts.storages[i].key, f.profile.facts.storages[i].key);
    EXPECT_EQ(back.facts.storages[i].savers, f.profile.facts.storages[i].savers);
  }
  EXPECT_EQ(back.lossSavedBytes, f.profile.lossSavedBytes);
  EXPECT_EQ(back.dataBytes, 1234);
  EXPECT_EQ(back.refill.waitSeconds, 0.02);
  EXPECT_EQ(back.refill.rounds, 8);
  ASSERT_EQ(back.refill.pieces.size(), 2u);
  EXPECT_EQ(back.refill.pieces[1].firstNode, 5);
  EXPECT_EQ(back.refill.pieces[1].endNode, f.graph->numNodes());
  EXPECT_EQ(back.refill.pieces[0].share, 0.1);
  EXPECT_EQ(back.refill.pieces[1].share, 0.03);
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


// In-context timing (ContextTiming.h): within one pass the node times add up
// to the whole forward and backward measured around them (nothing lost,
// nothing counted twice), every node whose backward the isolated pass timed
// has backward time in context too (the sequence numbers of the autograd
// functions found their forward node), and the model's own parameters get no
// gradient from profiling.
TEST(Profiler, InContextTimesAddUpAndFindEveryBackward) {
  Fixture f;
  auto& g = *f.graph;
  auto inputs = graphInputs(g, *f.gpt, {f.tokens});
  std::vector<int64_t> paramBytes;
  for (auto& n : f.profile.nodes) paramBytes.push_back(n.paramBytes);
  auto t = timeInContext(g, inputs, paramBytes, /*warmup=*/0, /*iterations=*/1);
  ASSERT_EQ(static_cast<int>(t.forwardSeconds.size()), g.numNodes());
  double forward = 0, backward = 0;
  for (int i = 0; i < g.numNodes(); ++i) {
    EXPECT_GE(t.forwardSeconds[i], 0.0);
    EXPECT_GE(t.backwardSeconds[i], 0.0);
    forward += t.forwardSeconds[i];
    backward += t.backwardSeconds[i];
  }
  EXPECT_GT(t.forwardWall, 0.0);
  EXPECT_GT(t.backwardWall, 0.0);
  EXPECT_NEAR(forward, t.forwardWall, 1e-9 + 1e-9 * t.forwardWall);
  EXPECT_NEAR(backward, t.backwardWall, 1e-9 + 1e-9 * t.backwardWall);
  // The same profile, isolated pass only, says which nodes have a backward
  // (and does not start the whole passes, so it does not wait on other ranks).
  ProfileOptions isolatedOnly{0, 1, /*inContext=*/false};
  int starts = 0;
  isolatedOnly.startTogether = [&starts] { ++starts; };
  auto isolated = profileGraph(g, inputs, isolatedOnly);
  EXPECT_EQ(starts, 0);
  ProfileOptions inContext{0, 1};
  inContext.startTogether = [&starts] { ++starts; };
  profileGraph(g, inputs, inContext);
  EXPECT_EQ(starts, 1) << "the ranks must start the whole passes together, once";
  int withBackward = 0;
  for (int i = 0; i < g.numNodes(); ++i) {
    if (isolated.nodes[i].backwardSeconds <= 0) {
      // No autograd function, no parameter to accumulate into: nothing of the backward is this node's.
      if (paramBytes[i] == 0) { EXPECT_EQ(t.backwardSeconds[i], 0.0) << "node " << i << " " << g.nodes()[i].op; }
      continue;
    }
    ++withBackward;
    EXPECT_GT(t.backwardSeconds[i], 0.0) << "node " << i << " " << g.nodes()[i].op;
  }
  EXPECT_GT(withBackward, 20);
  // With a loss on the output: its own forward and backward, and everything still adds up.
  auto withLoss = timeInContext(g, inputs, paramBytes, 0, 1, [](const torch::Tensor& out) { return out.pow(2).mean(); });
  EXPECT_GT(withLoss.lossForwardSeconds, 0.0);
  EXPECT_GT(withLoss.lossBackwardSeconds, 0.0);
  forward = withLoss.lossForwardSeconds, backward = withLoss.lossBackwardSeconds;
  for (int i = 0; i < g.numNodes(); ++i) forward += withLoss.forwardSeconds[i], backward += withLoss.backwardSeconds[i];
  EXPECT_NEAR(forward, withLoss.forwardWall, 1e-9 + 1e-9 * withLoss.forwardWall);
  EXPECT_NEAR(backward, withLoss.backwardWall, 1e-9 + 1e-9 * withLoss.backwardWall);
  for (auto& p : f.gpt->parameters()) EXPECT_FALSE(p.grad().defined());
}


// Note [time until the next start], on made-up clock points (no timing): each
// piece of work owns the gap after it up to the next start, in start order
// whatever order the intervals come in; a gap never shortens an interval that
// outlasts the next start; the last owns only itself; nothing is lost between
// the first start and the last end.
TEST(Profiler, EachIntervalOwnsTheGapUntilTheNextStart) {
  using std::chrono::milliseconds;
  const Clock::time_point t0{};
  auto at = [&](int ms) { return t0 + milliseconds(ms); };
  // Applied out of start order, as a sorted-by-end record could be.
  std::vector<Interval> v = {{at(10), at(12)}, {at(0), at(3)}, {at(5), at(9)}, {at(20), at(21)}};
  auto s = secondsUntilNextStart(v);
  ASSERT_EQ(s.size(), 4u);
  EXPECT_NEAR(s[1], 0.005, 1e-12);  // [0, 3) plus the gap to 5
  EXPECT_NEAR(s[2], 0.005, 1e-12);  // [5, 9) plus the gap to 10
  EXPECT_NEAR(s[0], 0.010, 1e-12);  // [10, 12) plus the gap to 20
  EXPECT_NEAR(s[3], 0.001, 1e-12);  // the last: itself
  EXPECT_NEAR(s[0] + s[1] + s[2] + s[3], 0.021, 1e-12);
  // An interval still running at the next start keeps its own end.
  auto overlap = secondsUntilNextStart({{at(0), at(8)}, {at(4), at(6)}});
  EXPECT_NEAR(overlap[0], 0.008, 1e-12);
  EXPECT_NEAR(overlap[1], 0.002, 1e-12);
  EXPECT_TRUE(secondsUntilNextStart({}).empty());
}

}  // namespace
}  // namespace sluice::partition
