// pipeline.execution: graphs without a GPU (pipeline/StageGraphs.h): a
// micro-batch's slot is the lowest free one, so every schedule's stages hold
// as many slots as it keeps micro-batches in flight; a stage asked to run
// graphs anywhere but on a CUDA device is refused, naming the fix. (The
// graphs themselves, bitwise against eager, are tests/cli/cuda.sh's: GPU only.)
#include <gtest/gtest.h>

#include "core/Communicator.h"
#include "core/Error.h"
#include "core/GraphSplit.h"
#include "pipeline/ScheduleKinds.h"
#include "pipeline/StageGraphs.h"
#include "pipeline/StageWorker.h"
#include "tests/TestUtil.h"

namespace sluice::pipeline {
namespace {

TEST(StageGraphs, AMicroBatchTakesTheLowestFreeSlotAndGivesItBack) {
  SlotPool pool;
  EXPECT_EQ(pool.acquire(0), 0);
  EXPECT_EQ(pool.acquire(1), 1);
  EXPECT_EQ(pool.acquire(2), 2);
  pool.release(1);
  EXPECT_EQ(pool.slotOf(1), -1);
  EXPECT_EQ(pool.acquire(3), 1) << "the lowest free slot";
  EXPECT_EQ(pool.slotOf(3), 1);
  EXPECT_EQ(pool.size(), 3);
  EXPECT_EQ(pool.held(), 3);
  EXPECT_THROW(pool.acquire(3), GraphError);
  EXPECT_THROW(pool.release(7), GraphError);
}

// Each stage's slots, taken at F and given back when the backward is
// complete (B, or W under a split backward), as StageWorker does.
std::vector<int> slotsPerStage(const Schedule& s) {
  std::vector<SlotPool> pools(static_cast<size_t>(s.stages));
  for (const auto& rank : s.actions) {
    for (const auto& a : rank) {
      auto& pool = pools[static_cast<size_t>(a.stage)];
      if (a.kind == ActionKind::Forward) pool.acquire(a.microBatch);
      if (a.kind == ActionKind::Backward || a.kind == ActionKind::BackwardWeight) pool.release(a.microBatch);
    }
  }
  std::vector<int> out;
  for (const auto& pool : pools) {
    EXPECT_EQ(pool.held(), 0) << s.name << ": every slot comes back by the end of the step";
    out.push_back(pool.size());
  }
  return out;
}

TEST(StageGraphs, EveryScheduleHoldsAsManySlotsAsMicroBatchesInFlight) {
  for (const char* name : {"gpipe", "1f1b", "zb-h1", "interleaved", "interleaved-zb", "zbv"}) {
    const auto& kind = scheduleKind(name);
    for (int m : {4, 8, 12}) {
      const int chunks = kind.fixedChunks > 0 ? kind.fixedChunks : kind.interleaves ? 2 : 1;
      const auto s = makeSchedule(kind, 4, m, chunks);
      EXPECT_EQ(slotsPerStage(s), peakInFlight(s)) << kind.name << ", m = " << m;
    }
  }
  EXPECT_EQ(slotsPerStage(makeSchedule("1f1b", 4, 8)), (std::vector<int>{4, 3, 2, 1})) << "min(p - s, m)";
  EXPECT_EQ(slotsPerStage(makeSchedule("gpipe", 2, 5)), (std::vector<int>{5, 5})) << "every micro-batch";
}

TEST(StageGraphs, GraphsAnywhereButOnAGpuAreRefusedNamingTheFix) {
  try {
    makeStageGraphs(c10::Device(c10::kCPU), "stage 0", {}, {});
    FAIL() << "CUDA graphs of a stage on the CPU were accepted";
  } catch (const GraphError& e) {
    EXPECT_NE(std::string(e.what()).find("pipeline.execution: graphs captures CUDA graphs"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("pipeline.execution: eager"), std::string::npos) << e.what();
  }
  // The stage worker asks for them when it is built.
  torch::manual_seed(3);
  auto gpt = models::Gpt(test::tinyGpt(2));
  const auto graph = test::captureGpt(gpt, 2, 8);
  auto stage = splitGraph(graph, {}).at(0);
  EXPECT_THROW(StageWorker(stage, tensorsByName(*gpt, stage.paramInputs), Communicator::self(),
                           makeSchedule("1f1b", 1, 2), test::tokenCrossEntropy, ExecMode::Graphs),
               GraphError);
}

}  // namespace
}  // namespace sluice::pipeline
