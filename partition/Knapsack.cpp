#include "partition/Knapsack.h"

#include <algorithm>

namespace sluice::partition {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

}  // namespace

void AdditiveKnapsack::reset(int64_t capacity) {
  best_.assign(capacity + 1, kInf);
  best_[0] = 0;
  reach_ = 0;
}

void AdditiveKnapsack::add(const KnapsackItem& it, std::vector<char>* took) {
  if (took) took->assign(best_.size(), 0);
  const double cost = costOf(it);
  if (cost == kInf) return;
  reach_ = std::min(capacity(), reach_ + it.units);
  for (int64_t v = reach_; v >= 1; --v) {
    const double via = best_[std::max<int64_t>(0, v - it.units)] + cost;
    if (via < best_[v]) {
      best_[v] = via;
      if (took) (*took)[v] = 1;
    }
  }
}

void FrontKnapsack::reset(int64_t capacity) {
  front_.assign(capacity + 1, {});
  front_[0] = {Point{}};
  reach_ = 0;
  items_.clear();
  layers_.clear();
  if (record_) layers_.push_back(front_);
}

// Keeps the Pareto front of (r, r + s) of points sorted by r (ties: r + s),
// then, of the points with s >= maxHide, only the last (least r + s).
void FrontKnapsack::prune(std::vector<Point>& points) const {
  size_t kept = 0;
  double bestTotal = kInf;
  for (size_t i = 0; i < points.size(); ++i) {
    const double total = points[i].r + points[i].s;
    if (total < bestTotal) {
      bestTotal = total;
      points[kept++] = points[i];
    }
  }
  points.resize(kept);
  int lastLinear = -1;
  for (int i = static_cast<int>(points.size()) - 1; i >= 0 && lastLinear < 0; --i) {
    if (points[i].s >= maxHide_) lastLinear = i;
  }
  if (lastLinear < 0) return;
  kept = 0;
  for (int i = 0; i < static_cast<int>(points.size()); ++i) {
    if (points[i].s < maxHide_ || i == lastLinear) points[kept++] = points[i];
  }
  points.resize(kept);
}

namespace {

using Point = FrontKnapsack::Point;

// Front order: by r, ties by r + s.
bool before(const Point& a, const Point& b) { return a.r != b.r ? a.r < b.r : a.r + a.s < b.r + b.s; }

// Into shifted, in front order: item `it` recomputed on top of each point of
// fromR (choice 1), swapped on top of each of fromS (choice 2).
void shiftedCandidates(const std::vector<Point>& fromR, const std::vector<Point>& fromS, const KnapsackItem& it,
                       bool canRecompute, bool canSwap, std::vector<Point>& shifted) {
  // All fronts are sorted by r: the shifted copies stay sorted, so two
  // merges give the candidates in order.
  shifted.clear();
  if (canRecompute && canSwap) {
    size_t b = 0, c = 0;
    while (b < fromR.size() || c < fromS.size()) {
      const bool takeR = c >= fromS.size() ||
                         (b < fromR.size() && before(Point{fromR[b].r + it.recompute, fromR[b].s},
                                                     Point{fromS[c].r + it.swapCpu, fromS[c].s + it.swap}));
      if (takeR) {
        shifted.push_back({fromR[b].r + it.recompute, fromR[b].s, 1, static_cast<int>(b)});
        ++b;
      } else {
        shifted.push_back({fromS[c].r + it.swapCpu, fromS[c].s + it.swap, 2, static_cast<int>(c)});
        ++c;
      }
    }
  } else if (canRecompute) {
    for (int i = 0; i < static_cast<int>(fromR.size()); ++i) shifted.push_back({fromR[i].r + it.recompute, fromR[i].s, 1, i});
  } else {
    for (int i = 0; i < static_cast<int>(fromS.size()); ++i) {
      shifted.push_back({fromS[i].r + it.swapCpu, fromS[i].s + it.swap, 2, i});
    }
  }
}

// Into merged, in front order: the points kept as they are (here, choice 0)
// and the shifted candidates; on a tie the kept point comes first.
void mergeWithKept(const std::vector<Point>& here, const std::vector<Point>& shifted, std::vector<Point>& merged) {
  merged.clear();
  size_t a = 0, b = 0;
  while (a < here.size() || b < shifted.size()) {
    if (b >= shifted.size() || (a < here.size() && !before(shifted[b], here[a]))) {
      merged.push_back({here[a].r, here[a].s, 0, static_cast<int>(a)});
      ++a;
    } else {
      merged.push_back(shifted[b++]);
    }
  }
}

}  // namespace

void FrontKnapsack::add(const KnapsackItem& it) {
  items_.push_back(it);
  const bool canRecompute = it.recompute < kInf && !swapOnly_, canSwap = it.swap < kInf;
  if (!canRecompute && !canSwap) {
    if (record_) layers_.push_back(front_);
    return;
  }
  auto next = record_ ? front_ : std::vector<std::vector<Point>>();
  auto& out = record_ ? next : front_;
  auto& shifted = scratch_;
  auto& merged = scratch2_;
  reach_ = std::min(capacity(), reach_ + (canSwap ? it.swapped() : it.units));
  for (int64_t v = reach_; v >= 1; --v) {
    const auto& here = front_[v];
    const auto& fromR = front_[std::max<int64_t>(0, v - it.units)];      // recompute's predecessors
    const auto& fromS = front_[std::max<int64_t>(0, v - it.swapped())];  // swap's
    shiftedCandidates(fromR, fromS, it, canRecompute, canSwap, shifted);
    mergeWithKept(here, shifted, merged);
    prune(merged);
    if (record_) {
      out[v] = merged;
    } else {
      out[v].swap(merged);  // the old front's buffer is reused next time
    }
  }
  if (record_) {
    for (int i = 0; i < static_cast<int>(next[0].size()); ++i) next[0][i].choice = 0, next[0][i].parent = i;
    front_ = std::move(next);
    layers_.push_back(front_);
  }
}

double FrontKnapsack::best(int64_t v, double hide, int* point) const {
  double best = kInf;
  const auto& f = front_[v];
  for (int i = 0; i < static_cast<int>(f.size()); ++i) {
    const double t = f[i].r + std::max(0.0, f[i].s - hide);
    if (t < best) {
      best = t;
      if (point) *point = i;
    }
  }
  return best;
}

std::vector<int> FrontKnapsack::choices(int64_t v, int point) const {
  std::vector<int> out(items_.size(), 0);
  for (int x = static_cast<int>(items_.size()); x >= 1; --x) {
    const Point& p = layers_[x][v][point];
    out[x - 1] = p.choice;
    if (p.choice != 0) v = std::max<int64_t>(0, v - (p.choice == 2 ? items_[x - 1].swapped() : items_[x - 1].units));
    point = p.parent;
  }
  return out;
}

}  // namespace sluice::partition
