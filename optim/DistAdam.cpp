#include "optim/DistAdam.h"

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <cmath>
#include <sstream>

#include "core/Error.h"

namespace sluice::optim {

using torch::optim::AdamWOptions;

DistAdamMode parseDistAdamMode(const std::string& name) {
  if (name == "hooks") return DistAdamMode::Hooks;
  if (name == "after_backward") return DistAdamMode::AfterBackward;
  if (name == "allreduce") return DistAdamMode::AllReduce;
  throw OptimError("unknown DistAdam mode '" + name + "' (choose hooks, after_backward or allreduce)");
}

std::string toString(DistAdamMode mode) {
  switch (mode) {
    case DistAdamMode::Hooks: return "hooks";
    case DistAdamMode::AfterBackward: return "after_backward";
    case DistAdamMode::AllReduce: return "allreduce";
  }
  return "?";
}

// Per-parameter state. Sharded modes: this rank owns flat elements
// [begin, begin + valid) of the parameter; buffers are padded to `shard`.
struct DistAdam::Slot {
  torch::Tensor param;
  int64_t numel = 0, shard = 0, begin = 0, valid = 0;
  torch::Tensor expAvg, expAvgSq;  // [shard] (AllReduce: [numel])
  int64_t step = 0;
  int accumulated = 0;
  bool reduceStarted = false;
  torch::Tensor gradPadded, gradShard, paramShard, gathered;
  Work reduce, gather;
  std::shared_ptr<torch::autograd::Node> accumulator;  // kept alive: the hook lives on it
  uintptr_t hookKey = 0;
};

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
                   int expectedRanks)
    : torch::optim::Optimizer(params, std::make_unique<AdamWOptions>(options)), comm_(std::move(comm)), mode_(mode) {
  SLUICE_CHECK(comm_.valid(), OptimError, "DistAdam needs a valid communicator");
  SLUICE_CHECK(expectedRanks <= 0 || comm_.size() == expectedRanks, OptimError,
               "DistAdam expects a data-parallel communicator of " << expectedRanks << " ranks but got one of "
                                                                   << comm_.size() << " ranks");
  SLUICE_CHECK(!options.amsgrad(), OptimError, "DistAdam does not implement amsgrad");
  checkSameShapesEverywhere();
  const int n = comm_.size(), r = comm_.rank();
  for (size_t i = 0; i < params.size(); ++i) {
    auto& p = params[i];
    SLUICE_CHECK(p.is_floating_point() && p.scalar_type() == torch::kFloat, OptimError,
                 "DistAdam parameter " << i << " must be float32, got " << p.scalar_type());
    SLUICE_CHECK(p.requires_grad() && p.is_leaf(), OptimError,
                 "DistAdam parameter " << i << " must be a leaf tensor that requires grad");
    auto s = std::make_unique<Slot>();
    s->param = p;
    s->numel = p.numel();
    if (mode_ == DistAdamMode::AllReduce) {
      s->shard = s->numel;
      s->begin = 0;
      s->valid = s->numel;
    } else {
      s->shard = (s->numel + n - 1) / n;
      s->begin = std::min<int64_t>(s->numel, r * s->shard);
      s->valid = std::min<int64_t>(s->shard, s->numel - s->begin);
      s->gradPadded = torch::zeros({s->shard * n});  // the padded tail stays zero
      s->gradShard = torch::empty({s->shard});
      s->paramShard = torch::zeros({s->shard});
      s->gathered = torch::empty({s->shard * n});
    }
    s->expAvg = torch::zeros({s->shard});
    s->expAvgSq = torch::zeros({s->shard});
    s->accumulator = torch::autograd::impl::grad_accumulator(p);
    SLUICE_CHECK(s->accumulator != nullptr, OptimError, "DistAdam parameter " << i << " has no gradient accumulator");
    s->hookKey = s->accumulator->add_post_hook(std::make_unique<Hook>(this, i));
    slots_.push_back(std::move(s));
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
  accumulationSteps_ = steps;
}

void DistAdam::onGradAccumulated(size_t index) {
  auto& s = *slots_[index];
  ++s.accumulated;
  SLUICE_CHECK(s.accumulated <= accumulationSteps_, OptimError,
               "DistAdam parameter " << index << " accumulated " << s.accumulated
                                     << " gradients this step but setAccumulationSteps(" << accumulationSteps_
                                     << ") was set; call step() or zero_grad() between steps");
  if (mode_ == DistAdamMode::Hooks && s.accumulated == accumulationSteps_) {
    launchReduce(index);
    progressReductions();
  }
}

// Open MPI progresses nonblocking collectives only inside MPI calls (no
// progress thread by default): without a poke, reductions started by hooks
// sit until step() waits on them, and nothing overlaps backward. Testing the
// oldest unfinished one drives all of them a round further.
void DistAdam::progressReductions() {
  while (!inFlight_.empty()) {
    auto& s = *slots_[inFlight_.front()];
    if (!s.reduce.test()) return;
    inFlight_.pop_front();
  }
}

void DistAdam::launchReduce(size_t index) {
  auto& s = *slots_[index];
  auto grad = s.param.grad();
  if (mode_ == DistAdamMode::AllReduce) {
    if (!grad.is_contiguous()) s.param.mutable_grad() = grad = grad.contiguous();
    s.reduce = comm_.iallReduce(grad, ReduceOp::Average);
  } else {
    s.gradPadded.narrow(0, 0, s.numel).copy_(grad.reshape({-1}));
    s.reduce = comm_.ireduceScatter(s.gradPadded, s.gradShard, ReduceOp::Average);
  }
  s.reduceStarted = true;
  ++launched_;
  inFlight_.push_back(index);
}

// The AdamW update of torch::optim::AdamW (LibTorch 1.13), on this rank's elements.
void DistAdam::updateShard(size_t index, Slot& s) {
  const auto& o = static_cast<const AdamWOptions&>(param_groups_.at(0).options());
  const double lr = o.lr(), wd = o.weight_decay(), eps = o.eps();
  const double beta1 = std::get<0>(o.betas()), beta2 = std::get<1>(o.betas());
  s.step += 1;
  if (s.valid == 0) return;  // this rank's shard is all padding
  torch::Tensor p, g;
  if (mode_ == DistAdamMode::AllReduce) {
    p = s.param.detach().view({-1});
    g = s.param.grad().view({-1});
  } else {
    s.paramShard.narrow(0, 0, s.valid).copy_(s.param.detach().reshape({-1}).narrow(0, s.begin, s.valid));
    p = s.paramShard.narrow(0, 0, s.valid);
    g = s.gradShard.narrow(0, 0, s.valid);
  }
  auto m = s.expAvg.narrow(0, 0, s.valid), v = s.expAvgSq.narrow(0, 0, s.valid);
  if (wd != 0) p.mul_(1 - lr * wd);
  const double bc1 = 1 - std::pow(beta1, static_cast<double>(s.step));
  const double bc2 = 1 - std::pow(beta2, static_cast<double>(s.step));
  m.mul_(beta1).add_(g, 1 - beta1);
  v.mul_(beta2).addcmul_(g, g, 1 - beta2);
  auto denom = (v.sqrt() / std::sqrt(bc2)).add_(eps);
  p.addcdiv_(m, denom, -lr / bc1);
}

torch::Tensor DistAdam::step(LossClosure closure) {
  torch::NoGradGuard noGrad;
  torch::Tensor loss;
  if (closure) {
    torch::AutoGradMode enable(true);
    loss = closure();
  }
  for (size_t i = 0; i < slots_.size(); ++i) {
    auto& s = *slots_[i];
    SLUICE_CHECK(s.accumulated > 0 && s.param.grad().defined(), OptimError,
                 "DistAdam::step() called without backward: parameter " << i << " " << s.param.sizes()
                                                                        << " received no gradient this step");
    SLUICE_CHECK(s.accumulated == accumulationSteps_, OptimError,
                 "DistAdam::step(): parameter " << i << " received " << s.accumulated << " of "
                                                << accumulationSteps_ << " gradient accumulations");
  }
  if (mode_ != DistAdamMode::Hooks) {
    for (size_t i = 0; i < slots_.size(); ++i) launchReduce(i);
  }
  // Reverse order: the last parameters' gradients were ready (and reduced) first.
  const bool traced = trace_ && trace_->active();
  auto wait = [&](auto& request, const char* what, size_t k) {
    if (!traced) return request.wait();
    const auto mark = trace_->current();
    request.wait();
    trace_->add(mark, std::string("wait ") + what + " p" + std::to_string(k), "collective", -1);
  };
  const char* reduction = mode_ == DistAdamMode::AllReduce ? "all-reduce" : "reduce-scatter";
  for (size_t k = slots_.size(); k-- > 0;) {
    auto& s = *slots_[k];
    wait(s.reduce, reduction, k);
    updateShard(k, s);
    if (mode_ != DistAdamMode::AllReduce) s.gather = comm_.iallGather(s.paramShard, s.gathered);
  }
  for (size_t k = slots_.size(); k-- > 0;) {
    auto& s = *slots_[k];
    if (mode_ != DistAdamMode::AllReduce) {
      wait(s.gather, "all-gather", k);
      s.param.detach().view({-1}).copy_(s.gathered.narrow(0, 0, s.numel));
    }
    s.accumulated = 0;
    s.reduceStarted = false;
  }
  launched_ = 0;
  inFlight_.clear();
  return loss;
}

void DistAdam::zero_grad() {
  for (auto& s : slots_) {
    s->reduce.wait();  // an abandoned reduction still has to finish before its buffers are reused
    s->accumulated = 0;
    s->reduceStarted = false;
    auto& g = s->param.mutable_grad();
    if (g.defined()) {
      g = g.detach();
      g.zero_();
    }
  }
  launched_ = 0;
  inFlight_.clear();
}

int64_t DistAdam::stateBytes() const {
  int64_t total = 0;
  for (auto& s : slots_) total += static_cast<int64_t>(s->expAvg.nbytes() + s->expAvgSq.nbytes());
  return total;
}

void DistAdam::save(torch::serialize::OutputArchive& archive) const {
  archive.write("meta", torch::tensor({static_cast<int64_t>(comm_.size()), static_cast<int64_t>(comm_.rank()),
                                       static_cast<int64_t>(slots_.size()), static_cast<int64_t>(mode_)}));
  for (size_t i = 0; i < slots_.size(); ++i) {
    archive.write(std::to_string(i) + ".exp_avg", slots_[i]->expAvg);
    archive.write(std::to_string(i) + ".exp_avg_sq", slots_[i]->expAvgSq);
    archive.write(std::to_string(i) + ".step", torch::tensor({slots_[i]->step}));
  }
}

void DistAdam::load(torch::serialize::InputArchive& archive) {
  torch::Tensor meta;
  archive.read("meta", meta);
  const int64_t ranks = meta[0].item<int64_t>(), rank = meta[1].item<int64_t>(), count = meta[2].item<int64_t>();
  SLUICE_CHECK(ranks == comm_.size() && rank == comm_.rank() && count == static_cast<int64_t>(slots_.size()) &&
                   meta[3].item<int64_t>() == static_cast<int64_t>(mode_),
               OptimError,
               "DistAdam state was saved by rank " << rank << " of " << ranks << " with " << count
                                                   << " parameters (mode " << meta[3].item<int64_t>()
                                                   << "); this is rank " << comm_.rank() << " of " << comm_.size()
                                                   << " with " << slots_.size() << " parameters");
  for (size_t i = 0; i < slots_.size(); ++i) {
    torch::Tensor m, v, st;
    archive.read(std::to_string(i) + ".exp_avg", m);
    archive.read(std::to_string(i) + ".exp_avg_sq", v);
    archive.read(std::to_string(i) + ".step", st);
    SLUICE_CHECK(m.sizes() == slots_[i]->expAvg.sizes(), OptimError,
                 "DistAdam state for parameter " << i << " has shape " << m.sizes() << ", expected "
                                                 << slots_[i]->expAvg.sizes());
    slots_[i]->expAvg.copy_(m);
    slots_[i]->expAvgSq.copy_(v);
    slots_[i]->step = st.item<int64_t>();
  }
}

std::vector<DistAdam::FullState> DistAdam::fullState() {
  std::vector<FullState> out;
  const int n = comm_.size();
  for (auto& s : slots_) {
    FullState f;
    f.step = s->step;
    auto shape = s->param.sizes();
    if (mode_ == DistAdamMode::AllReduce) {
      f.expAvg = s->expAvg.clone().view(shape);
      f.expAvgSq = s->expAvgSq.clone().view(shape);
    } else {
      auto m = torch::empty({s->shard * n}), v = torch::empty({s->shard * n});
      comm_.allGather(s->expAvg, m);
      comm_.allGather(s->expAvgSq, v);
      f.expAvg = m.narrow(0, 0, s->numel).clone().view(shape);
      f.expAvgSq = v.narrow(0, 0, s->numel).clone().view(shape);
    }
    out.push_back(std::move(f));
  }
  return out;
}

void DistAdam::setFullState(const std::vector<FullState>& state) {
  SLUICE_CHECK(state.size() == slots_.size(), OptimError,
               "DistAdam state has " << state.size() << " parameters, the optimizer " << slots_.size());
  torch::NoGradGuard noGrad;
  for (size_t i = 0; i < slots_.size(); ++i) {
    auto& s = *slots_[i];
    const auto& f = state[i];
    SLUICE_CHECK(f.expAvg.numel() == s.numel && f.expAvgSq.numel() == s.numel, OptimError,
                 "DistAdam state for parameter " << i << " has " << f.expAvg.numel() << " elements, the parameter "
                                                 << s.numel);
    s.step = f.step;
    if (mode_ == DistAdamMode::AllReduce) {
      s.expAvg.copy_(f.expAvg.reshape({-1}));
      s.expAvgSq.copy_(f.expAvgSq.reshape({-1}));
    } else {
      s.expAvg.zero_();
      s.expAvgSq.zero_();
      s.expAvg.narrow(0, 0, s.valid).copy_(f.expAvg.reshape({-1}).narrow(0, s.begin, s.valid));
      s.expAvgSq.narrow(0, 0, s.valid).copy_(f.expAvgSq.reshape({-1}).narrow(0, s.begin, s.valid));
    }
  }
}

}  // namespace sluice::optim
