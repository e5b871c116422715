#include "pipeline/Schedule.h"

#include <algorithm>
#include <sstream>

#include "core/Error.h"

namespace sluice::pipeline {
namespace {

void appendForward(std::vector<Action>& out, int stage, int stages, int mb) {
  if (stage > 0) out.push_back({ActionKind::RecvActivation, mb});
  out.push_back({ActionKind::Forward, mb});
  if (stage < stages - 1) out.push_back({ActionKind::SendActivation, mb});
}

void appendBackward(std::vector<Action>& out, int stage, int stages, int mb) {
  if (stage < stages - 1) out.push_back({ActionKind::RecvGrad, mb});
  out.push_back({ActionKind::Backward, mb});
  if (stage > 0) out.push_back({ActionKind::SendGrad, mb});
}

void checkDims(int stages, int microBatches) {
  SLUICE_CHECK(stages >= 1, ScheduleError, "a schedule needs at least 1 stage (got " << stages << ")");
  SLUICE_CHECK(microBatches >= 1, ScheduleError, "a schedule needs at least 1 micro-batch (got " << microBatches << ")");
}

}  // namespace

Schedule makeGPipe(int stages, int microBatches) {
  checkDims(stages, microBatches);
  Schedule s{"gpipe", stages, microBatches, std::vector<std::vector<Action>>(stages)};
  for (int st = 0; st < stages; ++st) {
    for (int mb = 0; mb < microBatches; ++mb) appendForward(s.actions[st], st, stages, mb);
    for (int mb = 0; mb < microBatches; ++mb) appendBackward(s.actions[st], st, stages, mb);
  }
  return s;
}

Schedule make1F1B(int stages, int microBatches) {
  checkDims(stages, microBatches);
  Schedule s{"1f1b", stages, microBatches, std::vector<std::vector<Action>>(stages)};
  for (int st = 0; st < stages; ++st) {
    auto& out = s.actions[st];
    const int warmup = std::min(stages - st - 1, microBatches);
    int nextF = 0, nextB = 0;
    for (; nextF < warmup; ++nextF) appendForward(out, st, stages, nextF);
    while (nextF < microBatches) {
      appendForward(out, st, stages, nextF++);
      appendBackward(out, st, stages, nextB++);
    }
    while (nextB < microBatches) appendBackward(out, st, stages, nextB++);
  }
  return s;
}

Schedule makeSchedule(const std::string& name, int stages, int microBatches) {
  if (name == "gpipe") return makeGPipe(stages, microBatches);
  if (name == "1f1b") return make1F1B(stages, microBatches);
  throw ScheduleError("unknown schedule '" + name + "' (choose gpipe or 1f1b)");
}

std::string toString(ActionKind kind) {
  switch (kind) {
    case ActionKind::RecvActivation: return "recv_act";
    case ActionKind::Forward: return "F";
    case ActionKind::SendActivation: return "send_act";
    case ActionKind::RecvGrad: return "recv_grad";
    case ActionKind::Backward: return "B";
    case ActionKind::SendGrad: return "send_grad";
  }
  return "?";
}

std::string toString(const Action& a) { return toString(a.kind) + std::to_string(a.microBatch); }

std::string toString(const Schedule& s) {
  std::ostringstream os;
  os << s.name << " (stages=" << s.stages << ", micro-batches=" << s.microBatches << ")\n";
  for (int st = 0; st < s.stages; ++st) {
    os << "  stage " << st << ":";
    for (auto& a : s.actions[st]) os << " " << toString(a);
    os << "\n";
  }
  return os.str();
}

std::vector<int> peakInFlight(const Schedule& s) {
  std::vector<int> peak(s.stages, 0);
  for (int st = 0; st < s.stages; ++st) {
    int live = 0;
    for (auto& a : s.actions[st]) {
      if (a.kind == ActionKind::Forward) peak[st] = std::max(peak[st], ++live);
      if (a.kind == ActionKind::Backward) --live;
    }
  }
  return peak;
}

}  // namespace sluice::pipeline
