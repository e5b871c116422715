// partition timing helpers shared by the profiler's passes: a steady clock,
// seconds between two of its points, and the median of samples (0 when empty).
#pragma once

#include <algorithm>
#include <chrono>
#include <vector>

namespace sluice::partition {

using Clock = std::chrono::steady_clock;

inline double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

}  // namespace sluice::partition
