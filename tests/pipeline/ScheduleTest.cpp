// Schedules as data: GPipe and 1F1B valid for p in 1..4, m in 1..8; broken ones rejected.
#include <gtest/gtest.h>

#include "core/Error.h"
#include "pipeline/Schedule.h"

namespace sluice::pipeline {
namespace {

using K = ActionKind;

TEST(Schedule, GPipeAnd1F1BAreValid) {
  for (int p = 1; p <= 4; ++p) {
    for (int m = 1; m <= 8; ++m) {
      for (auto name : {"gpipe", "1f1b"}) {
        auto s = makeSchedule(name, p, m);
        EXPECT_NO_THROW(checkSchedule(s)) << toString(s);
      }
    }
  }
}

TEST(Schedule, InFlightMicroBatchesMatchTheFormulas) {
  for (int p = 1; p <= 4; ++p) {
    for (int m = 1; m <= 8; ++m) {
      auto gpipe = peakInFlight(makeGPipe(p, m));
      auto ofob = peakInFlight(make1F1B(p, m));
      for (int i = 0; i < p; ++i) {
        EXPECT_EQ(gpipe[i], m);
        EXPECT_EQ(ofob[i], std::min(p - i, m)) << "p=" << p << " m=" << m << " stage " << i;
      }
    }
  }
}

TEST(Schedule, OneFOneBStageOrder) {
  auto s = make1F1B(2, 3);
  std::vector<Action> stage0{{K::Forward, 0}, {K::SendActivation, 0}, {K::Forward, 1}, {K::SendActivation, 1},
                             {K::RecvGrad, 0}, {K::Backward, 0},       {K::Forward, 2}, {K::SendActivation, 2},
                             {K::RecvGrad, 1}, {K::Backward, 1},       {K::RecvGrad, 2}, {K::Backward, 2}};
  EXPECT_EQ(s.actions[0], stage0) << toString(s);
}

void expectRejected(const Schedule& s, const std::string& fragment) {
  try {
    checkSchedule(s);
    ADD_FAILURE() << "accepted a broken schedule:\n" << toString(s);
  } catch (const ScheduleError& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(Schedule, HandBrokenSchedulesAreRejected) {
  auto s = makeGPipe(2, 2);
  // Stage 1 receives micro-batch 1 before micro-batch 0, and stage 0 sends 1
  // only after it got the gradient of 0: circular wait.
  s.actions[0] = {{K::Forward, 0}, {K::SendActivation, 0}, {K::RecvGrad, 0}, {K::Backward, 0},
                  {K::Forward, 1}, {K::SendActivation, 1}, {K::RecvGrad, 1}, {K::Backward, 1}};
  s.actions[1] = {{K::RecvActivation, 1}, {K::Forward, 1}, {K::RecvActivation, 0}, {K::Forward, 0},
                  {K::Backward, 0},       {K::SendGrad, 0}, {K::Backward, 1},       {K::SendGrad, 1}};
  expectRejected(s, "deadlocks");

  auto b = make1F1B(3, 4);
  b.actions[1].erase(b.actions[1].begin());  // drop recv_act0 on stage 1
  expectRejected(b, "forward before its activation");

  auto c = makeGPipe(2, 3);
  c.actions[0].pop_back();  // stage 0 never runs B2
  expectRejected(c, "never runs B2");

  auto d = make1F1B(2, 2);
  std::swap(d.actions[1][0], d.actions[1][1]);  // F0 before recv_act0
  expectRejected(d, "forward before its activation");

  auto e = makeGPipe(2, 2);
  e.actions[1].push_back({K::SendActivation, 0});  // the last stage sends activations
  expectRejected(e, "last stage sends no activations");

  EXPECT_THROW(makeSchedule("zigzag", 2, 2), ScheduleError);
}

}  // namespace
}  // namespace sluice::pipeline
