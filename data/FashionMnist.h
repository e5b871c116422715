// data::FashionMnist: the Fashion-MNIST images of Debian's
// dataset-fashion-mnist package (IDX files, gzipped or not, in data.path,
// default /usr/share/datasets/fashion-mnist).
//
// Inputs: float [B, 1, 28, 28], pixels / 255 normalised with the training
// split's mean and standard deviation (0.2860, 0.3530); targets: int64 [B]
// class labels 0..9. Training order: the global sample index g = step * size
// + i walks epochs of the split, each epoch a permutation drawn from a CPU
// generator seeded with seed * 1000003 + 1000000 + epoch (so a batch is a pure
// function of (seed, step) like every Sluice dataset, and Python can
// reproduce it: torch.randperm(n, generator=torch.Generator().manual_seed(..))).
// slice(begin, end) gives samples in file order (evaluation).
// Missing or malformed files: DataError naming the file and the package.
#pragma once

#include "data/Dataset.h"

namespace sluice::data {

class FashionMnist : public Dataset {
 public:
  // split: train | test
  FashionMnist(const std::string& dir, const std::string& split, int64_t seed);
  Batch batch(int64_t step, int64_t size) const override;
  std::string describe() const override;
  Batch slice(int64_t begin, int64_t end) const;
  int64_t samples() const { return labels_.size(0); }

  static constexpr double kMean = 0.2860, kStd = 0.3530;
  // The IDX file names of a split (without .gz).
  static std::string imagesFile(const std::string& split);
  static std::string labelsFile(const std::string& split);
  // dir/name if it exists, else dir/name.gz if that does, else "".
  static std::string idxPath(const std::string& dir, const std::string& name);
  static constexpr const char* kInstallHint =
      "install Debian's dataset-fashion-mnist package or set data.path to the folder of the IDX files";

 private:
  torch::Tensor images_;  // float [N, 1, 28, 28], normalised
  torch::Tensor labels_;  // int64 [N]
  std::string dir_, split_;
  int64_t seed_;
  // The last epoch's order (batch() is called from one thread: the trainer's).
  mutable int64_t permEpoch_ = -1;
  mutable torch::Tensor perm_;
};

}  // namespace sluice::data
