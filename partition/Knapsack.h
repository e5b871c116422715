// partition::Knapsack: the covering knapsacks behind the partitioner.
//
// Items are saved storages; freeing one frees `units` memory units by
// recompute (seconds r) or `swapUnits` (at least `units`: Note [swapped
// weight reads], CostModel.h) by swap (seconds of I/O s, plus swapCpu
// seconds the compute loses, which nothing hides). best(v) answers: how
// cheaply can at least v units be freed?
//
// AdditiveKnapsack: one action for every item, recompute (cost: sum of r) or
//   swap (sum of s); additive.
// FrontKnapsack: recompute or swap; a stage pays R + max(0, S - C) with R the
//   recompute and swap-CPU seconds and S the I/O seconds (its I/O hides
//   behind C seconds of compute, C known only when the stage ends), which is
//   not additive. For each v it keeps the Pareto front of
//   (R, R + S) over choices freeing >= v units: a choice whose R and R + S are
//   both no smaller than another's can never do better, whatever is added
//   later and whatever C is. Points with S >= maxHide pay S - C for any stage
//   (linear), so of those only the least R + S is kept.
// With record = true every layer is kept, so the choice behind best(v) can be
// read back (bestStage); without, memory is one layer.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

namespace sluice::partition {

struct KnapsackItem {
  int storage = 0;
  int64_t units = 0;
  int64_t swapUnits = 0;  // units a swap frees; never below units (0: units)
  int64_t swapped() const { return std::max(units, swapUnits); }
  double recompute = std::numeric_limits<double>::infinity();  // +inf: not allowed
  double swap = std::numeric_limits<double>::infinity();
  double swapCpu = 0;
};

class AdditiveKnapsack {
 public:
  enum class Cost { Recompute };
  explicit AdditiveKnapsack(Cost cost = Cost::Recompute) : cost_(cost) {}
  void reset(int64_t capacity);
  int64_t capacity() const { return static_cast<int64_t>(best_.size()) - 1; }
  void add(const KnapsackItem& item, std::vector<char>* took = nullptr);
  double at(int64_t v) const { return best_[v]; }

 private:
  double costOf(const KnapsackItem& it) const { return it.recompute; }
  Cost cost_;
  std::vector<double> best_;
  int64_t reach_ = 0;  // units of all items added: above it nothing is feasible yet
};

class FrontKnapsack {
 public:
  struct Point {
    double r = 0, s = 0;  // recompute seconds, swap I/O seconds
    int choice = 0;       // 0 keep, 1 recompute, 2 swap (of the item of this layer)
    int parent = -1;      // index into the previous layer's front at v (keep) or v - units
  };
  // swapOnly: items may only be swapped (their recompute is ignored).
  explicit FrontKnapsack(double maxHide = std::numeric_limits<double>::infinity(), bool record = false,
                         bool swapOnly = false)
      : maxHide_(maxHide), record_(record), swapOnly_(swapOnly) {}
  void reset(int64_t capacity);
  int64_t capacity() const { return static_cast<int64_t>(front_.size()) - 1; }
  void add(const KnapsackItem& item);
  // The least r + max(0, s - hide) over choices freeing at least v units; +inf if none.
  double best(int64_t v, double hide, int* point = nullptr) const;
  // With record: the actions (1 recompute, 2 swap) per added item for front point `point` at v.
  std::vector<int> choices(int64_t v, int point) const;

 private:
  void prune(std::vector<Point>& points) const;
  double maxHide_;
  bool record_, swapOnly_;
  std::vector<std::vector<Point>> front_;                // per v
  std::vector<std::vector<std::vector<Point>>> layers_;  // record: front_ after each item
  std::vector<KnapsackItem> items_;
  std::vector<Point> scratch_, scratch2_;
  int64_t reach_ = 0;
};

}  // namespace sluice::partition
