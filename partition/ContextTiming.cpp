// timeInContext(): see ContextTiming.h.
#include "partition/ContextTiming.h"

#include "core/Tensors.h"
#include "core/Device.h"

#include <ATen/SequenceNumber.h>
#include <ATen/record_function.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <mutex>
#include <unordered_map>

#include "core/Error.h"
#include "core/GraphSplit.h"
#include "core/NodeProgram.h"
#include "partition/Timing.h"

namespace sluice::partition {
namespace {

using torch::jit::IValue;

// Where the backward callbacks write: one autograd function applied, by
// sequence number. RecordFunction callbacks are plain function pointers, so
// the sink is a global, set only while timeInContext runs a backward.
struct BackwardSink {
  std::mutex mutex;
  struct Applied {
    int64_t sequenceNr;
    Clock::time_point start, end;
  };
  std::vector<Applied> applied;
};
BackwardSink* gSink = nullptr;
// The device timed: on a GPU every timestamp first waits for the device, so
// a node's time is its kernels', not the host's enqueueing of them.
c10::Device gDevice(c10::kCPU);
Clock::time_point deviceNow() {
  synchronize(gDevice);
  return Clock::now();
}
std::mutex gSinkOwner;  // one timeInContext at a time owns the callback

struct StartTime : at::ObserverContext {
  Clock::time_point t0 = deviceNow();
};

std::unique_ptr<at::ObserverContext> onStart(const at::RecordFunction&) { return std::make_unique<StartTime>(); }

void onEnd(const at::RecordFunction& fn, at::ObserverContext* ctx) {
  if (!gSink || !ctx) return;
  const auto t1 = deviceNow();
  std::lock_guard<std::mutex> lock(gSink->mutex);
  gSink->applied.push_back({fn.seqNr(), static_cast<StartTime*>(ctx)->t0, t1});
}

class ForwardTimer : public NodeObserver {
 public:
  explicit ForwardTimer(size_t positions) : start_(positions), end_(positions), firstSeq_(positions, 0), endSeq_(positions, 0) {}
  void beforeNode(int pos, const std::vector<IValue>&) override {
    firstSeq_[pos] = at::sequence_number::peek();
    start_[pos] = deviceNow();
  }
  void afterNode(int pos, const std::vector<IValue>&, const std::vector<IValue>&) override {
    end_[pos] = deviceNow();
    endSeq_[pos] = at::sequence_number::peek();
  }
  std::vector<Interval> intervals() const {
    std::vector<Interval> out;
    for (size_t i = 0; i < start_.size(); ++i) out.push_back({start_[i], end_[i]});
    return out;
  }
  std::vector<Clock::time_point> start_, end_;
  std::vector<uint64_t> firstSeq_, endSeq_;  // node pos created autograd functions [first, end)
};

// Spreads `extra` over `into` in proportion to `weights` (evenly when they sum to 0).
void spread(double extra, const std::vector<double>& weights, std::vector<double>& into) {
  double total = 0;
  for (double w : weights) total += w;
  for (size_t i = 0; i < into.size(); ++i) {
    into[i] += total > 0 ? extra * weights[i] / total : extra / static_cast<double>(into.size());
  }
}

}  // namespace

std::vector<double> secondsUntilNextStart(const std::vector<Interval>& intervals) {
  std::vector<size_t> order(intervals.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return intervals[a].start < intervals[b].start; });
  std::vector<double> out(intervals.size(), 0);
  for (size_t k = 0; k < order.size(); ++k) {
    const auto& self = intervals[order[k]];
    const auto until = k + 1 < order.size() ? std::max(self.end, intervals[order[k + 1]].start) : self.end;
    out[order[k]] = seconds(self.start, until);
  }
  return out;
}

namespace {

// The whole graph's inputs: the data, then copies of the parameters as fresh
// leaves (the gradients must not land on the model's own .grad).
std::vector<IValue> freshStack(const OpGraph& g, const std::vector<torch::Tensor>& inputs, const StageGraph& whole) {
  std::unordered_map<std::string, torch::Tensor> byName;
  std::vector<torch::Tensor> data;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const auto& in = g.inputs()[i];
    if (in.kind == InputKind::Data) {
      data.push_back(inputs[i]);
    } else {
      auto t = inputs[i].detach();
      if (in.kind == InputKind::Parameter && t.is_floating_point()) t.requires_grad_(true);
      byName[in.name] = t;
    }
  }
  std::vector<IValue> stack(data.begin(), data.end());
  for (auto& name : whole.paramInputs) stack.emplace_back(byName.at(name));
  return stack;
}

// One backward from roots, its autograd functions recorded into sink;
// returns its wall time.
double timedBackward(const torch::autograd::edge_list& roots, const std::vector<torch::Tensor>& grads,
                     BackwardSink& sink) {
  gSink = &sink;
  auto handle = at::addGlobalCallback(
      at::RecordFunctionCallback(&onStart, &onEnd).scopes({at::RecordScope::BACKWARD_FUNCTION}));
  const auto b0 = deviceNow();
  try {
    torch::autograd::Engine::get_default_engine().execute(roots, grads, /*keep_graph=*/false,
                                                          /*create_graph=*/false, /*accumulate_grad=*/true);
  } catch (...) {
    at::removeCallback(handle);
    gSink = nullptr;
    throw;
  }
  const double wall = seconds(b0, deviceNow());
  at::removeCallback(handle);
  gSink = nullptr;
  return wall;
}

// Each autograd function's time (until the next one starts, Note [time
// until the next start]) to the node whose forward made it, by its sequence
// number; gradient accumulation spread by parameter bytes; the rest of the
// backward's wall time spread by those times.
void attributeBackward(const BackwardSink& sink, const std::vector<std::pair<uint64_t, int>>& starts,
                       const std::vector<uint64_t>& ends, const std::vector<double>& paramWeight, double bWall,
                       std::vector<double>& b) {
  const int n = static_cast<int>(b.size()) - 1;
  std::vector<Interval> applied;
  for (auto& a : sink.applied) applied.push_back({a.start, a.end});
  const auto appliedSeconds = secondsUntilNextStart(applied);  // Note [time until the next start]
  double accumulate = 0;
  for (size_t k = 0; k < sink.applied.size(); ++k) {
    const auto& a = sink.applied[k];
    const double s = appliedSeconds[k];
    if (a.sequenceNr < 0) {
      accumulate += s;
      continue;
    }
    const auto useq = static_cast<uint64_t>(a.sequenceNr);
    auto it = std::upper_bound(starts.begin(), starts.end(), std::make_pair(useq, n + 1));
    if (it == starts.begin()) continue;
    --it;
    if (useq < ends[it->second]) b[it->second] += s;
  }
  double attributed = 0;
  for (double x : b) attributed += x;
  spread(accumulate, paramWeight, b);
  spread(std::max(0.0, bWall - attributed - accumulate), std::vector<double>(b), b);
}

// Each node's forward time (until the next node starts) into f, and the
// sequence numbers its forward gave autograd functions (starts, ends), for
// the backward's attribution. Returns the sum of the node times.
double attributeForward(const ForwardTimer& timer, const StageGraph& whole, std::vector<double>& f,
                        std::vector<std::pair<uint64_t, int>>& starts, std::vector<uint64_t>& ends) {
  double fSum = 0;
  const auto nodeSeconds = secondsUntilNextStart(timer.intervals());  // in run order
  for (size_t pos = 0; pos < nodeSeconds.size(); ++pos) {
    const int node = whole.nodeIndex[pos];
    if (node < 0) continue;
    f[node] += nodeSeconds[pos];
    fSum += nodeSeconds[pos];
    if (timer.endSeq_[pos] > timer.firstSeq_[pos]) {
      starts.emplace_back(timer.firstSeq_[pos], node);
      ends[node] = timer.endSeq_[pos];
    }
  }
  return fSum;
}

void backwardRoots(const std::vector<torch::Tensor>& outs, torch::autograd::edge_list& roots,
                   std::vector<torch::Tensor>& grads) {
  for (auto& t : outs) {
    if (t.requires_grad()) {
      roots.push_back(torch::autograd::impl::gradient_edge(t));
      grads.push_back(torch::ones_like(t));
    }
  }
}

// The medians over the timed runs: per node, the loss (slot n), the walls.
ContextTimes mediansOf(const std::vector<std::vector<double>>& fwd, const std::vector<std::vector<double>>& bwd,
                       const std::vector<double>& forwardWall, const std::vector<double>& backwardWall) {
  const int n = static_cast<int>(fwd.size()) - 1;
  ContextTimes out;
  out.forwardSeconds.resize(n);
  out.backwardSeconds.resize(n);
  for (int i = 0; i < n; ++i) {
    out.forwardSeconds[i] = median(fwd[i]);
    out.backwardSeconds[i] = median(bwd[i]);
  }
  out.lossForwardSeconds = median(fwd[n]);
  out.lossBackwardSeconds = median(bwd[n]);
  out.forwardWall = median(forwardWall);
  out.backwardWall = median(backwardWall);
  return out;
}

// One run's forward: the graph through the timer, then the loss (if any) on
// its first output. The graph's result comes back with the outputs: the caller
// frees both once it has taken the backward's roots from them.
struct TimedForward {
  std::vector<IValue> result;
  std::vector<torch::Tensor> outs;  // the graph's output tensors, or the loss's value
  uint64_t graphEnd = 0;  // the first sequence number after the graph's forward
  double lossForward = 0, fWall = 0;
};

TimedForward timedForward(const NodeProgram& program, const std::vector<IValue>& stack, ForwardTimer& timer,
                          const LossFunction& loss) {
  TimedForward out;
  const auto f0 = deviceNow();
  out.result = program.run(stack, &timer);
  for (auto& v : out.result) tensorsIn(v, out.outs);
  out.graphEnd = at::sequence_number::peek();
  if (loss) {
    SLUICE_CHECK(!out.outs.empty(), GraphError, "profile: the graph has no tensor output to apply the loss to");
    const auto l0 = deviceNow();
    auto value = loss(out.outs.front());
    out.lossForward = seconds(l0, deviceNow());
    out.outs = {value};
  }
  out.fWall = seconds(f0, deviceNow());
  return out;
}

// One timed run's per-node seconds (slot n the loss), forward into f and
// backward into b, each summing to its pass's wall time.
void attributeRun(const ForwardTimer& timer, const StageGraph& whole, const TimedForward& forward,
                  const BackwardSink& sink, const std::vector<double>& paramWeight, double bWall, bool hasLoss,
                  std::vector<double>& f, std::vector<double>& b) {
  const int n = static_cast<int>(f.size()) - 1;
  // Forward: each node's own time, then the loop's overhead by those times.
  f[n] = forward.lossForward;
  // Sequence ranges per OpGraph node, for the backward's attribution.
  std::vector<std::pair<uint64_t, int>> starts;  // (first sequence number, node), non-empty ranges only
  std::vector<uint64_t> ends(n + 1, 0);
  const double fSum = attributeForward(timer, whole, f, starts, ends);
  spread(std::max(0.0, forward.fWall - fSum - forward.lossForward), std::vector<double>(f), f);
  if (hasLoss) {
    starts.emplace_back(forward.graphEnd, n);  // every function made after the graph's forward is the loss's
    ends[n] = std::numeric_limits<uint64_t>::max();
  }
  std::sort(starts.begin(), starts.end());
  attributeBackward(sink, starts, ends, paramWeight, bWall, b);
}

// The device the inputs live on (the CPU when all do), for deviceNow().
c10::Device deviceOfInputs(const std::vector<torch::Tensor>& inputs) {
  c10::Device device(c10::kCPU);
  for (auto& t : inputs) {
    if (t.defined() && !t.is_cpu()) device = t.device();
  }
  return device;
}

}  // namespace

ContextTimes timeInContext(const OpGraph& g, const std::vector<torch::Tensor>& inputs,
                           const std::vector<int64_t>& nodeParamBytes, int warmup, int iterations,
                           const LossFunction& loss) {
  SLUICE_CHECK(inputs.size() == g.inputs().size(), GraphError,
               "profile: the graph has " << g.inputs().size() << " inputs, got " << inputs.size());
  const int n = g.numNodes();
  gDevice = deviceOfInputs(inputs);
  auto whole = splitGraph(g, {}).at(0);
  auto stack = freshStack(g, inputs, whole);
  NodeProgram program(whole.graph);
  const size_t positions = static_cast<size_t>(program.numNodes());

  // Slot n (one past the graph's nodes) is the loss.
  std::vector<double> paramWeight(n + 1, 0);
  for (int i = 0; i < n && i < static_cast<int>(nodeParamBytes.size()); ++i) paramWeight[i] = nodeParamBytes[i];

  std::lock_guard<std::mutex> owner(gSinkOwner);
  BackwardSink sink;
  std::vector<std::vector<double>> fwd(n + 1), bwd(n + 1);
  std::vector<double> forwardWall, backwardWall;
  for (int run = 0; run < warmup + iterations; ++run) {
    ForwardTimer timer(positions);
    auto forward = timedForward(program, stack, timer, loss);
    torch::autograd::edge_list roots;
    std::vector<torch::Tensor> grads;  // ones, for every output that needs a gradient
    backwardRoots(forward.outs, roots, grads);
    forward.result.clear();
    forward.outs.clear();
    sink.applied.clear();
    double bWall = 0;
    if (!roots.empty()) bWall = timedBackward(roots, grads, sink);
    if (run < warmup) continue;

    std::vector<double> f(n + 1, 0), b(n + 1, 0);
    attributeRun(timer, whole, forward, sink, paramWeight, bWall, static_cast<bool>(loss), f, b);
    for (int i = 0; i <= n; ++i) {
      fwd[i].push_back(f[i]);
      bwd[i].push_back(b[i]);
    }
    forwardWall.push_back(forward.fWall);
    backwardWall.push_back(bWall);
  }
  return mediansOf(fwd, bwd, forwardWall, backwardWall);
}

}  // namespace sluice::partition
