#include "train/RunReport.h"

#include <cmath>
#include <cstdio>
#include <sstream>

#include "core/Bytes.h"

namespace sluice {

std::string percentOff(double measured, double predicted) {
  return predicted > 0
             ? std::to_string(static_cast<int>(std::lround(100.0 * (measured - predicted) / predicted))) + "%"
             : std::string("-");
}

std::string rankComputeTable(const std::vector<RankReportRow>& rows, const ComputeContext& context) {
  char buf[200];
  // What the cost model's stage times are checked against (issue: within 10%).
  std::ostringstream os;
  os << "compute per micro-batch per rank (forward + backward + loss, median over the steps after "
     << context.warmSteps
     << " warm-up steps; predicted: the plan's cost model, with recompute, swap stall and refill after waits)\n";
  std::snprintf(buf, sizeof(buf), "%5s %6s %12s %12s %8s\n", "rank", "stage", "measured ms", "predicted ms", "error");
  os << buf;
  for (size_t r = 0; r < rows.size(); ++r) {
    const double meas = rows[r].computeUs / 1e3, pred = rows[r].predictedComputeUs / 1e3;
    std::snprintf(buf, sizeof(buf), "%5d %6lld %12.3f %12.3f %8s\n", static_cast<int>(r),
                  static_cast<long long>(rows[r].stage), meas, pred, percentOff(meas, pred).c_str());
    os << buf;
  }
  // Which term is off, and why (issue: compute within 5%, or say so): the
  // profile runs at most one rank per core; ranks that time-share cores
  // compute longer whenever several compute at once.
  const int wanted = context.ranksOnHost * context.threadsPerRank;
  if (wanted > context.cores && context.cpu) {
    char line[400];
    std::snprintf(line, sizeof(line),
                  "compute: this host runs %d ranks x %d threads on %d cores, so ranks that compute at the same "
                  "moment share cores, which the profile's ranks did not: compute runs longer than predicted, up "
                  "to %.2fx; the prediction holds with a core per rank thread\n",
                  context.ranksOnHost, context.threadsPerRank, context.cores,
                  static_cast<double>(wanted) / context.cores);
    os << line;
  }
  return os.str();
}

std::string rankMemoryTable(const std::vector<RankReportRow>& rows, int64_t bytesOutsideModel) {
  char buf[200];
  std::ostringstream os;
  os << "memory per rank (model peak: counting allocator, less " << formatBytes(bytesOutsideModel)
     << " outside the model on rank 0)\n";
  std::snprintf(buf, sizeof(buf), "%5s %6s %14s %14s %8s %14s\n", "rank", "stage", "measured", "predicted", "error",
                "resident");
  os << buf;
  for (size_t r = 0; r < rows.size(); ++r) {
    const int64_t meas = rows[r].modelPeakBytes, pred = rows[r].predictedPeakBytes;
    const std::string err = percentOff(static_cast<double>(meas), static_cast<double>(pred));
    std::snprintf(buf, sizeof(buf), "%5d %6lld %14s %14s %8s %14s\n", static_cast<int>(r),
                  static_cast<long long>(rows[r].stage), formatBytes(meas).c_str(),
                  pred > 0 ? formatBytes(pred).c_str() : "-", err.c_str(), formatBytes(rows[r].residentBytes).c_str());
    os << buf;
  }
  return os.str();
}

}  // namespace sluice
