// Rank 0's end-of-run tables (train/RunReport.h) on made-up rows: the error
// column, the rows without a prediction, and the note on shared cores.
#include <gtest/gtest.h>

#include <string>

#include "train/RunReport.h"

namespace sluice {
namespace {

const std::vector<RankReportRow> kRows = {
    {0, 40 << 20, 38 << 20, 90 << 20, 10500, 10000},  // 5% over both predictions (memory: +5.3%)
    {1, 30 << 20, 0, 80 << 20, 9000, 0},              // no prediction
};

TEST(RunReport, PercentOffRoundsAndNeedsAPrediction) {
  EXPECT_EQ(percentOff(105, 100), "5%");
  EXPECT_EQ(percentOff(94.4, 100), "-6%");
  EXPECT_EQ(percentOff(3, 0), "-");
}

TEST(RunReport, ComputeTableHasARowPerRankAndSaysWhenCoresAreShared) {
  const auto alone = rankComputeTable(kRows, {3, 2, 1, 2, true});
  EXPECT_NE(alone.find("after 3 warm-up steps"), std::string::npos) << alone;
  EXPECT_NE(alone.find("    0      0       10.500       10.000       5%"), std::string::npos) << alone;
  EXPECT_NE(alone.find("    1      1        9.000        0.000        -"), std::string::npos) << alone;
  EXPECT_EQ(alone.find("share cores"), std::string::npos) << "2 ranks x 1 thread on 2 cores share none";
  const auto shared = rankComputeTable(kRows, {3, 3, 1, 2, true});
  EXPECT_NE(shared.find("3 ranks x 1 threads on 2 cores"), std::string::npos) << shared;
  EXPECT_NE(shared.find("up to 1.50x"), std::string::npos) << shared;
  EXPECT_EQ(rankComputeTable(kRows, {3, 3, 1, 2, false}).find("share cores"), std::string::npos)
      << "a GPU run's compute is not the host's cores'";
}

TEST(RunReport, MemoryTableComparesThePeakWithThePlan) {
  const auto table = rankMemoryTable(kRows, 4096);
  EXPECT_NE(table.find("less 4.00 KiB outside the model"), std::string::npos) << table;
  EXPECT_NE(table.find("5%"), std::string::npos) << table;
  // Rank 1 has no prediction: "-" in both the predicted and the error column.
  const auto row1 = table.substr(table.rfind("\n    1 "));
  EXPECT_EQ(row1.find("%"), std::string::npos) << row1;
}

}  // namespace
}  // namespace sluice
