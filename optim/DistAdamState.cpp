// optim::DistAdam's state: saving and loading its sharded layout, and the
// layout-free full state (fullState, setFullState).
#include "optim/DistAdam.h"

#include <algorithm>

#include "core/Error.h"
#include "optim/DistAdamBuckets.h"

namespace sluice::optim {

namespace {
constexpr int64_t kLayoutVersion = 2;  // 1: one shard per parameter; 2: flat buckets
}

void DistAdam::save(torch::serialize::OutputArchive& archive) const {
  archive.write("meta", torch::tensor({static_cast<int64_t>(comm_.size()), static_cast<int64_t>(comm_.rank()),
                                       static_cast<int64_t>(slots_.size()), static_cast<int64_t>(mode_),
                                       kLayoutVersion}));
  std::vector<int64_t> sizes;
  for (auto& b : buckets_) sizes.push_back(b->layout.numel);
  archive.write("buckets", torch::tensor(sizes));
  for (size_t k = 0; k < buckets_.size(); ++k) {
    archive.write("b" + std::to_string(k) + ".exp_avg", buckets_[k]->expAvg);
    archive.write("b" + std::to_string(k) + ".exp_avg_sq", buckets_[k]->expAvgSq);
  }
  for (size_t i = 0; i < slots_.size(); ++i) archive.write(std::to_string(i) + ".step", torch::tensor({slots_[i]->step}));
}

void DistAdam::load(torch::serialize::InputArchive& archive) {
  torch::Tensor meta, sizes;
  archive.read("meta", meta);
  const int64_t ranks = meta[0].item<int64_t>(), rank = meta[1].item<int64_t>(), count = meta[2].item<int64_t>();
  const int64_t version = meta.numel() > 4 ? meta[4].item<int64_t>() : 1;
  SLUICE_CHECK(ranks == comm_.size() && rank == comm_.rank() && count == static_cast<int64_t>(slots_.size()) &&
                   meta[3].item<int64_t>() == static_cast<int64_t>(mode_),
               OptimError,
               "DistAdam state was saved by rank " << rank << " of " << ranks << " with " << count
                                                   << " parameters (mode " << meta[3].item<int64_t>()
                                                   << "); this is rank " << comm_.rank() << " of " << comm_.size()
                                                   << " with " << slots_.size() << " parameters");
  SLUICE_CHECK(version == kLayoutVersion, OptimError,
               "DistAdam state was saved with one shard per parameter (an older Sluice); this one shards flat "
               "buckets: load it through the layout-free state instead (optim::setAdamState, as checkpoints do)");
  archive.read("buckets", sizes);
  std::vector<int64_t> mine;
  for (auto& b : buckets_) mine.push_back(b->layout.numel);
  SLUICE_CHECK(sizes.numel() == static_cast<int64_t>(mine.size()) &&
                   std::equal(mine.begin(), mine.end(), sizes.data_ptr<int64_t>()),
               OptimError,
               "DistAdam state was saved with buckets of " << sizes << " elements; this DistAdam has "
                                                           << torch::tensor(mine)
                                                           << " (another bucket size): load it through the layout-free "
                                                              "state (optim::setAdamState)");
  for (size_t k = 0; k < buckets_.size(); ++k) {
    torch::Tensor m, v;
    archive.read("b" + std::to_string(k) + ".exp_avg", m);
    archive.read("b" + std::to_string(k) + ".exp_avg_sq", v);
    buckets_[k]->expAvg.copy_(m);
    buckets_[k]->expAvgSq.copy_(v);
  }
  for (size_t i = 0; i < slots_.size(); ++i) {
    torch::Tensor st;
    archive.read(std::to_string(i) + ".step", st);
    slots_[i]->step = st.item<int64_t>();
  }
}

std::vector<DistAdam::FullState> DistAdam::fullState() {
  std::vector<FullState> out(slots_.size());
  for (auto& b : buckets_) {
    torch::Tensor m = b->expAvg, v = b->expAvgSq;
    if (sharded()) {
      m = torch::empty({b->layout.shard * comm_.size()}, options_);
      v = torch::empty({b->layout.shard * comm_.size()}, options_);
      comm_.allGather(b->expAvg, m);
      comm_.allGather(b->expAvgSq, v);
    }
    for (size_t j = 0; j < b->layout.params.size(); ++j) {
      const size_t i = b->layout.params[j];
      auto& s = *slots_[i];
      const auto shape = s.param.sizes();
      out[i].step = s.step;
      out[i].expAvg = m.narrow(0, b->layout.offsets[j], s.numel).clone().view(shape);
      out[i].expAvgSq = v.narrow(0, b->layout.offsets[j], s.numel).clone().view(shape);
    }
  }
  return out;
}

void DistAdam::setFullState(const std::vector<FullState>& state) {
  SLUICE_CHECK(state.size() == slots_.size(), OptimError,
               "DistAdam state has " << state.size() << " parameters, the optimizer " << slots_.size());
  torch::NoGradGuard noGrad;
  for (size_t i = 0; i < slots_.size(); ++i) {
    const auto& f = state[i];
    SLUICE_CHECK(f.expAvg.numel() == slots_[i]->numel && f.expAvgSq.numel() == slots_[i]->numel, OptimError,
                 "DistAdam state for parameter " << i << " has " << f.expAvg.numel() << " elements, the parameter "
                                                 << slots_[i]->numel);
    slots_[i]->step = f.step;
  }
  for (auto& b : buckets_) {
    b->expAvg.zero_();
    b->expAvgSq.zero_();
    for (const auto& seg : b->layout.owned) {
      const auto& f = state[seg.param];
      b->expAvg.narrow(0, seg.shardBegin, seg.length).copy_(f.expAvg.reshape({-1}).narrow(0, seg.paramBegin, seg.length));
      b->expAvgSq.narrow(0, seg.shardBegin, seg.length)
          .copy_(f.expAvgSq.reshape({-1}).narrow(0, seg.paramBegin, seg.length));
    }
  }
}

}  // namespace sluice::optim
