// train::RunReport: rank 0's end-of-run tables, from what every rank
// measured and what the plan predicted (one RankReportRow per rank, gathered
// by TrainerImpl::reportRankTables). Pure text: no ranks, no tensors, so the
// tables are tested on made-up rows (tests/train/RunReportTest.cpp).
//
//   rankComputeTable(rows, {3, 2, 2, 1, true})  // compute per micro-batch, measured vs predicted
//   rankMemoryTable(rows, otherBytes)           // model peak measured vs predicted, resident peak
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace sluice {

// One rank's measurements and the plan's predictions (0: none).
struct RankReportRow {
  int64_t stage = 0;
  int64_t modelPeakBytes = 0, predictedPeakBytes = 0, residentBytes = 0;
  int64_t computeUs = 0, predictedComputeUs = 0;  // per micro-batch
};
inline constexpr int kRankReportColumns = 6;  // the fields above, as gathered

// How the compute was taken, for the table's heading and its note on shared cores.
struct ComputeContext {
  int64_t warmSteps = 0;                    // steps left out before the medians
  int ranksOnHost = 1, threadsPerRank = 1;  // this host's
  int cores = 1;
  bool cpu = true;  // a CPU run (ranks that share cores compute longer than their profile)
};

// How far a measurement is from its prediction, in whole percent ("-" without a prediction).
std::string percentOff(double measured, double predicted);
std::string rankComputeTable(const std::vector<RankReportRow>& rows, const ComputeContext& context);
std::string rankMemoryTable(const std::vector<RankReportRow>& rows, int64_t bytesOutsideModel);

}  // namespace sluice
