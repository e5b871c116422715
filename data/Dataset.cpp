#include "data/Dataset.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "core/Error.h"

namespace sluice::data {
namespace fs = std::filesystem;

namespace {

at::Generator generatorFor(int64_t seed, int64_t step) {
  // Distinct, reproducible streams per (seed, step).
  return at::detail::createCPUGenerator(static_cast<uint64_t>(seed) * 1000003ull + static_cast<uint64_t>(step));
}

bool readText(const fs::path& file, std::string& out) {
  std::ifstream f(file, std::ios::binary);
  if (!f) return false;
  std::stringstream ss;
  ss << f.rdbuf();
  out = ss.str();
  return out.find('\0') == std::string::npos;
}

}  // namespace

TextDataset::TextDataset(const std::string& path, int64_t seqLen, int64_t seed)
    : seqLen_(seqLen), seed_(seed), path_(path) {
  SLUICE_CHECK(fs::exists(path), DataError, "data.path '" << path << "' does not exist");
  std::vector<fs::path> candidates;
  if (fs::is_directory(path)) {
    for (auto& e : fs::recursive_directory_iterator(path)) {
      if (e.is_regular_file()) candidates.push_back(e.path());
    }
    std::sort(candidates.begin(), candidates.end());
  } else {
    candidates.push_back(path);
  }
  std::set<std::string> seen;  // the same file through several links counts once
  std::string all;
  for (auto& c : candidates) {
    auto canonical = fs::canonical(c).string();
    if (!seen.insert(canonical).second) continue;
    std::string text;
    if (!readText(c, text) || text.empty()) continue;
    files_.push_back(c.string());
    all += text;
  }
  SLUICE_CHECK(!files_.empty(), DataError, "data.path '" << path << "' has no readable text files");
  SLUICE_CHECK(static_cast<int64_t>(all.size()) > seqLen + 1, DataError,
               "data.path '" << path << "' holds " << all.size() << " bytes, fewer than one window of "
                             << seqLen + 1);
  bytes_ = torch::empty({static_cast<int64_t>(all.size())}, torch::kUInt8);
  std::memcpy(bytes_.data_ptr(), all.data(), all.size());
}

Batch TextDataset::batch(int64_t step, int64_t size) const {
  auto gen = generatorFor(seed_, step);
  auto offsets = torch::randint(0, numBytes() - seqLen_ - 1, {size}, gen, torch::kLong);
  auto idx = offsets.unsqueeze(1) + torch::arange(seqLen_ + 1, torch::kLong).unsqueeze(0);
  auto windows = bytes_.index_select(0, idx.reshape({-1})).reshape({size, seqLen_ + 1}).to(torch::kLong);
  return {windows.slice(1, 0, seqLen_).contiguous(), windows.slice(1, 1, seqLen_ + 1).contiguous()};
}

std::string TextDataset::describe() const {
  return "text: " + std::to_string(files_.size()) + " files, " + std::to_string(numBytes()) + " bytes from " + path_;
}

Batch SyntheticTokens::batch(int64_t step, int64_t size) const {
  auto gen = generatorFor(seed_, step);
  auto tokens = torch::randint(0, vocab_, {size, seqLen_ + 1}, gen, torch::kLong);
  return {tokens.slice(1, 0, seqLen_).contiguous(), tokens.slice(1, 1, seqLen_ + 1).contiguous()};
}

std::string SyntheticTokens::describe() const {
  return "synthetic tokens: vocab " + std::to_string(vocab_) + ", length " + std::to_string(seqLen_);
}

SyntheticClassification::SyntheticClassification(int64_t inputDim, int64_t classes, int64_t seed)
    : inputDim_(inputDim), classes_(classes), seed_(seed) {
  auto gen = generatorFor(seed, -1);
  teacher_ = torch::randn({inputDim, classes}, gen);
}

Batch SyntheticClassification::batch(int64_t step, int64_t size) const {
  auto gen = generatorFor(seed_, step);
  auto x = torch::randn({size, inputDim_}, gen);
  return {x, torch::matmul(x, teacher_).argmax(1)};
}

std::string SyntheticClassification::describe() const {
  return "synthetic classification: " + std::to_string(inputDim_) + " features, " + std::to_string(classes_) +
         " classes";
}

}  // namespace sluice::data
