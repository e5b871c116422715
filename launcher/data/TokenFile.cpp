#include "launcher/data/TokenFile.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "core/Error.h"
#include "core/Files.h"

namespace sluice::data {

TokenFile::TokenFile(const std::string& path, const std::string& dtype, int64_t blockSize, int64_t vocabSize,
                     int64_t seed)
    : path_(path), blockSize_(blockSize), seed_(seed) {
  SLUICE_CHECK(dtype == "uint16" || dtype == "uint32", DataError,
               "data.token_dtype must be uint16 or uint32, got '" << dtype << "'");
  UniqueFd f(::open(path.c_str(), O_RDONLY | O_CLOEXEC));  // closed on every way out; the mapping outlives it
  SLUICE_CHECK(f.valid(), DataError, "token file '" << path << "' cannot be opened: " << std::strerror(errno));
  struct stat st {};
  SLUICE_CHECK(::fstat(f.get(), &st) == 0 && S_ISREG(st.st_mode), DataError,
               "token file '" << path << "' is not a regular file");
  const auto bytes = static_cast<int64_t>(st.st_size);
  SLUICE_CHECK(bytes > 0, DataError, "token file '" << path << "' is empty");
  void* addr = ::mmap(nullptr, static_cast<size_t>(bytes), PROT_READ, MAP_PRIVATE, f.get(), 0);
  SLUICE_CHECK(addr != MAP_FAILED, DataError, "token file '" << path << "' cannot be mapped: " << std::strerror(errno));
  int64_t width = dtype == "uint16" ? 2 : 4, offset = 0, count = -1;
  map_.addr = addr;
  map_.bytes = static_cast<size_t>(bytes);
  const auto* ints = static_cast<const int32_t*>(addr);
  if (bytes >= kHeaderInts * 4 && ints[0] == kHeaderMagic) {
    // llm.c's header: version 1 holds uint16 ids, 2 uint32; then the count.
    header_ = true;
    const int32_t version = ints[1];
    SLUICE_CHECK(version == 1 || version == 2, DataError,
                 "token file '" << path << "': header version " << version << " (llm.c's are 1 = uint16, 2 = uint32)");
    const int64_t headerWidth = version == 1 ? 2 : 4;
    SLUICE_CHECK(headerWidth == width, DataError,
                 "token file '" << path << "': its header says uint" << 8 * headerWidth << " ids (version " << version
                                << ") but data.token_dtype is " << dtype << "; set data.token_dtype: uint"
                                << 8 * headerWidth);
    count = ints[2];
    offset = kHeaderInts * 4;
    SLUICE_CHECK(count >= 0 && offset + count * width == bytes, DataError,
                 "token file '" << path << "': its header counts " << count << " tokens of " << width << " bytes ("
                                << kHeaderInts * 4 << " + " << count << " x " << width << " = "
                                << kHeaderInts * 4 + count * width << " bytes) but the file has " << bytes
                                << " bytes: it is truncated or not what the header says");
  } else {
    SLUICE_CHECK(bytes % width == 0, DataError,
                 "token file '" << path << "' has " << bytes << " bytes, not a whole number of " << dtype << " ids ("
                                << bytes << " % " << width << " = " << bytes % width
                                << "): is data.token_dtype right?");
    count = bytes / width;
  }
  ids_ = static_cast<const uint8_t*>(addr) + offset;
  width_ = width;
  count_ = count;
  SLUICE_CHECK(count >= blockSize + 1, DataError,
               "token file '" << path << "' holds " << count << " tokens, fewer than one window of model.block_size + 1 = "
                              << blockSize + 1);
  windows_ = (count - 1) / blockSize;
  maxId_ = largestId(st);
  SLUICE_CHECK(maxId_ < vocabSize, DataError,
               "token file '" << path << "' holds token id " << maxId_ << ", so its vocabulary has at least "
                              << maxId_ + 1 << " ids, more than model.vocab_size (" << vocabSize
                              << "): set model.vocab_size >= " << maxId_ + 1
                              << (header_ ? "" : " (or check data.token_dtype)"));
}

// The largest id, read once per process for a given file: config
// validation and the model's data open the same file in each rank (a
// multi-GB corpus is read once, not twice). Keyed by the file's identity and
// modification time, so a rewritten file is read again.
int64_t TokenFile::largestId(const struct stat& st) const {
  static std::mutex mutex;
  static std::map<std::tuple<dev_t, ino_t, int64_t, int64_t, int64_t, int64_t>, int64_t> known;
  const auto key = std::make_tuple(st.st_dev, st.st_ino, static_cast<int64_t>(st.st_size),
                                   static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec,
                                   width_, static_cast<int64_t>(ids_ - static_cast<const uint8_t*>(map_.addr)));
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (auto it = known.find(key); it != known.end()) return it->second;
  }
  int64_t largest = 0;
  for (int64_t i = 0; i < count_; ++i) largest = std::max(largest, id(i));
  std::lock_guard<std::mutex> lock(mutex);
  known[key] = largest;
  return largest;
}

int64_t TokenFile::id(int64_t i) const {
  if (width_ == 2) {
    uint16_t v;
    std::memcpy(&v, ids_ + 2 * i, 2);
    return v;
  }
  uint32_t v;
  std::memcpy(&v, ids_ + 4 * i, 4);
  return v;
}

TokenFile::Mapping::~Mapping() {
  if (addr) ::munmap(addr, bytes);
}

Batch TokenFile::windowsAt(const std::vector<int64_t>& index) const {
  const int64_t T = blockSize_, n = static_cast<int64_t>(index.size());
  auto w = torch::empty({n, T + 1}, torch::kLong);
  auto* out = w.data_ptr<int64_t>();
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t j = 0; j <= T; ++j) out[r * (T + 1) + j] = id(index[r] * T + j);
  }
  return {w.slice(1, 0, T).contiguous(), w.slice(1, 1, T + 1).contiguous()};
}

Batch TokenFile::batch(int64_t step, int64_t size) const {
  std::vector<int64_t> index;
  for (int64_t i = 0; i < size; ++i) {
    const int64_t g = step * size + i, epoch = g / windows_;
    if (epoch != permEpoch_) {
      auto gen = at::detail::createCPUGenerator(static_cast<uint64_t>(seed_) * 1000003ull + 2000000ull +
                                                static_cast<uint64_t>(epoch));
      perm_ = torch::randperm(windows_, gen, torch::kLong);
      permEpoch_ = epoch;
    }
    index.push_back(perm_.data_ptr<int64_t>()[g % windows_]);
  }
  return windowsAt(index);
}

Batch TokenFile::slice(int64_t begin, int64_t end) const {
  SLUICE_CHECK(begin >= 0 && begin <= end && end <= windows_, DataError,
               "token file '" << path_ << "': windows [" << begin << ", " << end << ") of " << windows_);
  std::vector<int64_t> index;
  for (int64_t k = begin; k < end; ++k) index.push_back(k);
  return windowsAt(index);
}

std::string TokenFile::describe() const {
  return "tokens: " + std::to_string(count_) + " uint" + (width_ == 2 ? "16" : "32") +
         " ids (largest " + std::to_string(maxId_) + ")" + (header_ ? " after an llm.c header" : "") + " from " +
         path_ + ", " + std::to_string(windows_) + " windows of " + std::to_string(blockSize_ + 1);
}

}  // namespace sluice::data
