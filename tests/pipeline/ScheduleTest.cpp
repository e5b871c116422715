// Schedules as data: GPipe, 1F1B, ZB-H1, interleaved 1F1B, interleaved zero-bubble and ZBV valid over a range of sizes; broken ones rejected.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <iostream>
#include <random>

#include "core/Error.h"
#include "pipeline/ScheduleSimulation.h"
#include "pipeline/ScheduleKinds.h"

namespace sluice::pipeline {
namespace {

using K = ActionKind;

// Every row of the schedule table (pipeline/ScheduleKinds.h), a test's toy
// included (ToySchedule.cpp), builds valid schedules: 1 to 4 ranks, 2 stages
// per rank where it interleaves (micro-batches a multiple of the ranks there),
// up to 8 micro-batches; its name in the result, and as many stages as it says.
TEST(Schedule, EveryKindInTheTablePassesTheChecker) {
  ASSERT_GE(scheduleKinds().size(), 5u);
  for (auto& kind : scheduleKinds()) {
    for (int p = 1; p <= 4; ++p) {
      for (int m = 1; m <= 8; ++m) {
        const int chunks = kind.interleaves ? 2 : 1;
        if (kind.interleaves && (p < 2 || (!kind.vShape && m % p != 0))) continue;
        auto s = kind.build(p, chunks, m, nullptr);
        EXPECT_EQ(s.name, kind.name);
        EXPECT_EQ(s.stages, p * chunks) << kind.name;
        EXPECT_NO_THROW(checkSchedule(s)) << toString(s);
      }
    }
  }
}

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

void expectRejectedWithLimit(const Schedule& s, const std::vector<int>& limit, const std::string& fragment) {
  try {
    checkSchedule(s, limit);
    ADD_FAILURE() << "accepted a schedule over its memory limit:\n" << toString(s);
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
  s.actions[1] = {{K::RecvActivation, 1, 1}, {K::Forward, 1, 1},  {K::RecvActivation, 0, 1}, {K::Forward, 0, 1},
                  {K::Backward, 0, 1},       {K::SendGrad, 0, 1}, {K::Backward, 1, 1},       {K::SendGrad, 1, 1}};
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
  e.actions[1].push_back({K::SendActivation, 0, 1});  // the last stage sends activations
  expectRejected(e, "last stage sends no activations");

  EXPECT_THROW(makeSchedule("zigzag", 2, 2), ScheduleError);

  auto f = makeZeroBubbleH1(2, 2);
  auto& last = f.actions[1];
  auto w = std::find(last.begin(), last.end(), Action{K::BackwardWeight, 0, 1});
  last.erase(w);
  last.insert(last.begin() + 1, Action{K::BackwardWeight, 0, 1});  // right after F0, before Bi0
  expectRejected(f, "weight gradient before its input gradient");

  auto g = makeZeroBubbleH1(2, 2);
  g.actions[1].push_back({K::Backward, 1, 1});  // micro-batch 1 also backwarded whole
  expectRejected(g, "both whole and split");

  auto h = makeZeroBubbleH1(2, 2);
  auto& s1 = h.actions[1];
  s1.erase(std::find(s1.begin(), s1.end(), Action{K::BackwardWeight, 1, 1}));
  expectRejected(h, "never runs W1");

  auto i = make1F1B(2, 2);
  i.actions[1][0].stage = 0;  // rank 1 runs an action of stage 0
  expectRejected(i, "which rank 1 does not host");

  auto j = makeInterleaved1F1B(2, 2, 4);
  std::swap(j.actions[0][0], j.actions[1][0]);  // each rank runs the other's first piece
  expectRejected(j, "does not host");

  // Memory: 1F1B's stage 0 holds 2 micro-batches at p = 2; a limit of 1 rejects it.
  EXPECT_NO_THROW(checkSchedule(make1F1B(2, 4), {2, 1}));
  expectRejectedWithLimit(make1F1B(2, 4), {1, 1}, "more than its limit 1");
}

// Zero-bubble ZB-H1: valid, split backward on every stage, activation memory
// no more than 1F1B's most loaded stage (min(p, m) micro-batches).
TEST(Schedule, ZeroBubbleH1IsValidAtOneFOneBMemory) {
  for (int p = 1; p <= 4; ++p) {
    for (int m = 1; m <= 8; ++m) {
      auto s = makeSchedule("zb-h1", p, m);
      EXPECT_TRUE(splitsBackward(s));
      EXPECT_NO_THROW(checkSchedule(s, std::vector<int>(p, std::min(p, m)))) << toString(s);
    }
  }
  EXPECT_FALSE(splitsBackward(make1F1B(2, 4)));
}

// The simulator against closed forms: with per-micro-batch forward f and
// backward b on every stage and free messages, GPipe and 1F1B take
// (m + p - 1)(f + b); ZB-H1 (b split in halves, except on stage 0, whose
// whole backward is weight work) is shorter whenever there is a bubble, and
// never below the busy time m (f + b).
TEST(Schedule, SimulatedStepTimes) {
  const double f = 1, b = 2;
  for (int p = 1; p <= 4; ++p) {
    for (int m = 1; m <= 8; ++m) {
      std::vector<StageTimes> t(p, StageTimes{f, b, b / 2, b / 2});
      t[0] = StageTimes{f, b, 0, b};  // stage 0's inputs are data: its whole backward is weight work
      const double bound = (m + p - 1) * (f + b);
      EXPECT_DOUBLE_EQ(simulateStep(makeGPipe(p, m), t), bound) << "p=" << p << " m=" << m;
      EXPECT_DOUBLE_EQ(simulateStep(make1F1B(p, m), t), bound) << "p=" << p << " m=" << m;
      const double zb = simulateStep(makeZeroBubbleH1(p, m), t);
      EXPECT_GE(zb, m * (f + b));
      if (p > 1 && m > 1) {
        EXPECT_LT(zb, bound) << "p=" << p << " m=" << m << "\n" << toString(makeZeroBubbleH1(p, m));
      }
    }
  }
  // A message delay adds to every hop on the critical path: 1F1B at p = 2, m = 1: f, c, f+b... = 2(f+b) + 2c.
  std::vector<StageTimes> t(2, StageTimes{f, b, b / 2, b / 2});
  EXPECT_DOUBLE_EQ(simulateStep(make1F1B(2, 1), t, 0.5), 2 * (f + b) + 2 * 0.5);
}

// Note [refill after a wait]: GPipe on 2 stages, m = 2, a light stage 0 (F = B
// = 1) and a slow stage 1 (F = B = 10), shares 0.25 on stage 0 and 0.1 on
// stage 1, in full after a 10 s wait. By hand:
//   rank 0: F0 [0, 1], F1 [1, 2]: no wait;
//   rank 1: F0 waits 1 s for activation 0: 0.1 x 10 x 1/10 = 0.1 -> [1, 11.1];
//           F1, B0, B1 back to back -> gradients at 31.1 and 41.1;
//   rank 0: B0 waits 29.1 s: 0.25 x 1 -> [31.1, 32.35];
//           B1 waits 8.75 s: 0.25 x 1 x 8.75/10 = 0.21875 -> [41.1, 42.31875].
// Without refill the step is 42 (the same order, 1 + 4 x 10 + 1).
TEST(Schedule, RefillLengthensOnlyActionsThatFollowAWait) {
  const std::vector<StageTimes> t{{1, 1, 0, 1}, {10, 10, 5, 5}};
  const auto gpipe = makeGPipe(2, 2);
  RefillCosts refill;
  refill.share = {0.25, 0.1};
  refill.waitSeconds = 10;
  const auto sim = simulateStepWithRefill(gpipe, t, 0, refill);
  EXPECT_DOUBLE_EQ(sim.stepTime, 42.31875);
  ASSERT_EQ(sim.refillSeconds.size(), 2u);
  EXPECT_DOUBLE_EQ(sim.refillSeconds[0], 0.25 + 0.21875);
  EXPECT_DOUBLE_EQ(sim.refillSeconds[1], 0.1);
  EXPECT_DOUBLE_EQ(simulateStep(gpipe, t), 42);
  // No shares: the plain simulation, nothing charged, for every schedule.
  for (const char* name : {"gpipe", "1f1b", "zb-h1"}) {
    const auto s = makeSchedule(name, 2, 4);
    const auto none = simulateStepWithRefill(s, t, 0.5, RefillCosts{});
    EXPECT_DOUBLE_EQ(none.stepTime, simulateStep(s, t, 0.5)) << name;
    EXPECT_EQ(none.refillSeconds, std::vector<double>(2, 0.0)) << name;
  }
  refill.share = {0.5};  // one share for two stages
  EXPECT_THROW(simulateStepWithRefill(gpipe, t, 0, refill), ScheduleError);
}

// Interleaved 1F1B: valid for p 2..4, v 1..3, m multiples of p up to 12; each
// stage of rank r holds at most the rank's warm-up + 1 pieces; with v = 1 it
// is plain 1F1B; its step with each rank's work cut into v equal chunks beats
// 1F1B's (the bubble shrinks from (p-1)/(m+p-1) towards (p-1)/(vm+p-1)).
TEST(Schedule, InterleavedIsValidAndShortensTheBubble) {
  for (int p = 2; p <= 4; ++p) {
    for (int v = 1; v <= 3; ++v) {
      for (int m = p; m <= 12; m += p) {
        auto s = makeSchedule("interleaved", p, m, v);
        ASSERT_EQ(s.stages, p * v);
        ASSERT_EQ(s.chunks(), v);
        EXPECT_NO_THROW(checkSchedule(s)) << toString(s);
        const auto peak = peakInFlight(s);
        for (int st = 0; st < s.stages; ++st) {
          const int r = st % p, warmup = m == p ? m * v : std::min((p - r - 1) * 2 + (v - 1) * p, m * v);
          EXPECT_LE(peak[st], warmup + 1) << "p=" << p << " v=" << v << " m=" << m << " stage " << st;
        }
        const double f = 1, b = 2;
        // The same model: 1F1B stages take f + b per micro-batch, interleaved chunks 1/v of it.
        const double ofob = simulateStep(make1F1B(p, m), std::vector<StageTimes>(p, StageTimes{f, b, 0, 0}));
        const double inter = simulateStep(s, std::vector<StageTimes>(p * v, StageTimes{f / v, b / v, 0, 0}));
        EXPECT_GE(inter, m * (f + b) - 1e-9);
        if (v == 1) {
          EXPECT_DOUBLE_EQ(inter, ofob) << toString(s);
        } else if (m > p) {
          EXPECT_LT(inter, ofob) << "p=" << p << " v=" << v << " m=" << m << "\n" << toString(s);
        }
      }
    }
  }
  EXPECT_THROW(makeSchedule("interleaved", 2, 3, 2), ScheduleError);  // m not a multiple of p
  EXPECT_THROW(makeSchedule("1f1b", 2, 4, 2), ScheduleError);         // chunks only for interleaved
}

// Interleaved 1F1B on 2 ranks, 2 chunks, 4 micro-batches, rank 0 (stages 0
// and 2): warm-up (2-0-1)*2 + (2-1)*2 = 4 forward pieces (micro-batches 0, 1
// through chunk 0, then through chunk 1), then one forward, one backward.
TEST(Schedule, InterleavedRankOrder) {
  auto s = makeInterleaved1F1B(2, 2, 4);
  std::vector<std::pair<K, std::pair<int, int>>> compute;  // (kind, (mb, stage))
  for (auto& a : s.actions[0]) {
    if (a.kind == K::Forward || a.kind == K::Backward) compute.push_back({a.kind, {a.microBatch, a.stage}});
  }
  const std::vector<std::pair<K, std::pair<int, int>>> want{
      {K::Forward, {0, 0}},  {K::Forward, {1, 0}},  {K::Forward, {0, 2}},  {K::Forward, {1, 2}},
      {K::Forward, {2, 0}},  {K::Backward, {0, 2}}, {K::Forward, {3, 0}},  {K::Backward, {1, 2}},
      {K::Forward, {2, 2}},  {K::Backward, {0, 0}}, {K::Forward, {3, 2}},  {K::Backward, {1, 0}},
      {K::Backward, {2, 2}}, {K::Backward, {3, 2}}, {K::Backward, {2, 0}}, {K::Backward, {3, 0}}};
  EXPECT_EQ(compute, want) << toString(s);
}

// Note [rank prefetch order]: the swap-ins a rank queues before each action
// follow the rank's own backward order across its stages.
TEST(Schedule, PrefetchFollowsTheRanksBackwardOrder) {
  const auto s = makeInterleaved1F1B(2, 2, 4);
  const auto& actions = s.actions[0];
  auto find = [&](K kind, int mb, int stage) {
    for (size_t i = 0; i < actions.size(); ++i) {
      if (actions[i] == Action{kind, mb, stage}) return i;
    }
    ADD_FAILURE() << "no action " << mb << " " << stage;
    return size_t{0};
  };
  const auto all = [](const Action&) { return true; };
  // After B1 on stage 0 the rank's next backward is B2 on stage 2, not B2 on stage 0.
  EXPECT_EQ(prefetchTargets(actions, find(K::Backward, 1, 0), all),
            (std::vector<size_t>{find(K::Backward, 1, 0), find(K::Backward, 2, 2)}));
  EXPECT_EQ(prefetchTargets(actions, find(K::Backward, 2, 2), all),
            (std::vector<size_t>{find(K::Backward, 2, 2), find(K::Backward, 3, 2)}));
  // A stage that reads nothing swapped is passed over.
  const auto stage0 = [](const Action& a) { return a.stage == 0; };
  EXPECT_EQ(prefetchTargets(actions, find(K::Backward, 1, 0), stage0),
            (std::vector<size_t>{find(K::Backward, 1, 0), find(K::Backward, 2, 0)}));
  // The receive of B0's gradient on stage 2 queues B0 (read while it waits); a forward nothing.
  const auto b0 = find(K::Backward, 0, 2);
  ASSERT_GT(b0, 0u);
  EXPECT_EQ(actions[b0 - 1].kind, K::RecvGrad);
  EXPECT_EQ(prefetchTargets(actions, b0 - 1, all), (std::vector<size_t>{b0}));
  EXPECT_TRUE(prefetchTargets(actions, find(K::Forward, 3, 0), all).empty());
  // 1F1B's last stage: B0 comes before F1, so B1's storages are not saved yet at B0.
  const auto last = makeSchedule("1f1b", 2, 4).actions[1];
  size_t first = 0;
  while (last[first].kind != K::Backward) ++first;
  EXPECT_EQ(prefetchTargets(last, first, all), (std::vector<size_t>{first}));
}

// Interleaved zero-bubble: valid for p 2..4, v 1..3, m multiples of p up to
// 12, backward split on every stage; per rank at most interleaved 1F1B's
// warm-up + 1 pieces between F and B, and at most rank 0's between F and W;
// with each rank's work in v chunks and the backward split in halves its
// step is never longer than interleaved 1F1B's, and shorter whenever there is a
// bubble to fill (p > 1 and m > p).
TEST(Schedule, InterleavedZeroBubbleIsValidAndFillsTheBubble) {
  for (int p = 2; p <= 4; ++p) {
    for (int v = 1; v <= 3; ++v) {
      for (int m = p; m <= 12; m += p) {
        auto s = makeSchedule("interleaved-zb", p, m, v);
        ASSERT_EQ(s.stages, p * v);
        EXPECT_TRUE(splitsBackward(s));
        EXPECT_NO_THROW(checkSchedule(s)) << toString(s);
        auto warmup = [&](int r) { return m == p ? m * v : std::min((p - r - 1) * 2 + (v - 1) * p, m * v); };
        for (int r = 0; r < p; ++r) {
          int toB = 0, toW = 0, peakB = 0, peakW = 0;
          for (auto& a : s.actions[r]) {
            if (a.kind == K::Forward) ++toB, ++toW;
            if (a.kind == K::BackwardInput) --toB;
            if (a.kind == K::BackwardWeight) --toW;
            peakB = std::max(peakB, toB);
            peakW = std::max(peakW, toW);
          }
          EXPECT_LE(peakB, warmup(r) + 1) << "p=" << p << " v=" << v << " m=" << m << " rank " << r;
          EXPECT_LE(peakW, warmup(0) + 1) << "p=" << p << " v=" << v << " m=" << m << " rank " << r;
        }
        const double f = 1, b = 2;
        std::vector<StageTimes> t(p * v, StageTimes{f / v, b / v, b / v / 2, b / v / 2});
        t[0] = StageTimes{f / v, b / v, 0, b / v};
        const double zb = simulateStep(s, t), inter = simulateStep(makeInterleaved1F1B(p, v, m), t);
        EXPECT_GE(zb, m * (f + b) - 1e-9);
        EXPECT_LE(zb, inter + 1e-9) << "p=" << p << " v=" << v << " m=" << m << "\n" << toString(s);
        if (m > p) { EXPECT_LT(zb, inter) << "p=" << p << " v=" << v << " m=" << m << "\n" << toString(s); }
      }
    }
  }
  EXPECT_THROW(makeSchedule("interleaved-zb", 2, 3, 2), ScheduleError);  // m not a multiple of p
  EXPECT_TRUE(scheduleKind("interleaved-zb").interleaves && scheduleKind("interleaved").interleaves &&
              !scheduleKind("zb-h1").interleaves);
}

// ZBV: 2 stages per rank in a V (rank r hosts r and 2p - 1 - r; stages p - 1
// and p share rank p - 1, whose messages between them go to itself), valid
// for any m; no rank holds more than 2p half-stage pieces between F and W
// (1F1B's rank 0: p whole micro-batches); with each stage's halves of 1F1B's
// times (f = 1, b = 2 per whole stage, b split evenly, stage 0's all weight
// work), shorter than 1F1B (on 2 or more ranks) and no longer than ZB-H1 on the same ranks.
TEST(Schedule, ZeroBubbleVIsValidInAVAtOneFOneBMemory) {
  for (int p = 1; p <= 4; ++p) {
    for (int m = 1; m <= 12; ++m) {
      auto s = makeSchedule("zbv", p, m, 2);
      const std::string where = "p=" + std::to_string(p) + " m=" + std::to_string(m) + "\n" + toString(s);
      ASSERT_EQ(s.stages, 2 * p);
      EXPECT_TRUE(splitsBackward(s));
      ASSERT_NO_THROW(checkSchedule(s)) << where;
      for (int r = 0; r < p; ++r) {
        EXPECT_EQ(s.placement().stagesOf(r), (std::vector<int>{r, 2 * p - 1 - r}));
        EXPECT_EQ(s.rankOf(2 * p - 1 - r), r);
        int held = 0, peak = 0;
        for (auto& a : s.actions[r]) {
          held += a.kind == K::Forward ? 1 : a.kind == K::BackwardWeight ? -1 : 0;
          peak = std::max(peak, held);
        }
        EXPECT_LE(peak, 2 * p) << "rank " << r << " " << where;
      }
      const double f = 1, b = 2;
      std::vector<StageTimes> half(2 * p, StageTimes{f / 2, b / 2, b / 4, b / 4}), whole(p, StageTimes{f, b, b / 2, b / 2});
      half[0] = StageTimes{f / 2, b / 2, 0, b / 2};
      whole[0] = StageTimes{f, b, 0, b};
      const double zbv = simulateStep(s, half);
      if (p > 1) EXPECT_LT(zbv, simulateStep(make1F1B(p, m), whole)) << where;  // one rank: no bubble to fill
      EXPECT_LE(zbv, simulateStep(makeZeroBubbleH1(p, m), whole) + 1e-9) << where;
      EXPECT_GE(zbv, m * (f + b) - 1e-9) << where;
    }
  }
  EXPECT_THROW(makeSchedule("zbv", 2, 4, 3), ScheduleError);  // exactly 2 stages per rank
  EXPECT_TRUE(placementOf("zbv", 2, 2).v && !placementOf("interleaved", 2, 2).v);
  EXPECT_EQ(placementOf("interleaved", 2, 2).stagesOf(0), (std::vector<int>{0, 2}));
}

// The table names a schedule, never its builder: a builder called directly
// leaves the name empty (toString and checkSchedule say "(unnamed)") and its
// messages describe it; through makeSchedule the row's name is on the
// schedule and in the messages.
TEST(Schedule, TheTableNamesSchedulesNotTheirBuilders) {
  for (auto& kind : scheduleKinds()) {
    EXPECT_EQ(makeSchedule(kind.name, 2, 4, kind.interleaves ? 2 : 1).name, kind.name);
  }
  const auto messageOf = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const ScheduleError& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  const auto direct = make1F1B(2, 4);
  EXPECT_EQ(direct.name, "");
  EXPECT_EQ(toString(direct).rfind("(unnamed) (stages=2", 0), 0u) << toString(direct);
  EXPECT_EQ(messageOf([&] { checkSchedule(direct, {1, 1}); }).rfind("schedule (unnamed): stage 0 holds 2", 0), 0u);
  EXPECT_EQ(messageOf([] { checkSchedule(makeSchedule("1f1b", 2, 4), {1, 1}); }).rfind("schedule '1f1b': stage 0", 0),
            0u);
  EXPECT_EQ(messageOf([] { makeSchedule("interleaved", 2, 3, 2); }).rfind("interleaved takes micro-batches", 0), 0u);
  EXPECT_EQ(messageOf([] { makeInterleaved1F1B(2, 2, 3); }).rfind("interleaved 1F1B takes micro-batches", 0), 0u);
  ScheduleCosts wrong;
  wrong.times.resize(3);
  EXPECT_EQ(messageOf([&] { makeSchedule("zb-h1", 2, 4, 1, &wrong); }), "zb-h1: 3 stage times for 2 stages");
  EXPECT_EQ(messageOf([&] { makeZeroBubbleH1(2, 4, &wrong); }), "ZB-H1: 3 stage times for 2 stages");
  EXPECT_EQ(messageOf([] { makeSchedule("zbv", 2, 4, 3); }).rfind("zbv places exactly 2 stages per rank", 0), 0u);
}

}  // namespace
// The zero-bubble schedules fitted to stage times (ScheduleCosts): over random
// times (stage 0's input gradient free, as in training) and message times,
// p 2..4, v 1..3 and m up to 12, the fitted schedule is valid, holds no stage
// more micro-batches (F..W, and B..W) than the unit-cost schedule, and never
// simulates slower than it under those times; on some it is strictly faster.
// Every rank must build the same schedule from the same costs.
TEST(Schedule, ZeroBubbleFittedToStageTimesIsValidNoLargerAndNeverSlower) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> f(0.3, 2.0), half(0.15, 1.0);
  int trials = 0, faster = 0;
  for (int p = 2; p <= 4; ++p) {
    for (int v = 1; v <= 4; ++v) {
      // v = 4 stands for zbv (2 stages per rank in a V, any m).
      const std::string name = v == 1 ? "zb-h1" : v == 4 ? "zbv" : "interleaved-zb";
      const int chunks = v == 4 ? 2 : v;
      for (int m = v % 3 == 1 ? 1 : p; m <= 12; m += v % 3 == 1 ? 1 : p) {
        for (int trial = 0; trial < 4; ++trial) {
          ScheduleCosts costs;
          for (int st = 0; st < p * chunks; ++st) {
            const double bi = st == 0 ? 0.0 : half(rng), w = half(rng) * (st == 0 ? 2 : 1);
            costs.times.push_back({f(rng), bi + w, bi, w});
          }
          costs.comm = trial % 2 ? 0.05 : 0.0;
          const auto unit = makeSchedule(name, p, m, chunks);
          const auto fitted = makeSchedule(name, p, m, chunks, &costs);
          const std::string where = name + " p=" + std::to_string(p) + " v=" + std::to_string(v) +
                                    " m=" + std::to_string(m) + "\n" + toString(fitted);
          ASSERT_NO_THROW(checkSchedule(fitted)) << where;
          const auto fi = peakInFlight(fitted), ui = peakInFlight(unit);
          const auto fw = peakWeightPending(fitted), uw = peakWeightPending(unit);
          for (int st = 0; st < p * chunks; ++st) {
            EXPECT_LE(fi[st], ui[st]) << "stage " << st << " " << where;
            EXPECT_LE(fw[st], uw[st]) << "stage " << st << " " << where;
          }
          const double a = simulateStep(fitted, costs.times, costs.comm);
          const double b = simulateStep(unit, costs.times, costs.comm);
          EXPECT_LE(a, b * (1 + 1e-12)) << where;
          ++trials;
          faster += a < b * (1 - 1e-9);
          EXPECT_EQ(makeSchedule(name, p, m, chunks, &costs).actions, fitted.actions) << "not deterministic: " << where;
        }
      }
    }
  }
  std::cout << "fitted zero-bubble schedules strictly faster than unit-cost in " << faster << " of " << trials
            << " trials" << std::endl;
  EXPECT_GT(faster, trials / 10);
  // The costs must name every stage.
  ScheduleCosts wrong;
  wrong.times.resize(3);
  EXPECT_THROW(makeSchedule("zb-h1", 2, 4, 1, &wrong), ScheduleError);
}

}  // namespace sluice::pipeline
