#include "core/TensorFile.h"

#include <cstring>

#include "core/Error.h"

namespace sluice {
namespace {

constexpr char kMagic[8] = {'S', 'L', 'U', 'I', 'C', 'E', 'T', '1'};

template <class T>
void put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof(T));
}

class Reader {
 public:
  Reader(const std::string& bytes, const std::string& origin) : bytes_(bytes), origin_(origin) {}
  template <class T>
  T get() {
    T v;
    std::memcpy(&v, take(sizeof(T)), sizeof(T));
    return v;
  }
  const char* take(size_t n) {
    SLUICE_CHECK(pos_ + n <= bytes_.size(), Error, origin_ << " is truncated (needs " << pos_ + n << " bytes, has "
                                                           << bytes_.size() << ")");
    const char* p = bytes_.data() + pos_;
    pos_ += n;
    return p;
  }
  bool done() const { return pos_ == bytes_.size(); }

 private:
  const std::string& bytes_;
  const std::string& origin_;
  size_t pos_ = 0;
};

}  // namespace

std::string encodeTensors(const std::map<std::string, torch::Tensor>& tensors) {
  std::string out(kMagic, sizeof(kMagic));
  put<uint64_t>(out, tensors.size());
  for (auto& [name, t] : tensors) {
    auto c = t.detach().contiguous().cpu();
    put<uint32_t>(out, static_cast<uint32_t>(name.size()));
    out += name;
    put<int32_t>(out, static_cast<int32_t>(c.scalar_type()));
    put<uint32_t>(out, static_cast<uint32_t>(c.dim()));
    for (auto d : c.sizes()) put<int64_t>(out, d);
    put<uint64_t>(out, c.nbytes());
    out.append(static_cast<const char*>(c.data_ptr()), c.nbytes());
  }
  return out;
}

std::map<std::string, torch::Tensor> decodeTensors(const std::string& bytes, const std::string& origin) {
  Reader r(bytes, origin);
  SLUICE_CHECK(bytes.size() >= sizeof(kMagic) && std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) == 0, Error,
               origin << " is not a Sluice tensor file");
  r.take(sizeof(kMagic));
  const auto count = r.get<uint64_t>();
  std::map<std::string, torch::Tensor> out;
  for (uint64_t i = 0; i < count; ++i) {
    const auto len = r.get<uint32_t>();
    std::string name(r.take(len), len);
    const auto code = r.get<int32_t>();
    SLUICE_CHECK(code >= 0 && code < static_cast<int32_t>(c10::ScalarType::NumOptions), Error,
                 origin << ": tensor " << name << " has dtype code " << code << " (corrupt file)");
    const auto dtype = static_cast<c10::ScalarType>(code);
    const auto ndim = r.get<uint32_t>();
    SLUICE_CHECK(ndim <= 16, Error, origin << ": tensor " << name << " has " << ndim << " dimensions (corrupt file)");
    std::vector<int64_t> shape;
    for (uint32_t d = 0; d < ndim; ++d) {
      shape.push_back(r.get<int64_t>());
      SLUICE_CHECK(shape.back() >= 0 && shape.back() < (int64_t{1} << 40), Error,
                   origin << ": tensor " << name << " has size " << shape.back() << " (corrupt file)");
    }
    const auto nbytes = r.get<uint64_t>();
    auto t = torch::empty(shape, torch::TensorOptions().dtype(dtype));
    SLUICE_CHECK(t.nbytes() == nbytes, Error, origin << ": tensor " << name << " declares " << nbytes
                                                     << " bytes for its shape's " << t.nbytes() << " (corrupt file)");
    std::memcpy(t.data_ptr(), r.take(nbytes), nbytes);
    out.emplace(std::move(name), std::move(t));
  }
  SLUICE_CHECK(r.done(), Error, origin << " has bytes after its last tensor (corrupt file)");
  return out;
}

}  // namespace sluice
