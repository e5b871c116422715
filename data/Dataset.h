// Datasets: deterministic global batches, a pure function of (seed, step).
//
// Every rank can compute any step's batch without communication, so stage 0
// and the last stage see the same samples (inputs and targets), and a run is
// reproducible across stage counts and schedules (the correctness contract).
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <string>
#include <vector>

namespace sluice::data {

struct Batch {
  at::Tensor input;   // gpt: int64 [B, T] tokens; mlp: float [B, D]
  at::Tensor target;  // gpt: int64 [B, T] next tokens; mlp: int64 [B]
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  // The global batch of `size` samples for optimizer step `step`.
  virtual Batch batch(int64_t step, int64_t size) const = 0;
  virtual std::string describe() const = 0;
};

// Byte-level windows of real text: all regular files under a path (or one
// file), in name order, skipping binary files (with NUL bytes, such as the
// fortune '.dat' indexes). Sample i of step s is the window at an offset drawn
// from a generator seeded by (seed, s). Throws DataError when no text is found
// or the text is shorter than one window.
class TextDataset : public Dataset {
 public:
  TextDataset(const std::string& path, int64_t seqLen, int64_t seed);
  Batch batch(int64_t step, int64_t size) const override;
  std::string describe() const override;
  int64_t numBytes() const { return bytes_.numel(); }
  const std::vector<std::string>& files() const { return files_; }

 private:
  at::Tensor bytes_;  // uint8 [N]
  std::vector<std::string> files_;
  int64_t seqLen_, seed_;
  std::string path_;
};

// Random tokens (for benchmarks: no I/O, no learning signal).
class SyntheticTokens : public Dataset {
 public:
  SyntheticTokens(int64_t vocab, int64_t seqLen, int64_t seed) : vocab_(vocab), seqLen_(seqLen), seed_(seed) {}
  Batch batch(int64_t step, int64_t size) const override;
  std::string describe() const override;

 private:
  int64_t vocab_, seqLen_, seed_;
};

// Gaussian inputs labelled by a fixed random linear teacher (learnable).
class SyntheticClassification : public Dataset {
 public:
  SyntheticClassification(int64_t inputDim, int64_t classes, int64_t seed);
  Batch batch(int64_t step, int64_t size) const override;
  std::string describe() const override;

 private:
  at::Tensor teacher_;
  int64_t inputDim_, classes_, seed_;
};

}  // namespace sluice::data
