// core::DeviceTrace on CPU: LibTorch's profiler around a piece of work puts
// its ops into the TraceRecorder on the "ops" stream, on the recorder's
// clock (inside the window the work ran in), with self times that leave a
// parent's direct children out (checked against a slow recount, not timing); on CPU there are no kernels; start() twice is
// refused, and stop() without start() too.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <algorithm>
#include <map>

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
  // Self times, computed here the slow way: an op's duration less that of
  // the ops directly inside it (inside it and inside no other op inside it).
  std::map<std::string, double> self;
  for (const auto& e : events) {
    const auto inside = [](const TraceEvent& a, const TraceEvent& b) {  // a strictly within b
      return &a != &b && a.startUs >= b.startUs && a.startUs + a.durUs <= b.startUs + b.durUs &&
             (a.durUs < b.durUs || a.startUs > b.startUs);
    };
    double children = 0;
    for (const auto& c : events) {
      if (!inside(c, e)) continue;
      bool direct = true;
      for (const auto& m : events) direct = direct && !(inside(c, m) && inside(m, e));
      children += direct ? c.durUs : 0;
    }
    self[e.name] += e.durUs - children;
  }
  ASSERT_EQ(s.topOps.size(), std::min<size_t>(8, self.size()));
  for (size_t i = 0; i < s.topOps.size(); ++i) {
    const auto& [name, us] = s.topOps[i];
    // Within 3 us: the profiler's timestamps tie and overhang at the microsecond, which the two
    // counts settle differently; a parent charged with its children would be off by their whole time.
    EXPECT_NEAR(us, self.at(name), 3.0) << name;
    if (i > 0) EXPECT_LE(us, s.topOps[i - 1].second) << "most self time first";
  }
  EXPECT_NE(describe(s).find("no device kernels (host-only run)"), std::string::npos);
  EXPECT_THROW(trace.stop(recorder, 8), Error);
}

}  // namespace
}  // namespace sluice
