#include "data/TokenFile.h"

#include <fcntl.h>
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
  fd_.reset(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  SLUICE_CHECK(fd_.valid(), DataError, "token file '" << path << "' cannot be opened: " << std::strerror(errno));
  SLUICE_CHECK(::fstat(fd_.get(), &stat_) == 0 && S_ISREG(stat_.st_mode), DataError,
               "token file '" << path << "' is not a regular file");
  const auto bytes = static_cast<int64_t>(stat_.st_size);
  SLUICE_CHECK(bytes > 0, DataError, "token file '" << path << "' is empty");
  readLayout(dtype, bytes);
  SLUICE_CHECK(count_ >= blockSize + 1, DataError,
               "token file '" << path << "' holds " << count_
                              << " tokens, fewer than one window of model.block_size + 1 = " << blockSize + 1);
  windows_ = (count_ - 1) / blockSize;
  const auto scan = largestId(stat_);
  maxId_ = scan.first;
  // uint32 ids read as uint16 (a headerless file): below 65,536 every id's
  // high half is 0, so every other id read is 0. Real uint16 text never
  // has that pattern over thousands of ids.
  SLUICE_CHECK(!(width_ == 2 && !header_ && count_ >= 1024 && count_ % 2 == 0 && scan.second && maxId_ > 0), DataError,
               "token file '" << path << "' read as uint16 ids has 0 at every odd position, as uint32 ids read as "
                              << "uint16 do: set data.token_dtype: uint32 (or write an llm.c header, "
                                 "scripts/tokenize.py)");
  SLUICE_CHECK(maxId_ < vocabSize, DataError,
               "token file '" << path << "' holds token id " << maxId_ << ", so its vocabulary has at least "
                              << maxId_ + 1 << " ids, more than model.vocab_size (" << vocabSize
                              << "): set model.vocab_size >= " << maxId_ + 1
                              << (header_ ? "" : " (or check data.token_dtype)"));
}

// Where the ids start, their width and count: after llm.c's header (which must agree with dtype and the
// file's size), or the whole file of dtype ids.
void TokenFile::readLayout(const std::string& dtype, int64_t bytes) {
  int64_t width = dtype == "uint16" ? 2 : 4, offset = 0, count = -1;
  int32_t ints[3] = {0, 0, 0};
  if (bytes >= kHeaderInts * 4) readAt(0, sizeof(ints), reinterpret_cast<uint8_t*>(ints));
  if (bytes >= kHeaderInts * 4 && ints[0] == kHeaderMagic) {
    // llm.c's header: version 1 holds uint16 ids, 2 uint32; then the count.
    header_ = true;
    const int32_t version = ints[1];
    SLUICE_CHECK(version == 1 || version == 2, DataError,
                 "token file '" << path_ << "': header version " << version << " (llm.c's are 1 = uint16, 2 = uint32)");
    const int64_t headerWidth = version == 1 ? 2 : 4;
    SLUICE_CHECK(headerWidth == width, DataError,
                 "token file '" << path_ << "': its header says uint" << 8 * headerWidth << " ids (version " << version
                                << ") but data.token_dtype is " << dtype << "; set data.token_dtype: uint"
                                << 8 * headerWidth);
    count = ints[2];
    offset = kHeaderInts * 4;
    SLUICE_CHECK(count >= 0 && offset + count * width == bytes, DataError,
                 "token file '" << path_ << "': its header counts " << count << " tokens of " << width << " bytes ("
                                << kHeaderInts * 4 << " + " << count << " x " << width << " = "
                                << kHeaderInts * 4 + count * width << " bytes) but the file has " << bytes
                                << " bytes: it is truncated or not what the header says");
  } else {
    SLUICE_CHECK(bytes % width == 0, DataError,
                 "token file '" << path_ << "' has " << bytes << " bytes, not a whole number of " << dtype << " ids ("
                                << bytes << " % " << width << " = " << bytes % width
                                << "): is data.token_dtype right?");
    count = bytes / width;
  }
  offset_ = offset;
  width_ = width;
  count_ = count;
}

void TokenFile::readAt(int64_t offset, int64_t bytes, uint8_t* out) const {
  int64_t done = 0;
  while (done < bytes) {
    const ssize_t n = ::pread(fd_.get(), out + done, static_cast<size_t>(bytes - done), offset + done);
    if (n < 0 && errno == EINTR) continue;
    SLUICE_CHECK(n >= 0, DataError, "token file '" << path_ << "' cannot be read: " << std::strerror(errno));
    SLUICE_CHECK(n > 0, DataError,
                 "token file '" << path_ << "' ends at byte " << offset + done << ", but it had "
                                << static_cast<int64_t>(stat_.st_size)
                                << " bytes when the job loaded it: it was truncated while the job read it (write a new "
                                   "file and rename it into place instead)");
    done += n;
  }
}

void TokenFile::checkUnchanged() const {
  struct stat now {};
  SLUICE_CHECK(::fstat(fd_.get(), &now) == 0, DataError,
               "token file '" << path_ << "' cannot be checked: " << std::strerror(errno));
  const bool same = now.st_size == stat_.st_size && now.st_mtim.tv_sec == stat_.st_mtim.tv_sec &&
                    now.st_mtim.tv_nsec == stat_.st_mtim.tv_nsec;
  SLUICE_CHECK(same, DataError,
               "token file '" << path_ << "' changed while the job read it (" << static_cast<int64_t>(stat_.st_size)
                              << " bytes at load, " << static_cast<int64_t>(now.st_size)
                              << " now, and modified since): a job's data must not change under it (write a new file "
                                 "and rename it into place, or start a new job)");
}

// The largest id, read once per process for a given file: config
// validation and the model's data open the same file in each rank (a
// multi-GB corpus is read once, not twice). Keyed by the file's identity and
// modification time, so a rewritten file is read again. Read in 4 MiB chunks.
// Also whether every odd-position id is 0 (the uint32-as-uint16 check).
std::pair<int64_t, bool> TokenFile::largestId(const struct stat& st) const {
  static std::mutex mutex;
  static std::map<std::tuple<dev_t, ino_t, int64_t, int64_t, int64_t, int64_t>, std::pair<int64_t, bool>> known;
  const auto key = std::make_tuple(st.st_dev, st.st_ino, static_cast<int64_t>(st.st_size),
                                   static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec,
                                   width_, offset_);
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (auto it = known.find(key); it != known.end()) return it->second;
  }
  int64_t largest = 0;
  bool oddZero = true;
  const int64_t chunkIds = (int64_t{4} << 20) / width_;  // even: chunks start at even positions
  std::vector<uint8_t> buffer(static_cast<size_t>(chunkIds * width_));
  for (int64_t first = 0; first < count_; first += chunkIds) {
    const int64_t n = std::min(chunkIds, count_ - first);
    readAt(offset_ + first * width_, n * width_, buffer.data());
    for (int64_t i = 0; i < n; ++i) {
      const int64_t id = idAt(buffer.data() + i * width_);
      largest = std::max(largest, id);
      oddZero = oddZero && (i % 2 == 0 || id == 0);
    }
  }
  std::lock_guard<std::mutex> lock(mutex);
  known[key] = {largest, oddZero};
  return {largest, oddZero};
}

int64_t TokenFile::idAt(const uint8_t* p) const {
  if (width_ == 2) {
    uint16_t v;
    std::memcpy(&v, p, 2);
    return v;
  }
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

Batch TokenFile::windowsAt(const std::vector<int64_t>& index) const {
  checkUnchanged();
  const int64_t T = blockSize_, n = static_cast<int64_t>(index.size());
  auto w = torch::empty({n, T + 1}, torch::kLong);
  auto* out = w.data_ptr<int64_t>();
  std::vector<uint8_t> window(static_cast<size_t>((T + 1) * width_));
  for (int64_t r = 0; r < n; ++r) {
    readAt(offset_ + index[r] * T * width_, (T + 1) * width_, window.data());
    for (int64_t j = 0; j <= T; ++j) out[r * (T + 1) + j] = idAt(window.data() + j * width_);
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
