// core::DeviceTrace on CPU: LibTorch's profiler around a piece of work puts
// its ops into the TraceRecorder on the "ops" stream, on the recorder's
// clock (inside the window the work ran in), with self times that leave a
// parent's children out; on CPU there are no kernels; start() twice is
// refused, and stop() without start() too.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <algorithm>

#include "core/DeviceTrace.h"
#include "core/Error.h"

namespace sluice {
namespace {

TEST(DeviceTrace, OpsLandOnTheRecordersClockWithSelfTimes) {
  TraceRecorder recorder;
  DeviceTrace trace(/*cuda=*/false);
  auto a = torch::randn({256, 256}), w = torch::randn({256, 256}), b = torch::randn({256});
  trace.start();
  EXPECT_TRUE(trace.active());
  EXPECT_THROW(trace.start(), Error);
  const double before = TraceRecorder::nowUs();
  torch::Tensor y;
  for (int k = 0; k < 5; ++k) y = torch::linear(a, w, b).relu();
  const double after = TraceRecorder::nowUs();
  const auto s = trace.stop(recorder, 7);
  EXPECT_FALSE(trace.active());
  EXPECT_EQ(s.step, 7);
  EXPECT_EQ(s.kernels, 0);
  EXPECT_EQ(s.syncs, 0);
  EXPECT_GE(s.ops, 10);  // 5 x (linear with its addmm, relu), at least
  const auto events = recorder.events();
  ASSERT_EQ(static_cast<int64_t>(events.size()), s.ops);
  int linears = 0;
  for (const auto& e : events) {
    EXPECT_EQ(e.stream, "ops");
    EXPECT_EQ(e.category, "op");
    EXPECT_EQ(e.step, 7);
    // Converted from the profiler's clock: inside the window, within the conversion's slack.
    EXPECT_GE(e.startUs, before - 50) << e.name;
    EXPECT_LE(e.startUs + e.durUs, after + 50) << e.name;
    linears += e.name == "aten::linear";
  }
  EXPECT_EQ(linears, 5);
  // aten::linear's work is in its child (addmm): its self time is a small part of its total.
  double linearTotal = 0;
  for (const auto& e : events) linearTotal += e.name == "aten::linear" ? e.durUs : 0;
  const auto self = [&](const std::string& name) {
    for (const auto& [n, us] : s.topOps) {
      if (n == name) return us;
    }
    return 0.0;
  };
  EXPECT_GT(self("aten::addmm"), 0);
  EXPECT_LT(self("aten::linear"), 0.5 * linearTotal);
  EXPECT_EQ(s.topOps.front().first, "aten::addmm");
  EXPECT_NE(describe(s).find("no device kernels (host-only run)"), std::string::npos);
  EXPECT_THROW(trace.stop(recorder, 8), Error);
}

}  // namespace
}  // namespace sluice
