#include "data/FashionMnist.h"

#include <zlib.h>

#include <filesystem>
#include <mutex>

#include "core/Error.h"

namespace sluice::data {
namespace fs = std::filesystem;
namespace {

constexpr const char* kPackage = FashionMnist::kInstallHint;

// The bytes of dir/name or dir/name.gz (gzip through zlib).
std::string readIdx(const std::string& dir, const std::string& name) {
  const fs::path path = FashionMnist::idxPath(dir, name);
  SLUICE_CHECK(!path.empty(), DataError,
               "data.path '" << dir << "' has no " << name << " (nor " << name << ".gz): " << kPackage);
  gzFile f = gzopen(path.c_str(), "rb");  // reads plain files too
  SLUICE_CHECK(f, DataError, "cannot open " << path.string());
  std::string out;
  char buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof(buf))) > 0) out.append(buf, n);
  const bool failed = n < 0;
  gzclose(f);
  SLUICE_CHECK(!failed, DataError, path.string() << " is corrupt (gzip error): " << kPackage);
  return out;
}

uint32_t be32(const std::string& s, size_t at) {
  return (uint32_t(uint8_t(s[at])) << 24) | (uint32_t(uint8_t(s[at + 1])) << 16) | (uint32_t(uint8_t(s[at + 2])) << 8) |
         uint32_t(uint8_t(s[at + 3]));
}

// An IDX file of unsigned bytes with `dims` dimensions: its sizes, checked against the file length.
std::vector<int64_t> idxShape(const std::string& bytes, int dims, const std::string& what) {
  SLUICE_CHECK(bytes.size() >= 4u + 4u * dims && be32(bytes, 0) == 0x0800u + uint32_t(dims), DataError,
               what << " is not an IDX file of " << dims << "-dimensional unsigned bytes: " << kPackage);
  std::vector<int64_t> shape;
  int64_t total = 1;
  for (int d = 0; d < dims; ++d) {
    shape.push_back(be32(bytes, 4 + 4 * d));
    total *= shape.back();
  }
  SLUICE_CHECK(static_cast<int64_t>(bytes.size()) == 4 + 4 * dims + total, DataError,
               what << " is truncated (" << bytes.size() << " bytes for " << total << " values): " << kPackage);
  return shape;
}

}  // namespace

std::string FashionMnist::idxPath(const std::string& dir, const std::string& name) {
  for (const auto& p : {fs::path(dir) / name, fs::path(dir) / (name + ".gz")}) {
    if (fs::exists(p)) return p.string();
  }
  return "";
}

std::string FashionMnist::imagesFile(const std::string& split) {
  return split == "train" ? "train-images-idx3-ubyte" : "t10k-images-idx3-ubyte";
}
std::string FashionMnist::labelsFile(const std::string& split) {
  return split == "train" ? "train-labels-idx1-ubyte" : "t10k-labels-idx1-ubyte";
}

FashionMnist::FashionMnist(const std::string& dir, const std::string& split, int64_t seed)
    : dir_(dir), split_(split), seed_(seed) {
  SLUICE_CHECK(split == "train" || split == "test", DataError, "fashion_mnist: split must be train or test, got " << split);
  const auto images = readIdx(dir, imagesFile(split)), labels = readIdx(dir, labelsFile(split));
  const auto is = idxShape(images, 3, imagesFile(split)), ls = idxShape(labels, 1, labelsFile(split));
  SLUICE_CHECK(is[0] == ls[0] && is[1] == 28 && is[2] == 28, DataError,
               "fashion_mnist: " << imagesFile(split) << " holds " << is[0] << " images of " << is[1] << "x" << is[2]
                                 << " and " << labelsFile(split) << " " << ls[0] << " labels (expected 28x28, as many labels)");
  SLUICE_CHECK(is[0] > 0, DataError,
               "fashion_mnist: " << imagesFile(split) << " in " << dir << " holds no images: " << kInstallHint);
  auto raw = torch::from_blob(const_cast<char*>(images.data()) + 16, {is[0], 1, 28, 28}, torch::kUInt8);
  images_ = ((raw.to(torch::kFloat) / 255.0) - kMean) / kStd;
  labels_ = torch::from_blob(const_cast<char*>(labels.data()) + 8, {ls[0]}, torch::kUInt8).to(torch::kLong);
  SLUICE_CHECK(labels_.max().item<int64_t>() < 10, DataError, labelsFile(split) << " has labels above 9: " << kPackage);
}

Batch FashionMnist::batch(int64_t step, int64_t size) const {
  const int64_t n = samples();
  std::vector<int64_t> index(size);
  for (int64_t i = 0; i < size; ++i) {
    const int64_t g = step * size + i, e = g / n;
    if (e != permEpoch_) {  // the epoch's order, drawn once per epoch (data loading, not a training tensor)
      auto gen = at::detail::createCPUGenerator(static_cast<uint64_t>(seed_) * 1000003ull + 1000000ull +
                                                static_cast<uint64_t>(e));
      perm_ = torch::randperm(n, gen, torch::kLong);
      permEpoch_ = e;
    }
    index[i] = perm_.data_ptr<int64_t>()[g % n];
  }
  auto idx = torch::tensor(index, torch::kLong);
  return {images_.index_select(0, idx), labels_.index_select(0, idx)};
}

Batch FashionMnist::slice(int64_t begin, int64_t end) const {
  return {images_.slice(0, begin, end), labels_.slice(0, begin, end)};
}

std::string FashionMnist::describe() const {
  return "fashion_mnist: " + std::to_string(samples()) + " " + split_ + " images from " + dir_;
}

}  // namespace sluice::data
