#include "core/DeviceTrace.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <map>
#include <set>
#include <unordered_map>

#include <kineto/ActivityType.h>
#include <torch/csrc/autograd/profiler_kineto.h>

#include "core/Error.h"

namespace sluice {
namespace {

namespace prof = torch::autograd::profiler;
namespace impl = torch::profiler::impl;
using Kind = libkineto::ActivityType;

double realtimeUs() {
  timespec t{};
  clock_gettime(CLOCK_REALTIME, &t);
  return static_cast<double>(t.tv_sec) * 1e6 + static_cast<double>(t.tv_nsec) / 1e3;
}

// Steady minus realtime clock, in microseconds: the smallest bracket of 5 reads wins.
double steadyMinusRealUs() {
  double best = 1e300, offset = 0;
  for (int k = 0; k < 5; ++k) {
    const double a = TraceRecorder::nowUs(), r = realtimeUs(), b = TraceRecorder::nowUs();
    if (b - a < best) {
      best = b - a;
      offset = (a + b) / 2 - r;
    }
  }
  return offset;
}

bool waitsForDevice(const std::string& name) {
  return name.find("Synchronize") != std::string::npos || name == "cudaMemcpy" || name == "cudaMemcpy2D";
}

// The `n` largest totals, most first.
std::vector<std::pair<std::string, double>> top(const std::map<std::string, double>& totals, size_t n) {
  std::vector<std::pair<std::string, double>> v(totals.begin(), totals.end());
  std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  if (v.size() > n) v.resize(n);
  return v;
}

struct Span {
  double start, dur;
  std::string name;
};

// Self time per op name over one thread's ops: an op's duration less its direct children's.
void addSelfTimes(std::vector<Span> spans, std::map<std::string, double>& self) {
  std::sort(spans.begin(), spans.end(),
            [](const Span& a, const Span& b) { return a.start != b.start ? a.start < b.start : a.dur > b.dur; });
  std::vector<const Span*> stack;
  for (const auto& s : spans) {
    while (!stack.empty() && s.start >= stack.back()->start + stack.back()->dur) stack.pop_back();
    self[s.name] += s.dur;
    if (!stack.empty()) self[stack.back()->name] -= std::min(s.dur, stack.back()->dur);
    stack.push_back(&s);
  }
}

// One traced step's profiler events: the trace events to add and what the summary is built from.
struct StepEvents {
  std::vector<TraceEvent> out;
  std::unordered_map<uint64_t, std::vector<Span>> threads;  // host ops by thread
  std::unordered_map<uint64_t, int> threadIndex;              // other threads, numbered in order of appearance
  std::unordered_map<uint64_t, double> launches;              // correlation id -> launch call start (us)
  std::vector<std::pair<double, double>> kernelSpans;
  std::vector<std::pair<uint64_t, double>> kernelStarts;  // (correlation id, start)
  std::map<std::string, double> kernelTime;
  double first = 1e300, last = -1e300;
};

// Sorts the profiler's events, shifted onto the steady clock, into host ops, device work and syncs;
// counts them in `s` (whose step tags the trace events).
StepEvents collectStepEvents(const prof::ProfilerResult& result, double steadyMinusRealUs, DeviceStepSummary& s) {
  const int64_t step = s.step;
  const uint64_t self = at::RecordFunction::currentThreadId();
  StepEvents ev;
  for (const auto& e : result.events()) {
    if (e.isHiddenEvent()) continue;
    const double start = static_cast<double>(e.startNs()) / 1e3 + steadyMinusRealUs;
    const double dur = static_cast<double>(e.durationNs()) / 1e3;
    ev.first = std::min(ev.first, start);
    ev.last = std::max(ev.last, start + dur);
    const auto kind = static_cast<Kind>(e.activityType());
    const std::string name = e.name();
    if (kind == Kind::CPU_OP) {
      ++s.ops;
      const uint64_t tid = e.startThreadId();
      std::string stream = "ops";
      if (tid != self) {
        const auto it = ev.threadIndex.emplace(tid, static_cast<int>(ev.threadIndex.size()) + 1).first;
        stream = "ops (thread " + std::to_string(it->second) + ")";
      }
      ev.threads[tid].push_back({start, dur, name});
      ev.out.push_back({name, stream, "op", step, -1, start, dur});
    } else if (kind == Kind::CONCURRENT_KERNEL || kind == Kind::GPU_MEMCPY || kind == Kind::GPU_MEMSET) {
      ++s.kernels;
      ev.kernelSpans.emplace_back(start, start + dur);
      ev.kernelStarts.emplace_back(e.correlationId(), start);
      ev.kernelTime[name] += dur;
      const char* cat = kind == Kind::CONCURRENT_KERNEL ? "kernel" : kind == Kind::GPU_MEMCPY ? "memcpy" : "memset";
      ev.out.push_back({name, "kernels", cat, step, -1, start, dur});
    } else if (kind == Kind::CUDA_RUNTIME || kind == Kind::CUDA_DRIVER) {
      ev.launches[e.correlationId()] = start;
      if (waitsForDevice(name)) {
        ++s.syncs;
        ev.out.push_back({name, "syncs", "sync", step, -1, start, dur});
      }
    }
  }
  return ev;
}

// How far the host ran ahead of the device: per kernel, its start minus its launch call's start.
void setHostLead(const std::vector<std::pair<uint64_t, double>>& kernelStarts,
                 const std::unordered_map<uint64_t, double>& launches, DeviceStepSummary& s) {
  std::vector<double> leads;
  for (const auto& [corr, start] : kernelStarts) {
    const auto it = launches.find(corr);
    if (it != launches.end()) leads.push_back(start - it->second);
  }
  if (!leads.empty()) {
    std::sort(leads.begin(), leads.end());
    s.leadMedianUs = leads[leads.size() / 2];
    s.leadMaxUs = leads.back();
  }
}

double unionUs(std::vector<std::pair<double, double>> iv) {
  std::sort(iv.begin(), iv.end());
  double total = 0, curStart = 0, curEnd = -1e300;
  for (const auto& [a, b] : iv) {
    if (a > curEnd) {
      if (curEnd > curStart) total += curEnd - curStart;
      curStart = a;
      curEnd = b;
    } else {
      curEnd = std::max(curEnd, b);
    }
  }
  if (curEnd > curStart) total += curEnd - curStart;
  return total;
}

std::string ms(double us) {
  char b[32];
  std::snprintf(b, sizeof(b), "%.2f ms", us / 1e3);
  return b;
}

std::string listed(const std::vector<std::pair<std::string, double>>& v) {
  std::string out;
  for (const auto& [name, us] : v) {
    out += (out.empty() ? "" : ", ") + (name.size() > 60 ? name.substr(0, 57) + "..." : name) + " " + ms(us);
  }
  return out;
}

}  // namespace

std::string describe(const DeviceStepSummary& s) {
  std::string out = "device trace, step " + std::to_string(s.step) + " (" + ms(s.stepUs) +
                    "): " + std::to_string(s.ops) + " host ops; top self time: " + listed(s.topOps);
  if (s.kernels == 0) return out + "; no device kernels (host-only run)";
  char b[200];
  std::snprintf(b, sizeof(b), "; %lld kernels busy %s (%.0f%% of the step); %lld host-device syncs",
                static_cast<long long>(s.kernels), ms(s.kernelBusyUs).c_str(),
                s.stepUs > 0 ? 100 * s.kernelBusyUs / s.stepUs : 0.0, static_cast<long long>(s.syncs));
  out += b;
  out += "; host ahead of device: median " + ms(s.leadMedianUs) + ", max " + ms(s.leadMaxUs);
  return out + "; top kernels: " + listed(s.topKernels);
}

DeviceTrace::~DeviceTrace() {
  if (!active_) return;
  try {
    prof::disableProfiler();
  } catch (...) {
  }
}

void DeviceTrace::start() {
  SLUICE_CHECK(!active_, Error, "the device trace is already recording");
  // Without a GPU, Kineto logs an ERROR line that it found none; only its own
  // errors above that level are wanted on a host-only run (the user may still set it).
  if (!cuda_) ::setenv("KINETO_LOG_LEVEL", "5", /*overwrite=*/0);
  std::set<impl::ActivityType> activities{impl::ActivityType::CPU};
  if (cuda_) activities.insert(impl::ActivityType::CUDA);
  const impl::ProfilerConfig config(impl::ProfilerState::KINETO);
  prof::prepareProfiler(config, activities);
  prof::enableProfiler(config, activities);
  steadyMinusRealUs_ = steadyMinusRealUs();
  active_ = true;
}

DeviceStepSummary DeviceTrace::stop(TraceRecorder& trace, int64_t step) {
  SLUICE_CHECK(active_, Error, "the device trace was not started");
  active_ = false;
  const auto result = prof::disableProfiler();
  DeviceStepSummary s;
  s.step = step;
  StepEvents ev = collectStepEvents(*result, steadyMinusRealUs_, s);
  std::map<std::string, double> selfTime;
  for (auto& [tid, spans] : ev.threads) addSelfTimes(std::move(spans), selfTime);
  setHostLead(ev.kernelStarts, ev.launches, s);
  s.kernelBusyUs = unionUs(std::move(ev.kernelSpans));
  s.stepUs = ev.last > ev.first ? ev.last - ev.first : 0;
  s.topOps = top(selfTime, 8);
  s.topKernels = top(ev.kernelTime, 8);
  trace.addEvents(std::move(ev.out));
  return s;
}

}  // namespace sluice
