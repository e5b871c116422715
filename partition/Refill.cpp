// measureRefill(): see Refill.h, Note [refill after a wait].
#include "partition/Refill.h"

#include <torch/csrc/autograd/autograd.h>

#include <algorithm>
#include <cmath>
#include <thread>
#include <unordered_map>

#include "core/Error.h"
#include "core/GraphSplit.h"
#include "core/StageModule.h"
#include "core/SystemInfo.h"
#include "partition/Timing.h"

namespace sluice::partition {
namespace {

// One piece of the graph, run forward and backward on its own, node by node
// as `sluice train` runs a stage (StageModule, eager).
class Piece {
 public:
  Piece(StageGraph stage, int index)
      : stage_(std::move(stage)), module_(stage_.graph, "refill piece " + std::to_string(index), ExecMode::Eager) {}

  const StageGraph& stage() const { return stage_; }

  // Runs the forward on `inputs` (boundary inputs, then parameters), keeps the
  // outputs that need a gradient for backward() and returns every output.
  std::vector<torch::Tensor> forward(const std::vector<torch::Tensor>& inputs) {
    auto outs = module_.forward(inputs);
    roots_.clear();
    for (auto& t : outs) {
      if (t.requires_grad()) roots_.push_back(t);
    }
    return outs;
  }

  // The backward of the last forward, from gradients of ones (a no-op when no
  // output needs a gradient).
  void backward() {
    if (roots_.empty()) return;
    std::vector<torch::Tensor> grads;
    for (auto& t : roots_) grads.push_back(torch::ones_like(t));
    torch::autograd::backward(roots_, grads);
    roots_.clear();
  }

 private:
  StageGraph stage_;
  StageModule module_;
  std::vector<torch::Tensor> roots_;
};

// Idles as a pipeline rank does while it waits for a peer: polls, yielding the core.
void waitIdle(double s) {
  const auto t0 = Clock::now();
  while (seconds(t0, Clock::now()) < s) std::this_thread::yield();
}

template <typename F>
double timed(F&& f) {
  const auto t0 = Clock::now();
  f();
  return seconds(t0, Clock::now());
}

// median(cold - warm) / median(warm), at least 0.
double extraShare(const std::vector<double>& warm, const std::vector<double>& cold) {
  std::vector<double> extra;
  for (size_t r = 0; r < warm.size(); ++r) extra.push_back(cold[r] - warm[r]);
  const double base = median(warm);
  return base > 0 ? std::max(0.0, median(extra) / base) : 0.0;
}


// The graph cut into the pieces to time, and each piece's inputs from one
// forward of the chain: what the piece before it hands over (leaves where a
// gradient flows back), then its parameters. Fresh leaves: the gradients must
// not land on the model's own .grad.
std::pair<std::vector<Piece>, std::vector<std::vector<torch::Tensor>>> preparePieces(
    const OpGraph& graph, const std::vector<torch::Tensor>& inputs, const Profile& profile,
    const RefillOptions& options) {
  std::unordered_map<std::string, torch::Tensor> paramByName, valueByName;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const auto& in = graph.inputs()[i];
    if (in.kind == InputKind::Data) {
      valueByName[in.value.name] = inputs[i];
    } else {
      auto t = inputs[i].detach();
      if (in.kind == InputKind::Parameter && t.is_floating_point()) t.requires_grad_(true);
      paramByName[in.name] = t;
    }
  }
  std::vector<Piece> pieces;
  for (auto& st : splitGraph(graph, refillCuts(graph, profile, options.pieces))) {
    pieces.emplace_back(std::move(st), static_cast<int>(pieces.size()));
  }
  std::vector<std::vector<torch::Tensor>> stacks;
  for (auto& piece : pieces) {
    const auto& st = piece.stage();
    std::vector<torch::Tensor> stack;
    for (auto& b : st.boundaryInputs) {
      auto t = valueByName.at(b.name);
      if (st.index > 0) {
        t = t.detach();
        if (b.requiresGrad && t.is_floating_point()) t.requires_grad_(true);
      }
      stack.push_back(t);
    }
    for (auto& name : st.paramInputs) stack.push_back(paramByName.at(name));
    auto outs = piece.forward(stack);
    for (size_t j = 0; j < outs.size() && j < st.outputs.size(); ++j) valueByName[st.outputs[j].name] = outs[j].detach();
    piece.backward();
    stacks.push_back(std::move(stack));
  }
  return {std::move(pieces), std::move(stacks)};
}

// The rounds to run: options.rounds, or (0) as many as fit in the budget.
int refillRounds(const Profile& profile, const RefillOptions& options, size_t n) {
  int rounds = options.rounds;
  if (rounds == 0) {  // the same on every rank: from the (averaged) profile
    const double model = profile.totalForward() + profile.totalBackward();
    const double perRound = (1 + 2 * options.passes) * model + static_cast<double>(n * options.passes) * options.waitSeconds;
    rounds = std::clamp(static_cast<int>(options.budgetSeconds / std::max(perRound, 1e-9)), 3, 8);
  }
  return rounds;
}

// One forward and backward of piece k on its inputs.
void runPass(std::vector<Piece>& pieces, const std::vector<std::vector<torch::Tensor>>& stacks, size_t k) {
  pieces[k].forward(stacks[k]);
  pieces[k].backward();
}

// On the measuring rank: piece k's median pass back to back (warm, times[0])
// and right after a wait (cold, times[1]).
void measureWarmCold(std::vector<Piece>& pieces, const std::vector<std::vector<torch::Tensor>>& stacks, size_t k,
                     const RefillOptions& options, torch::Tensor& times) {
  // Medians of short blocks: a single pass here varies by +-20% from one to the next.
  std::vector<double> w, c;
  runPass(pieces, stacks, k);  // untimed: the piece's own data in cache, as a stage running back to back
  for (int i = 0; i < options.passes; ++i) w.push_back(timed([&] { runPass(pieces, stacks, k); }));
  for (int i = 0; i < options.passes; ++i) {
    waitIdle(options.waitSeconds);
    c.push_back(timed([&] { runPass(pieces, stacks, k); }));
  }
  times[0] = median(w);
  times[1] = median(c);
}

// Piece k's turn in a round: the measuring rank times it while the others
// run other pieces beside it (next: a co-runner's next piece) or wait; the
// sum over the ranks gives every rank its (warm, cold) times.
std::pair<double, double> pieceTimes(const Communicator& comm, bool measures, std::vector<Piece>& pieces,
                                     const std::vector<std::vector<torch::Tensor>>& stacks, size_t k,
                                     const RefillOptions& options, size_t& next) {
  const size_t n = pieces.size();
  comm.barrier();
  auto times = torch::zeros({2}, torch::kFloat64);
  if (measures) {
    measureWarmCold(pieces, stacks, k, options, times);
    comm.iallReduce(times).wait();
  } else if (hostOversubscribed()) {
    comm.iallReduce(times).wait();  // a busy co-runner would take the measuring rank's core
  } else {
    auto done = comm.iallReduce(times);
    while (!done.test()) {
      if (n > 1 && next == k) next = (next + 1) % n;
      runPass(pieces, stacks, next);
      next = (next + 1) % n;
    }
  }
  return {times[0].item<double>(), times[1].item<double>()};
}

}  // namespace

std::vector<int> refillCuts(const OpGraph& graph, const Profile& profile, int pieces) {
  const int n = graph.numNodes();
  SLUICE_CHECK(static_cast<int>(profile.nodes.size()) == n, GraphError,
               "refill: the profile has " << profile.nodes.size() << " nodes, the graph " << n);
  std::vector<double> prefix(n + 1, 0);
  for (int i = 0; i < n; ++i) {
    prefix[i + 1] = prefix[i] + profile.nodes[i].forwardSeconds + profile.nodes[i].backwardSeconds;
  }
  const auto valid = graph.validCuts();
  std::vector<int> cuts;
  for (int k = 1; k < pieces; ++k) {
    const double target = prefix[n] * k / pieces;
    int best = -1;
    for (int c : valid) {
      if (c <= 0 || c >= n || (!cuts.empty() && c <= cuts.back())) continue;
      if (best < 0 || std::abs(prefix[c] - target) < std::abs(prefix[best] - target)) best = c;
    }
    if (best >= 0) cuts.push_back(best);
  }
  return cuts;
}

double refillShare(const Profile& profile, int first, int end) {
  double weighted = 0, total = 0;
  for (auto& piece : profile.refill.pieces) {
    for (int j = std::max(first, piece.firstNode); j < std::min(end, piece.endNode); ++j) {
      const double t = profile.nodes.at(j).forwardSeconds + profile.nodes.at(j).backwardSeconds;
      weighted += piece.share * t;
      total += t;
    }
  }
  return total > 0 ? weighted / total : 0.0;
}

RefillProfile measureRefill(const OpGraph& graph, const std::vector<torch::Tensor>& inputs, const Profile& profile,
                            const Communicator& comm, const RefillOptions& options) {
  SLUICE_CHECK(inputs.size() == graph.inputs().size(), GraphError,
               "refill: the graph has " << graph.inputs().size() << " inputs, got " << inputs.size());
  SLUICE_CHECK(options.pieces >= 1 && options.rounds >= 0 && options.passes >= 1 && options.waitSeconds > 0,
               GraphError, "refill: pieces and passes must be >= 1, rounds >= 0 and the wait > 0");
  auto prepared = preparePieces(graph, inputs, profile, options);
  auto& pieces = prepared.first;
  auto& stacks = prepared.second;
  // Round r is measured by rank r % size, one piece after another, while the
  // other ranks run the other pieces back to back beside it, as a busy
  // neighbour stage runs the rest of the model while a light one waits. Each
  // piece ends with a sum over the ranks that gives every rank the measurer's
  // times (the others add zeros).
  const size_t n = pieces.size();
  std::vector<std::vector<double>> warm(n), cold(n);
  size_t next = 0;  // a co-runner's next piece
  const int rounds = refillRounds(profile, options, n);
  for (int round = 0; round < rounds; ++round) {
    const bool measures = round % comm.size() == comm.rank();
    for (size_t k = 0; k < n; ++k) {
      const auto [w, c] = pieceTimes(comm, measures, pieces, stacks, k, options, next);
      warm[k].push_back(w);
      cold[k].push_back(c);
    }
  }
  RefillProfile out;
  out.waitSeconds = options.waitSeconds;
  out.rounds = rounds;
  for (size_t k = 0; k < n; ++k) {
    const auto& st = pieces[k].stage();
    out.pieces.push_back({st.firstNode, st.endNode, extraShare(warm[k], cold[k])});
  }
  return out;
}

}  // namespace sluice::partition
