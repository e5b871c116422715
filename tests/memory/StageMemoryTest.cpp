// StageMemory on real graphs, one process: swap and recompute give the same
// gradients as keeping everything (bitwise, dropout included), an in-place
// change of a saved tensor is an error naming the op that saved it, and a
// forward whose graph is dropped leaves nothing behind, and a recomputed
// storage leaves memory after its last forward reader. The swap tier: round
// trip and the directories it refuses.
#include <fcntl.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "core/Capture.h"
#include "core/Error.h"
#include "core/GraphSplit.h"
#include "core/NodeProgram.h"
#include "core/RandomStream.h"
#include "memory/CountingAllocator.h"
#include "memory/StageMemory.h"
#include "memory/SwapTier.h"
#include "partition/Profile.h"
#include "partition/Profiler.h"
#include "partition/Segments.h"
#include "tests/TestUtil.h"

namespace sluice::memory {
namespace {

using partition::SavedStorage;

constexpr int kSeed = 77;

enum class Kind { Keep, SwapAll, RecomputeAll, Mixed };

// The whole model as one stage, with its memory facts from the profiler.
struct WholeStage {
  models::Gpt gpt{nullptr};
  std::unique_ptr<OpGraph> graph;
  StageGraph stage;
  std::vector<torch::Tensor> params;
  std::vector<SavedStorage> storages;
  torch::Tensor tokens, targets;

  explicit WholeStage(double dropout) {
    torch::manual_seed(kSeed);
    auto options = test::tinyGpt(2);
    options.dropout = dropout;
    gpt = models::Gpt(options);
    tokens = torch::randint(0, 64, {2, 8}, torch::kLong);
    targets = torch::randint(0, 64, {2, 8}, torch::kLong);
    graph = std::make_unique<OpGraph>(test::captureGpt(gpt, 2, 8));
    stage = splitGraph(*graph, {}).at(0);
    params = tensorsByName(*gpt, stage.paramInputs);
    auto profile = partition::profileGraph(*graph, graphInputs(*graph, *gpt, {tokens}), {0, 1});
    storages = partition::savedStorages(*graph, profile.facts);
  }

  MemoryPlan plan(Kind kind, int64_t window = 1 << 16) const {
    MemoryPlan p;
    p.swapWindowBytes = window;
    std::mt19937 rng(5);
    for (auto& s : storages) {
      const bool recomputable = s.lastParamWriter < 0;
      TensorAction a = TensorAction::Keep;
      if (kind == Kind::SwapAll) a = TensorAction::Swap;
      if (kind == Kind::RecomputeAll && recomputable) a = TensorAction::Recompute;
      if (kind == Kind::Mixed) {
        const int r = std::uniform_int_distribution<int>(0, 2)(rng);
        a = r == 0 ? TensorAction::Keep : (r == 1 || !recomputable) ? TensorAction::Swap : TensorAction::Recompute;
      }
      if (a == TensorAction::Keep) continue;
      p.decisions.push_back({{s.producer, s.slot}, a, a == TensorAction::Recompute ? s.segment : std::vector<int>{},
                             s.bytes});
    }
    return p;
  }
};

// One forward + backward under `plan`; returns the loss and every gradient.
std::vector<torch::Tensor> trainStep(WholeStage& w, const MemoryPlan& plan, StageMemoryStats* stats = nullptr) {
  for (auto& p : w.params) p.mutable_grad() = torch::Tensor();
  NodeProgram program(w.stage.graph, w.stage.nodeIndex);
  StageMemoryOptions options;
  options.plan = plan;
  StageMemory memory(program, w.stage.nodeIndex, w.params, options);
  std::vector<c10::IValue> in{w.tokens};
  in.insert(in.end(), w.params.begin(), w.params.end());
  // The same dropout masks in every run: keyed (Note [random streams]).
  std::vector<c10::IValue> out;
  {
    RandomKeyScope key({kSeed, 3, 1}, c10::kCPU);
    memory.beginForward(0, {w.tokens});
    SavedTensorScope scope(memory.hooks());
    out = program.run(in, &memory);
  }
  memory.endForward();
  memory.flushSwaps();  // on disk for real: backward reads them back
  // Draws between forward and backward (other stages', other micro-batches')
  // do not change what a recompute replays: it keeps no generator state.
  torch::rand({1000});
  auto logits = out.at(0).toTupleRef().elements().at(0).toTensor();
  auto loss = test::tokenCrossEntropy(logits, w.targets);
  memory.beginBackward(0);
  loss.backward();
  memory.endBackward(0);
  if (stats) *stats = memory.stats();
  std::vector<torch::Tensor> result{loss.detach().clone()};
  for (auto& p : w.params) result.push_back(p.grad().defined() ? p.grad().clone() : torch::Tensor());
  return result;
}

TEST(StageMemory, SwapAndRecomputeGiveBitwiseTheGradientsOfKeepingEverything) {
  WholeStage w(/*dropout=*/0.1);
  ASSERT_GT(w.storages.size(), 20u);
  const auto reference = trainStep(w, w.plan(Kind::Keep));
  for (auto kind : {Kind::SwapAll, Kind::RecomputeAll, Kind::Mixed}) {
    StageMemoryStats stats;
    const auto plan = w.plan(kind);
    ASSERT_TRUE(plan.freesAnything());
    const auto got = trainStep(w, plan, &stats);
    ASSERT_EQ(got.size(), reference.size());
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(got[i].defined(), reference[i].defined()) << "tensor " << i;
      if (got[i].defined()) { EXPECT_TRUE(torch::equal(got[i], reference[i])) << "kind " << int(kind) << " tensor " << i; }
    }
    if (kind == Kind::SwapAll) {
      EXPECT_GT(stats.swap.bytesWritten, 0);
      EXPECT_EQ(stats.swap.bytesRead, stats.swap.bytesWritten) << "every swapped storage is read back once";
    }
    if (kind == Kind::RecomputeAll) { EXPECT_GT(stats.recomputes, 0); }
  }
  EXPECT_EQ(StageMemory::liveRecords(), 0);
  EXPECT_EQ(StageMemory::liveHandles(), 0);
}

// A forward whose graph is never back-propagated frees everything: records,
// hooks, swapped and captured storages (no cycle through the saved tensors).
TEST(StageMemory, ADroppedGraphLeavesNothingBehind) {
  installCountingAllocator();
  WholeStage w(/*dropout=*/0.1);
  for (auto kind : {Kind::Keep, Kind::SwapAll, Kind::RecomputeAll, Kind::Mixed}) {
    const int64_t before = allocatorStats().currentBytes;
    {
      NodeProgram program(w.stage.graph, w.stage.nodeIndex);
      RandomKeyScope key({kSeed, 0, 0}, c10::kCPU);
      StageMemoryOptions options;
      options.plan = w.plan(kind);
      options.recordFacts = true;  // active even when keeping everything
      StageMemory memory(program, w.stage.nodeIndex, w.params, options);
      std::vector<c10::IValue> in{w.tokens};
      in.insert(in.end(), w.params.begin(), w.params.end());
      memory.beginForward(0, {w.tokens});
      {
        SavedTensorScope scope(memory.hooks());
        auto out = program.run(in, &memory);
        EXPECT_GT(StageMemory::liveHandles(), 0);
      }
      memory.endForward();
    }
    EXPECT_EQ(StageMemory::liveRecords(), 0) << "kind " << int(kind);
    EXPECT_EQ(StageMemory::liveHandles(), 0) << "kind " << int(kind);
    EXPECT_EQ(allocatorStats().currentBytes, before) << "kind " << int(kind);
  }
  // The measuring hooks keep detached tensors too.
  LiveSavedBytes live;
  for (auto& p : w.params) live.exclude(p);
  {
    SavedTensorScope scope(live.factory());
    auto y = w.gpt->forward(w.tokens).sum();
    EXPECT_GT(live.bytes(), 0);
  }
  EXPECT_EQ(live.bytes(), 0);
}

// Note [captures become pins] (memory/StageMemory.cpp): a segment's captured
// input on a storage the plan recomputes holds no memory once it is freed, so
// recomputing everything keeps a forward's peak near one block's values,
// where holding the captured tensors to the end of forward held nearly every
// activation (as keeping everything does).
TEST(StageMemory, ARecomputedStorageLeavesMemoryAfterItsLastForwardReader) {
  installCountingAllocator();
  WholeStage w(/*dropout=*/0.1);
  auto forwardPeak = [&](Kind kind) {
    NodeProgram program(w.stage.graph, w.stage.nodeIndex);
    RandomKeyScope key({kSeed, 0, 0}, c10::kCPU);
    StageMemoryOptions options;
    options.plan = w.plan(kind);
    StageMemory memory(program, w.stage.nodeIndex, w.params, options);
    std::vector<c10::IValue> in{w.tokens};
    in.insert(in.end(), w.params.begin(), w.params.end());
    const int64_t before = allocatorStats().currentBytes;
    resetPeak();
    memory.beginForward(0, {w.tokens});
    {
      SavedTensorScope scope(memory.hooks());
      auto out = program.run(in, &memory);
    }
    memory.endForward();
    return allocatorStats().peakBytes - before;
  };
  const int64_t keep = forwardPeak(Kind::Keep), recompute = forwardPeak(Kind::RecomputeAll);
  std::printf("forward peak: keeping everything %lld bytes, recomputing everything %lld bytes\n",
              static_cast<long long>(keep), static_cast<long long>(recompute));
  EXPECT_LT(recompute, keep / 2);
}

struct SigmoidThenAddInPlace : torch::nn::Module {
  torch::Tensor w;
  SigmoidThenAddInPlace() { w = register_parameter("w", torch::ones({4})); }
  torch::Tensor forward(const torch::Tensor& x) {
    auto y = torch::sigmoid(x * w);  // sigmoid saves its output
    y.add_(1.0);                     // ... which is then changed in place
    return y * 2;
  }
};

TEST(StageMemory, ASavedTensorChangedInPlaceIsAnErrorNamingTheOp) {
  auto module = std::make_shared<SigmoidThenAddInPlace>();
  auto x = torch::randn({3, 4});
  auto graph = capture(*module, [&](const std::vector<torch::Tensor>& in) { return module->forward(in[0]); },
                       {{"x", x}});
  auto stage = splitGraph(graph, {}).at(0);
  auto params = tensorsByName(*module, stage.paramInputs);
  NodeProgram program(stage.graph);
  StageMemoryOptions options;
  options.recordFacts = true;
  StageMemory memory(program, stage.nodeIndex, params, options);
  memory.beginForward(0, {x});
  std::vector<c10::IValue> out;
  {
    SavedTensorScope scope(memory.hooks());
    out = program.run({x, params.at(0)}, &memory);
  }
  memory.endForward();
  auto y = out.at(0).toTupleRef().elements().at(0).toTensor();
  try {
    y.sum().backward();
    ADD_FAILURE() << "a saved tensor changed in place gave a gradient";
  } catch (const std::exception& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("aten::sigmoid"), std::string::npos) << what;
    EXPECT_NE(what.find("modified by an in-place operation"), std::string::npos) << what;
  }
  // The same for the counting hooks (no op name there, but no wrong gradient either).
  SavedBytesCounter counter;
  torch::Tensor z;
  {
    SavedTensorScope scope(counter.factory());
    z = module->forward(x);
  }
  EXPECT_THROW(z.sum().backward(), std::exception);
}

// Saved views (an offset into their storage, transposed strides) come back
// as the same views after swap and after recompute.
struct SavesViews : torch::nn::Module {
  torch::Tensor w;
  SavesViews() { w = register_parameter("w", torch::randn({6, 5})); }
  torch::Tensor forward(const torch::Tensor& x) {
    auto h = torch::matmul(x, w);                 // [3, 5], a fresh storage
    auto v = h.narrow(1, 2, 3).transpose(0, 1);  // offset 2, strides (1, 5)
    return (v * v).sum() + h.sin().sum();        // mul saves v twice, sin saves h
  }
};

TEST(StageMemory, SavedViewsComeBackWithTheirOffsetsAndStrides) {
  torch::manual_seed(3);
  auto module = std::make_shared<SavesViews>();
  auto x = torch::randn({3, 6});
  auto graph = capture(*module, [&](const std::vector<torch::Tensor>& in) { return module->forward(in[0]); },
                       {{"x", x}});
  auto stage = splitGraph(graph, {}).at(0);
  auto params = tensorsByName(*module, stage.paramInputs);
  auto profile = partition::profileGraph(graph, graphInputs(graph, *module, {x}), {0, 1});
  auto storages = partition::savedStorages(graph, profile.facts);
  int matmul = -1;
  for (auto& n : graph.nodes()) {
    if (n.op == "aten::matmul") matmul = n.index;
  }
  std::vector<torch::Tensor> reference;
  for (auto action : {TensorAction::Keep, TensorAction::Swap, TensorAction::Recompute}) {
    MemoryPlan plan;
    for (auto& st : storages) {
      if (st.producer == matmul && action != TensorAction::Keep) {
        plan.decisions.push_back({{st.producer, st.slot}, action, st.segment, st.bytes});
      }
    }
    ASSERT_EQ(plan.freesAnything(), action != TensorAction::Keep) << "the matmul output is saved";
    params[0].mutable_grad() = torch::Tensor();
    NodeProgram program(stage.graph);
    StageMemoryOptions options;
    options.plan = plan;
    options.recordFacts = true;
    StageMemory memory(program, stage.nodeIndex, params, options);
    memory.beginForward(0, {x});
    std::vector<c10::IValue> out;
    {
      SavedTensorScope scope(memory.hooks());
      out = program.run({x, params[0]}, &memory);
    }
    memory.endForward();
    memory.flushSwaps();
    out.at(0).toTupleRef().elements().at(0).toTensor().backward();
    if (action == TensorAction::Keep) {
      reference = {params[0].grad().clone()};
    } else {
      EXPECT_TRUE(torch::equal(params[0].grad(), reference[0])) << actionName(action);
    }
    if (action == TensorAction::Swap) { EXPECT_GT(memory.stats().swap.bytesRead, 0); }
    if (action == TensorAction::Recompute) { EXPECT_GT(memory.stats().recomputes, 0); }
  }
}

TEST(SwapTier, FileRoundTripAndRefusals) {
  FileSwapTier tier(defaultSwapDir());
  auto a = torch::arange(1000, torch::kFloat), b = torch::arange(3000, torch::kInt64);
  const int64_t pa = tier.write(a.data_ptr(), a.nbytes());
  const int64_t pb = tier.write(b.data_ptr(), b.nbytes());
  tier.sync();
  auto a2 = torch::empty_like(a), b2 = torch::empty_like(b);
  tier.read(pb, b2.data_ptr(), b2.nbytes());
  tier.read(pa, a2.data_ptr(), a2.nbytes());
  EXPECT_TRUE(torch::equal(a, a2));
  EXPECT_TRUE(torch::equal(b, b2));
  tier.release(pa, a.nbytes());
  EXPECT_EQ(tier.write(a.data_ptr(), a.nbytes()), pa) << "freed space is reused";
  auto refused = [](const std::string& dir, const std::string& why) {
    try {
      FileSwapTier t(dir);
      ADD_FAILURE() << dir << " was accepted";
    } catch (const MemoryError& e) {
      EXPECT_NE(std::string(e.what()).find(dir), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
  };
  refused("/nonexistent/sluice-swap", "does not exist");
  refused("/etc/hostname", "is not a directory");
  if (std::filesystem::exists("/dev/shm")) refused("/dev/shm", "tmpfs");
}

// The tier's file is owned (core/Files.h UniqueFd): one descriptor while it
// lives, none after; a moved descriptor is closed once, by its last owner.
TEST(SwapTier, FileTierAndUniqueFdCloseTheirDescriptorOnce) {
  auto openFds = [] {
    int n = 0;
    for ([[maybe_unused]] auto& e : std::filesystem::directory_iterator("/proc/self/fd")) ++n;
    return n;
  };
  const int before = openFds();
  {
    FileSwapTier tier(defaultSwapDir());
    EXPECT_EQ(openFds(), before + 1);
  }
  EXPECT_EQ(openFds(), before) << "the swap file's descriptor outlived its tier";
  const int raw = ::open("/dev/null", O_RDONLY);
  ASSERT_GE(raw, 0);
  {
    UniqueFd a(raw);
    UniqueFd b(std::move(a));
    EXPECT_FALSE(a.valid());
    EXPECT_EQ(b.get(), raw);
    UniqueFd c;
    c = std::move(b);
    EXPECT_EQ(c.get(), raw);
    EXPECT_NE(::fcntl(raw, F_GETFD), -1) << "closed while still owned";
  }
  EXPECT_EQ(::fcntl(raw, F_GETFD), -1) << "not closed by its last owner";
}

}  // namespace
}  // namespace sluice::memory
