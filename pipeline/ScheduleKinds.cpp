#include "pipeline/ScheduleKinds.h"

#include "core/Error.h"

namespace sluice::pipeline {
namespace {

// A row's builder, told the row's name: what its messages call the schedule.
using NamedBuilder = std::function<Schedule(const std::string& name, int ranks, int chunks, int microBatches,
                                            const ScheduleCosts* costs)>;

// The row names what it builds (builders name no schedule: Schedule::name),
// for every row, the library's and those added (addScheduleKind).
ScheduleKind namingItsSchedules(ScheduleKind kind) {
  kind.build = [name = kind.name, build = std::move(kind.build)](int p, int v, int m, const ScheduleCosts* c) {
    auto schedule = build(p, v, m, c);
    schedule.name = name;
    return schedule;
  };
  return kind;
}

// A library row: its traits (`build` left empty) and its builder, told the row's name.
ScheduleKind row(ScheduleKind kind, NamedBuilder build) {
  kind.build = [name = kind.name, build = std::move(build)](int p, int v, int m, const ScheduleCosts* c) {
    return build(name, p, v, m, c);
  };
  return namingItsSchedules(std::move(kind));
}

std::deque<ScheduleKind>& table() {
  static std::deque<ScheduleKind> kinds = [] {
    std::deque<ScheduleKind> k;
    k.push_back(row({"gpipe", "all forwards, then all backwards", false, false, true, 2},
                    [](const std::string&, int p, int, int m, const ScheduleCosts*) { return makeGPipe(p, m); }));
    k.push_back(row({"1f1b", "one forward, one backward (PipeDream-Flush)", false, false, false, 0},
                    [](const std::string&, int p, int, int m, const ScheduleCosts*) { return make1F1B(p, m); }));
    k.push_back(row({"zb-h1", "zero bubble: backward split into input and weight gradients", false, true, false, 1},
                    [](const std::string& name, int p, int, int m, const ScheduleCosts* c) {
                      return makeZeroBubbleH1(p, m, c, name);
                    }));
    k.push_back(row({"interleaved", "interleaved 1F1B over pipeline.chunks stages per rank", true, false, false, 3, {},
                     false, 0, true},
                    [](const std::string& name, int p, int v, int m, const ScheduleCosts*) {
                      return makeInterleaved1F1B(p, v, m, name);
                    }));
    k.push_back(row({"interleaved-zb", "interleaved 1F1B with zb-h1's split backward", true, true, false, 4, {}, false,
                     0, true},
                    [](const std::string& name, int p, int v, int m, const ScheduleCosts* c) {
                      return makeInterleavedZeroBubble(p, v, m, c, name);
                    }));
    k.push_back(row({"zbv", "zero bubble in a V: stages r and 2p-1-r on rank r, split backward", true, true, false, 5,
                     {}, true, 2},
                    [](const std::string& name, int p, int v, int m, const ScheduleCosts* c) {
                      SLUICE_CHECK(v == 2, ScheduleError,
                                   name << " places exactly 2 stages per rank (pipeline.chunks: 2), got " << v);
                      return makeZeroBubbleV(p, m, c, name);
                    }));
    return k;
  }();
  return kinds;
}

}  // namespace

const std::deque<ScheduleKind>& scheduleKinds() { return table(); }

const ScheduleKind* findScheduleKind(const std::string& name) {
  for (auto& k : table()) {
    if (k.name == name) return &k;
  }
  return nullptr;
}

const ScheduleKind& scheduleKind(const std::string& name) {
  if (const auto* k = findScheduleKind(name)) return *k;
  std::string names;
  for (auto& k : table()) names += (names.empty() ? "" : ", ") + k.name;
  throw ScheduleError("unknown schedule '" + name + "' (choose " + names + ")");
}

bool addScheduleKind(ScheduleKind kind) {
  SLUICE_CHECK(!findScheduleKind(kind.name), ScheduleError, "schedule '" << kind.name << "' is already in the table");
  SLUICE_CHECK(kind.build, ScheduleError, "schedule '" << kind.name << "' has no builder");
  table().push_back(namingItsSchedules(std::move(kind)));
  return true;
}

const ScheduleKind& ScheduleChoice::kind() const {
  SLUICE_CHECK(kind_, ScheduleError, "pipeline.schedule auto has no schedule of its own until the plan picks one");
  return *kind_;
}

std::string ScheduleChoice::name() const { return kind_ ? kind_->name : "auto"; }

}  // namespace sluice::pipeline
