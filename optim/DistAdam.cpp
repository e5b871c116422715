#include "optim/DistAdam.h"

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <cmath>
#include <cstring>
#include <sstream>

#include "core/Error.h"
#include "optim/DistAdamBuckets.h"
#include "optim/FlatLayout.h"
#include "optim/FusedAdamW.h"

namespace sluice::optim {

using torch::optim::AdamWOptions;

DistAdamMode parseDistAdamMode(const std::string& name) {
  for (auto& m : distAdamModes()) {
    if (name == m.name) return m.kind;
  }
  throw OptimError("unknown DistAdam mode '" + name + "' (choose " + choiceNames(distAdamModes()) + ")");
}

std::string toString(DistAdamMode mode) { return choiceName(distAdamModes(), mode); }

// Runs after the parameter's AccumulateGrad wrote .grad (post hooks run after apply()).
class DistAdam::Hook : public torch::autograd::FunctionPostHook {
 public:
  Hook(DistAdam* owner, size_t index) : owner_(owner), index_(index) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list&) override {
    owner_->onGradAccumulated(index_);
    return outputs;
  }

 private:
  DistAdam* owner_;
  size_t index_;
};

DistAdam::DistAdam(std::vector<torch::Tensor> params, Communicator comm, AdamWOptions options, DistAdamMode mode,
                   int expectedRanks, int64_t bucketBytes)
    : torch::optim::Optimizer(params, std::make_unique<AdamWOptions>(options)), comm_(std::move(comm)), mode_(mode) {
  SLUICE_CHECK(comm_.valid(), OptimError, "DistAdam needs a valid communicator");
  SLUICE_CHECK(expectedRanks <= 0 || comm_.size() == expectedRanks, OptimError,
               "DistAdam expects a data-parallel communicator of " << expectedRanks << " ranks but got one of "
                                                                   << comm_.size() << " ranks");
  SLUICE_CHECK(!options.amsgrad(), OptimError, "DistAdam does not implement amsgrad");
  SLUICE_CHECK(bucketBytes >= 4, OptimError, "DistAdam bucket size must be at least 4 bytes, got " << bucketBytes);
  checkSameShapesEverywhere();
  std::vector<int64_t> numels;
  for (size_t i = 0; i < params.size(); ++i) {
    auto& p = params[i];
    SLUICE_CHECK(p.is_floating_point() && p.scalar_type() == torch::kFloat, OptimError,
                 "DistAdam parameter " << i << " must be float32, got " << p.scalar_type());
    SLUICE_CHECK(p.requires_grad() && p.is_leaf(), OptimError,
                 "DistAdam parameter " << i << " must be a leaf tensor that requires grad");
    SLUICE_CHECK(p.is_contiguous(), OptimError, "DistAdam parameter " << i << " must be contiguous");
    numels.push_back(p.numel());
  }
  // AllReduce keeps full state: a one-rank layout of the same buckets.
  const int n = sharded() ? comm_.size() : 1, r = sharded() ? comm_.rank() : 0;
  auto layout = layoutBuckets(numels, std::max<int64_t>(1, bucketBytes / 4), n, r);
  slots_.resize(params.size());
  // Buckets, state and buffers live where the parameters do (one device).
  options_ = params.empty() ? torch::TensorOptions().dtype(torch::kFloat) : params[0].options();
  for (size_t i = 0; i < params.size(); ++i) {
    SLUICE_CHECK(params[i].device() == options_.device(), OptimError,
                 "DistAdam parameter " << i << " is on " << params[i].device() << ", parameter 0 on "
                                       << options_.device() << ": all must be on one device");
  }
  torch::NoGradGuard noGrad;
  for (size_t k = 0; k < layout.size(); ++k) {
    auto b = std::make_unique<Bucket>();
    b->layout = std::move(layout[k]);
    const int64_t shard = b->layout.shard;
    b->grad = torch::zeros({shard * n}, options_);
    b->expAvg = torch::zeros({shard}, options_);
    b->expAvgSq = torch::zeros({shard}, options_);
    for (size_t j = 0; j < b->layout.params.size(); ++j) {
      const size_t i = b->layout.params[j];
      auto s = std::make_unique<Slot>();
      s->param = params[i];
      s->bucket = k;
      s->offset = b->layout.offsets[j];
      s->numel = numels[i];
      s->accumulator = torch::autograd::impl::grad_accumulator(params[i]);
      SLUICE_CHECK(s->accumulator != nullptr, OptimError, "DistAdam parameter " << i << " has no gradient accumulator");
      s->hookKey = s->accumulator->add_post_hook(std::make_unique<Hook>(this, i));
      bindGrad(*s, *b);
      slots_[i] = std::move(s);
    }
    buckets_.push_back(std::move(b));
  }
}

DistAdam::~DistAdam() {
  for (auto& s : slots_) {
    if (s->accumulator) s->accumulator->del_post_hook(s->hookKey);
  }
}

void DistAdam::checkSameShapesEverywhere() {
  // Round 1: parameter counts. Round 2: element counts, padded to the largest count.
  const auto& params = param_groups_.at(0).params();
  auto count = torch::tensor({static_cast<int64_t>(params.size())});
  auto counts = torch::empty({comm_.size()}, torch::kLong);
  comm_.allGather(count, counts);
  for (int r = 0; r < comm_.size(); ++r) {
    SLUICE_CHECK(counts[r].item<int64_t>() == static_cast<int64_t>(params.size()), OptimError,
                 "DistAdam: rank " << comm_.rank() << " has " << params.size() << " parameters but rank " << r
                                   << " has " << counts[r].item<int64_t>() << "; every rank must pass the same parameters");
  }
  const int64_t k = static_cast<int64_t>(params.size());
  if (k == 0) return;
  auto mine = torch::empty({k}, torch::kLong);
  for (int64_t i = 0; i < k; ++i) mine[i] = params[i].numel();
  auto all = torch::empty({comm_.size(), k}, torch::kLong);
  comm_.allGather(mine, all);
  for (int r = 0; r < comm_.size(); ++r) {
    for (int64_t i = 0; i < k; ++i) {
      SLUICE_CHECK(all[r][i].item<int64_t>() == params[i].numel(), OptimError,
                   "DistAdam: parameter " << i << " has shape " << params[i].sizes() << " (" << params[i].numel()
                                          << " elements) on rank " << comm_.rank() << " but "
                                          << all[r][i].item<int64_t>() << " elements on rank " << r
                                          << "; every rank must pass parameters of the same shapes in the same order");
    }
  }
}

void DistAdam::setAccumulationSteps(int steps) {
  SLUICE_CHECK(steps >= 1, OptimError, "accumulation steps must be >= 1, got " << steps);
  for (auto& s : slots_) s->expected = steps;
}

void DistAdam::setAccumulationSteps(const std::vector<int>& perParameter) {
  SLUICE_CHECK(perParameter.size() == slots_.size(), OptimError,
               "setAccumulationSteps: " << perParameter.size() << " counts for " << slots_.size() << " parameters");
  for (size_t i = 0; i < slots_.size(); ++i) {
    SLUICE_CHECK(perParameter[i] >= 1, OptimError,
                 "accumulation steps must be >= 1, got " << perParameter[i] << " for parameter " << i);
    slots_[i]->expected = perParameter[i];
  }
}

void DistAdam::onGradAccumulated(size_t index) {
  auto& s = *slots_[index];
  ++s.accumulated;
  SLUICE_CHECK(s.accumulated <= s.expected, OptimError,
               "DistAdam parameter " << index << " accumulated " << s.accumulated
                                     << " gradients this step but setAccumulationSteps(" << s.expected
                                     << ") was set; call step() or zero_grad() between steps");
  if (mode_ != DistAdamMode::Hooks || s.accumulated != s.expected) return;
  auto& b = *buckets_[s.bucket];
  if (++b.ready == static_cast<int>(b.layout.params.size())) launchReduce(s.bucket);
  progressReductions();
}

// Open MPI progresses nonblocking collectives only inside MPI calls (no
// progress thread by default): without a poke, reductions started by hooks
// sit until step() waits on them, and nothing overlaps backward. Testing the
// oldest unfinished one drives all of them a round further.
void DistAdam::progressReductions() {
  while (!inFlight_.empty()) {
    if (!buckets_[inFlight_.front()]->reduce.test()) return;
    inFlight_.pop_front();
  }
}

// Note [gradient views]: a parameter's .grad shares the storage of its
// bucket's flat buffer (not an autograd view, see below), and AccumulateGrad
// adds into a defined .grad in place (grad mode is off in backward), so
// gradients land in the bucket without a copy; zero_grad (DistAdam's or
// Optimizer's: detach + zero_) keeps the storage. Code that assigns a new
// tensor to .grad breaks the binding: its values are copied in here and the
// binding is put back.
void DistAdam::bindGrad(Slot& s, Bucket& b) {
  auto view = b.grad.narrow(0, s.offset, s.numel);
  const auto& g = s.param.grad();
  const bool bound = g.defined() && g.is_contiguous() && g.numel() == s.numel && g.scalar_type() == torch::kFloat &&
                     g.data_ptr() == view.data_ptr();
  if (bound) return;
  torch::NoGradGuard noGrad;
  if (g.defined()) view.copy_(g.reshape({-1}));
  // Sharing the storage without being an autograd view: Optimizer::zero_grad
  // calls detach_(), which refuses views.
  s.param.mutable_grad() =
      torch::empty({0}, options_).set_(b.grad.storage(), s.offset, s.param.sizes(), s.param.strides());
}

void DistAdam::launchReduce(size_t index) {
  auto& b = *buckets_[index];
  for (size_t i : b.layout.params) bindGrad(*slots_[i], b);
  if (!gathers()) {
    // One rank: its gradient is the average (and the full bucket is its shard).
    b.gradShard = b.grad;
    if (comm_.size() > 1) b.reduce = comm_.iallReduce(b.grad, ReduceOp::Average);
  } else {
    b.gradShard = torch::empty({b.layout.shard}, options_);
    b.reduce = comm_.ireduceScatter(b.grad, b.gradShard, ReduceOp::Average);
  }
  ++launched_;
  inFlight_.push_back(index);
}

// The AdamW update (FusedAdamW.h) of this rank's elements of the bucket,
// segment by segment: in place in each parameter, and into paramShard for the
// all-gather. Each parameter keeps its own step count (per-parameter state
// may have been loaded with different counts).
void DistAdam::updateBucket(Bucket& b) {
  const auto& o = static_cast<const AdamWOptions&>(param_groups_.at(0).options());
  AdamWStep hyper;
  hyper.lr = o.lr();
  hyper.weightDecay = o.weight_decay();
  hyper.eps = o.eps();
  hyper.beta1 = std::get<0>(o.betas());
  hyper.beta2 = std::get<1>(o.betas());
  for (size_t i : b.layout.params) slots_[i]->step += 1;
  for (const auto& seg : b.layout.owned) {
    auto& s = *slots_[seg.param];
    hyper.step = s.step;
    const int64_t at = seg.shardBegin;
    if (!b.grad.is_cpu()) {
      auto p = s.param.view({-1}).narrow(0, seg.paramBegin, seg.length);
      adamWOnDevice(p, b.gradShard.narrow(0, at, seg.length), b.expAvg.narrow(0, at, seg.length),
                    b.expAvgSq.narrow(0, at, seg.length), hyper);
      if (gathers()) b.paramShard.narrow(0, at, seg.length).copy_(p);
      continue;
    }
    fusedAdamW(s.param.data_ptr<float>() + seg.paramBegin, gathers() ? b.paramShard.data_ptr<float>() + at : nullptr,
               b.gradShard.data_ptr<float>() + at, b.expAvg.data_ptr<float>() + at, b.expAvgSq.data_ptr<float>() + at,
               seg.length, hyper);
  }
}

// After the all-gather: every parameter's elements other ranks updated (this
// rank's are already in place).
void DistAdam::copyGathered(Bucket& b) {
  const int64_t lo = comm_.rank() * b.layout.shard, hi = lo + b.layout.shard;
  if (!b.gathered.is_cpu()) {
    for (size_t j = 0; j < b.layout.params.size(); ++j) {
      auto& s = *slots_[b.layout.params[j]];
      const int64_t begin = b.layout.offsets[j], end = begin + s.numel;
      auto flat = s.param.view({-1});
      auto copy = [&](int64_t from, int64_t to) {
        if (from < to) flat.narrow(0, from - begin, to - from).copy_(b.gathered.narrow(0, from, to - from));
      };
      copy(begin, std::min(end, lo));
      copy(std::max(begin, hi), end);
    }
    return;
  }
  float* gathered = b.gathered.data_ptr<float>();
  for (size_t j = 0; j < b.layout.params.size(); ++j) {
    auto& s = *slots_[b.layout.params[j]];
    const int64_t begin = b.layout.offsets[j], end = begin + s.numel;
    float* p = s.param.data_ptr<float>();
    auto copy = [&](int64_t from, int64_t to) {  // flat bucket positions [from, to) of this parameter
      if (from < to) std::memcpy(p + (from - begin), gathered + from, static_cast<size_t>(to - from) * sizeof(float));
    };
    copy(begin, std::min(end, lo));
    copy(std::max(begin, hi), end);
  }
}

// Every parameter had this step's accumulations; the reductions not started
// by hooks start now. Once per step (gradSquares may have called it first).
void DistAdam::startReductions() {
  if (reductionsStarted_) return;
  for (size_t i = 0; i < slots_.size(); ++i) {
    auto& s = *slots_[i];
    SLUICE_CHECK(s.accumulated > 0 && s.param.grad().defined(), OptimError,
                 "DistAdam::step() called without backward: parameter " << i << " " << s.param.sizes()
                                                                        << " received no gradient this step");
    SLUICE_CHECK(s.accumulated == s.expected, OptimError,
                 "DistAdam::step(): parameter " << i << " received " << s.accumulated << " of "
                                                << s.expected << " gradient accumulations");
  }
  if (mode_ != DistAdamMode::Hooks) {
    for (size_t k = 0; k < buckets_.size(); ++k) launchReduce(k);
  }
  reductionsStarted_ = true;
}

torch::Tensor DistAdam::gradSquares(const std::vector<int64_t>& globalIndex, int64_t total) {
  SLUICE_CHECK(globalIndex.size() == slots_.size(), OptimError,
               "DistAdam::gradSquares: " << globalIndex.size() << " indices for " << slots_.size() << " parameters");
  torch::NoGradGuard noGrad;
  startReductions();
  auto squares = torch::zeros({total}, options_.dtype(torch::kDouble));
  // AllReduce: every replica holds the whole average, counted on the first only.
  const bool counts = sharded() || comm_.rank() == 0;
  std::vector<int64_t> at;
  std::vector<torch::Tensor> parts;
  for (auto& b : buckets_) {
    b->reduce.wait();
    if (!counts) continue;
    for (const auto& seg : b->layout.owned) {
      const int64_t index = globalIndex[seg.param];
      if (index < 0) continue;
      at.push_back(index);
      parts.push_back(at::linalg_vector_norm(b->gradShard.narrow(0, seg.shardBegin, seg.length), 2));
    }
  }
  if (!parts.empty()) {
    auto index = torch::tensor(at, torch::kLong).to(options_.device());
    squares.index_add_(0, index, torch::stack(parts).to(torch::kDouble).square());
  }
  return squares;
}

void DistAdam::scaleGradients(const torch::Tensor& factor) {
  torch::NoGradGuard noGrad;
  startReductions();
  for (auto& b : buckets_) {
    b->reduce.wait();
    b->gradShard.mul_(factor);
  }
}

torch::Tensor DistAdam::step(LossClosure closure) {
  torch::NoGradGuard noGrad;
  torch::Tensor loss;
  if (closure) {
    torch::AutoGradMode enable(true);
    loss = closure();
  }
  startReductions();
  const bool traced = trace_ && trace_->active();
  auto wait = [&](Work& request, const char* what, size_t k) {
    if (!traced) return request.wait();
    const auto mark = trace_->current();
    request.wait();
    trace_->add(mark, std::string("wait ") + what + " b" + std::to_string(k), "collective", -1);
  };
  const char* reduction = gathers() ? "reduce-scatter" : "all-reduce";
  auto finish = [&](size_t k) {
    auto& b = *buckets_[k];
    if (gathers()) {
      wait(b.gather, "all-gather", k);
      copyGathered(b);
      b.paramShard = torch::Tensor();
      b.gathered = torch::Tensor();
    }
    // Written through raw pointers: tell autograd, as an in-place op would.
    for (size_t i : b.layout.params) torch::autograd::impl::bump_version(slots_[i]->param);
    b.ready = 0;
  };
  // Buckets in the order their reductions started (the last parameters'
  // first); bucket k's gather runs while k + 1 is updated, then ends (Note
  // [step buffers]).
  for (size_t k = 0; k < buckets_.size(); ++k) {
    auto& b = *buckets_[k];
    wait(b.reduce, reduction, k);
    if (gathers()) {
      b.paramShard = torch::empty({b.layout.shard}, options_);
      b.gathered = torch::empty({b.layout.shard * comm_.size()}, options_);
    }
    updateBucket(b);
    b.gradShard = torch::Tensor();
    if (gathers()) b.gather = comm_.iallGather(b.paramShard, b.gathered);
    if (k > 0) finish(k - 1);
  }
  if (!buckets_.empty()) finish(buckets_.size() - 1);
  for (auto& s : slots_) s->accumulated = 0;
  launched_ = 0;
  reductionsStarted_ = false;
  inFlight_.clear();
  return loss;
}

void DistAdam::zero_grad() {
  torch::NoGradGuard noGrad;
  for (auto& b : buckets_) {
    b->reduce.wait();  // an abandoned reduction still has to finish before its buffers are reused
    b->gradShard = torch::Tensor();
    b->ready = 0;
    b->grad.zero_();
    for (size_t i : b->layout.params) bindGrad(*slots_[i], *b);
  }
  for (auto& s : slots_) s->accumulated = 0;
  launched_ = 0;
  reductionsStarted_ = false;
  inFlight_.clear();
}

int64_t DistAdam::stateBytes() const {
  int64_t total = 0;
  for (auto& b : buckets_) total += static_cast<int64_t>(b->expAvg.nbytes() + b->expAvgSq.nbytes());
  return total;
}

int64_t DistAdam::residentBytes() const {
  int64_t total = stateBytes();
  for (auto& b : buckets_) total += static_cast<int64_t>(b->grad.nbytes());
  return total;
}

}  // namespace sluice::optim
