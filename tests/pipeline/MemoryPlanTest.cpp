// The correctness contract for memory plans, on 2 real ranks (mpirun -np 2):
// a GPT with dropout trained 10 steps on 2 ranks under every schedule (GPipe,
// 1F1B, ZB-H1 and interleaved zero bubble with their split backward,
// interleaved 1F1B; the interleaved ones with 2 stages per rank), with every
// saved storage swapped, every recomputable one recomputed, and random
// mixes, gives per-step losses and final parameters bitwise equal to keeping
// everything under the same schedule, and losses equal to 1 process keeping
// everything. Bitwise because the arithmetic is the same: swap restores the
// same bytes, recompute re-runs the same kernels on the same inputs with the
// random stream its forward drew from (Note [random streams]).
#include <gtest/gtest.h>

#include <random>

#include "core/Capture.h"
#include "core/Communicator.h"
#include "core/Device.h"
#include "core/GraphSplit.h"
#include "partition/BaselineCuts.h"
#include "partition/CostModel.h"
#include "partition/Profile.h"
#include "partition/Profiler.h"
#include "partition/Segments.h"
#include "pipeline/RankWorker.h"
#include "pipeline/ScheduleKinds.h"
#include "pipeline/StageWorker.h"
#include "tests/Ranks.h"
#include "tests/TestUtil.h"

namespace sluice {
namespace {
// Its own scope: the tests build in unity batches, and EquivalenceTest.cpp's
// helpers have the same names (kSteps, batchFor).
namespace memory_plan_test {

SLUICE_TEST_RANKS("MemoryPlanExactness", 2);
SLUICE_TEST_RANKS("CudaMemoryPlanExactness", 2);

constexpr int kSteps = 10, kMicroBatches = 4, kMicroBatchSize = 2, kSeq = 8, kSeed = 4321;

// Learnable sequences (each row counts up by 3 from a random start), so the
// reference run's loss visibly falls.
std::vector<pipeline::MicroBatch> batchFor(int step, const c10::Device& device = c10::kCPU) {
  auto gen = at::detail::createCPUGenerator(kSeed * 1000 + step);
  auto starts = torch::randint(0, 64, {kMicroBatches * kMicroBatchSize, 1}, gen, torch::kLong);
  auto tokens = (starts + 3 * torch::arange(kSeq + 1, torch::kLong).unsqueeze(0)) % 64;
  std::vector<pipeline::MicroBatch> mbs;
  for (int i = 0; i < kMicroBatches; ++i) {
    auto rows = tokens.slice(0, i * kMicroBatchSize, (i + 1) * kMicroBatchSize);
    mbs.push_back({rows.slice(1, 0, kSeq).contiguous().to(device), rows.slice(1, 1, kSeq + 1).contiguous().to(device)});
  }
  return mbs;
}

models::GptOptions gptOptions() {
  auto o = test::tinyGpt(2);
  o.dropout = 0.1;
  return o;
}

enum class Kind { Keep, SwapAll, RecomputeAll, Mixed1, Mixed2 };

const char* kindName(Kind k) {
  switch (k) {
    case Kind::Keep: return "keep all";
    case Kind::SwapAll: return "swap all";
    case Kind::RecomputeAll: return "recompute all";
    case Kind::Mixed1: return "random mix 1";
    case Kind::Mixed2: return "random mix 2";
  }
  return "?";
}

// This stage's plan: its saved storages (Note [storage keys]), each with an action.
memory::MemoryPlan planFor(Kind kind, const std::vector<partition::SavedStorage>& storages, const StageGraph& stage,
                           int* freed) {
  memory::MemoryPlan plan;
  plan.swapWindowBytes = 1 << 14;  // small: the write-behind and read-ahead windows are exercised
  std::mt19937 rng(kind == Kind::Mixed1 ? 11 : 29);
  *freed = 0;
  for (auto& s : storages) {
    if (s.producer < stage.firstNode || s.firstSaver >= stage.endNode) continue;
    const bool recomputable = s.lastParamWriter < stage.firstNode;
    auto action = memory::TensorAction::Keep;
    if (kind == Kind::SwapAll) action = memory::TensorAction::Swap;
    if (kind == Kind::RecomputeAll && recomputable) action = memory::TensorAction::Recompute;
    if (kind == Kind::Mixed1 || kind == Kind::Mixed2) {
      const int r = std::uniform_int_distribution<int>(0, 2)(rng);
      if (r == 1) action = memory::TensorAction::Swap;
      if (r == 2) action = recomputable ? memory::TensorAction::Recompute : memory::TensorAction::Swap;
    }
    if (action == memory::TensorAction::Keep) continue;
    memory::StorageDecision d;
    d.key = {s.producer, s.slot};
    d.action = action;
    d.bytes = s.bytes;
    for (int n : s.segment) {
      if (action == memory::TensorAction::Recompute && n >= stage.firstNode) d.segment.push_back(n);
    }
    plan.decisions.push_back(std::move(d));
    ++*freed;
  }
  return plan;
}

struct Run {
  std::vector<double> losses;         // last stage only
  std::vector<torch::Tensor> params;  // this stage's, after training
  memory::StageMemoryStats stats;
};

// `comm.size()` ranks under `schedule` (interleaved ones: 2 stages per rank,
// cut by parameter bytes; else 2 stages cut inside block 0, after the
// attention softmax and its dropout), each stage carrying out its `kind` plan.
Run train(const Communicator& comm, const std::string& schedule, Kind kind, const c10::Device& device = c10::kCPU) {
  torch::manual_seed(kSeed);
  models::Gpt gpt(gptOptions());
  gpt->to(device);
  auto graph = test::captureGpt(gpt, kMicroBatchSize, kSeq);
  const int p = comm.size(), chunks = pipeline::scheduleKind(schedule).interleaves ? 2 : 1, pieces = p * chunks;
  std::vector<int> cuts;
  if (pieces == 2) {
    for (auto& n : graph.nodes()) {
      if (n.op == "aten::softmax") {
        cuts.push_back(n.index + 2);
        break;
      }
    }
  } else if (pieces > 2) {
    cuts = partition::parameterCuts(graph, pieces);
  }
  auto profile = partition::profileGraph(graph, graphInputs(graph, *gpt, {batchFor(0, device)[0].input}), {0, 1});
  auto storages = partition::savedStorages(graph, profile.facts);
  auto stages = splitGraph(graph, cuts);
  auto plan = pipeline::makeSchedule(schedule, p, kMicroBatches, chunks);
  auto links = pipeline::boundaryCommunicators(comm, plan);
  std::vector<std::unique_ptr<pipeline::StageWorker>> mine;
  std::vector<pipeline::StageWorker*> raw;
  // Several stages per rank swap through one engine, as training runs them (train/Trainer.cpp).
  std::shared_ptr<memory::SwapEngine> rankEngine;
  if (chunks > 1) rankEngine = memory::SwapEngine::start(memory::makeSwapTier(device, memory::defaultSwapDir()), 1 << 14);
  for (int s : plan.placement().stagesOf(comm.rank())) {
    auto& stage = stages.at(s);
    mine.push_back(std::make_unique<pipeline::StageWorker>(stage, tensorsByName(*gpt, stage.paramInputs), comm, plan,
                                                           test::tokenCrossEntropy, ExecMode::Eager, links, device));
    int freed = 0;
    mine.back()->setMemoryPlan(planFor(kind, storages, stage, &freed), "", rankEngine);
    EXPECT_TRUE(kind == Kind::Keep || kind == Kind::RecomputeAll || freed > 0)
        << schedule << ", " << kindName(kind) << " frees nothing on stage " << s;
    raw.push_back(mine.back().get());
  }
  pipeline::RankWorker worker(std::move(mine));
  torch::optim::AdamW opt(worker.trainableParameters(), torch::optim::AdamWOptions(3e-3).weight_decay(0.1));
  torch::manual_seed(kSeed + 100 + comm.rank());  // the global generator: the same in every run of this rank
  Run run;
  for (int step = 0; step < kSteps; ++step) {
    opt.zero_grad();
    auto loss = worker.runMicroBatches(batchFor(step, device));
    opt.step();
    if (worker.isLast()) run.losses.push_back(loss.item<double>());
  }
  for (auto& param : worker.trainableParameters()) run.params.push_back(param.detach().clone());
  for (auto* w : raw) {
    if (!w->memory()) continue;
    const auto st = w->memory()->stats();
    run.stats.recomputes += st.recomputes;
    run.stats.recomputedBytes += st.recomputedBytes;
    if (rankEngine) continue;  // the rank's engine: counted once below
    run.stats.swap.bytesWritten += st.swap.bytesWritten;
    run.stats.swap.bytesRead += st.swap.bytesRead;
    run.stats.swap.reads += st.swap.reads;
    run.stats.swap.demandReads += st.swap.demandReads;
    run.stats.swap.evictions += st.swap.evictions;
  }
  if (rankEngine) run.stats.swap = rankEngine->stats();
  return run;
}

// Every schedule: the split-backward and several-stages-per-rank ones run
// their memory plans too (Note [split backward memory]).
const char* const kSchedules[] = {"gpipe", "1f1b", "zb-h1", "interleaved", "interleaved-zb", "zbv"};

void expectBitwiseEqual(const Run& got, const Run& want, const std::string& what) {
  ASSERT_EQ(got.losses.size(), want.losses.size()) << what;
  for (size_t i = 0; i < got.losses.size(); ++i) EXPECT_EQ(got.losses[i], want.losses[i]) << what << " step " << i;
  ASSERT_EQ(got.params.size(), want.params.size()) << what;
  for (size_t i = 0; i < got.params.size(); ++i) EXPECT_TRUE(torch::equal(got.params[i], want.params[i])) << what << " param " << i;
}

TEST(MemoryPlanExactness, SwapRecomputeAndMixesEqualKeepAllBitwise) {
  auto world = test::world();
  ASSERT_EQ(world.size(), 2) << "run under mpirun -np 2";
  const auto single = train(Communicator::self(), "1f1b", Kind::Keep);  // 1 process, 1 stage
  ASSERT_EQ(single.losses.size(), static_cast<size_t>(kSteps));
  EXPECT_LT(single.losses.back(), single.losses.front()) << "the reference should learn";
  for (auto schedule : kSchedules) {
    const auto reference = train(world, schedule, Kind::Keep);
    const int chunks = pipeline::scheduleKind(schedule).interleaves ? 2 : 1;
    // The loss is on the last stage's rank (rank 0 under zbv's V).
    if (world.rank() == pipeline::placementOf(schedule, 2, chunks).rankOf(2 * chunks - 1)) {
      ASSERT_EQ(reference.losses.size(), static_cast<size_t>(kSteps)) << schedule;
      for (int i = 0; i < kSteps; ++i) {
        EXPECT_NEAR(reference.losses[i], single.losses[i], 1e-5 * std::abs(single.losses[i]))
            << schedule << " keeping everything vs 1 process, step " << i;
      }
    }
    for (auto kind : {Kind::SwapAll, Kind::RecomputeAll, Kind::Mixed1, Kind::Mixed2}) {
      const auto run = train(world, schedule, kind);
      expectBitwiseEqual(run, reference, std::string(schedule) + ", " + kindName(kind));
      if (kind == Kind::SwapAll) {
        EXPECT_GT(run.stats.swap.bytesWritten, 0);
        EXPECT_GT(run.stats.swap.bytesRead, 0);
        // Split backward: what W reads went back to the tier after Bi (Note
        // [split backward memory]; not on stage 0, whose Bi reads nothing).
        const std::string name = schedule;
        if ((name == "zb-h1" || name == "interleaved-zb" || name == "zbv") && world.rank() == 1) {
          EXPECT_GT(run.stats.swap.evictions, 0) << name;
        }
      }
      if (kind == Kind::RecomputeAll) { EXPECT_GT(run.stats.recomputes, 0); }
      std::cout << "rank " << world.rank() << " " << schedule << ", " << kindName(kind) << ": swapped "
                << run.stats.swap.bytesWritten << " bytes (" << run.stats.swap.reads << " reads, "
                << run.stats.swap.demandReads << " not prefetched in time, " << run.stats.swap.evictions
                << " given back between Bi and W), recomputed " << run.stats.recomputedBytes << " bytes in "
                << run.stats.recomputes << " re-runs: bitwise equal to keep-all" << std::endl;
    }
  }
}

// The same on a GPU (CTest entry cuda_np2; both ranks on GPU 0, MPI staging
// between them): swapped storages go to pinned host memory on a side stream
// (memory/PinnedHostSwapTier.h) and come back before their backward; with
// deterministic kernels the results are bitwise those of keeping everything.
TEST(CudaMemoryPlanExactness, PinnedHostSwapAndRecomputeEqualKeepAllBitwise) {
  if (cudaDevices() == 0) GTEST_SKIP() << "no GPU can be used here: " << cudaAbsentReason();
  const c10::Device gpu(c10::kCUDA, 0);
  auto world = test::sharedGpuWorld(gpu);
  ASSERT_EQ(world.size(), 2) << "run under mpirun -np 2";
  for (auto schedule : kSchedules) {
    const auto reference = train(world, schedule, Kind::Keep, gpu);
    for (auto kind : {Kind::SwapAll, Kind::RecomputeAll, Kind::Mixed1}) {
      const auto run = train(world, schedule, kind, gpu);
      expectBitwiseEqual(run, reference, std::string("GPU, ") + schedule + ", " + kindName(kind));
      if (kind == Kind::SwapAll) { EXPECT_GT(run.stats.swap.bytesRead, 0); }
      if (kind == Kind::RecomputeAll) { EXPECT_GT(run.stats.recomputes, 0); }
    }
  }
}

}  // namespace memory_plan_test
}  // namespace
}  // namespace sluice
