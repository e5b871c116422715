#include "checkpoint/SafeTensors.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <optional>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/Error.h"
#include "core/Files.h"
#include "core/UntrustedJson.h"

namespace sluice {
namespace {

using Json = nlohmann::json;

struct DtypeName {
  c10::ScalarType type;
  const char* name;
};
constexpr DtypeName kDtypes[] = {
    {c10::kDouble, "F64"}, {c10::kFloat, "F32"}, {c10::kHalf, "F16"},  {c10::kBFloat16, "BF16"}, {c10::kLong, "I64"},
    {c10::kInt, "I32"},    {c10::kShort, "I16"}, {c10::kChar, "I8"},   {c10::kByte, "U8"},       {c10::kBool, "BOOL"}};

const char* dtypeName(c10::ScalarType type) {
  for (auto& d : kDtypes) {
    if (d.type == type) return d.name;
  }
  throw Error(std::string("safetensors: no dtype for ") + c10::toString(type));
}

std::optional<c10::ScalarType> dtypeOf(const std::string& name) {
  for (auto& d : kDtypes) {
    if (name == d.name) return d.type;
  }
  return std::nullopt;
}

std::string shapeText(c10::IntArrayRef shape) {
  std::ostringstream os;
  os << shape;
  return os.str();
}

// One entry of the header, checked against the data's size.
torch::Tensor readEntry(const std::string& path, const std::string& name, const Json& e, const char* data,
                        int64_t dataBytes) {
  auto bad = [&](const std::string& why) { return DataError("safetensors file '" + path + "': tensor '" + name + "' " + why); };
  if (!e.is_object() || !e.contains("dtype") || !e.contains("shape") || !e.contains("data_offsets")) {
    throw bad("needs dtype, shape and data_offsets");
  }
  const auto type = e["dtype"].is_string() ? dtypeOf(e["dtype"].get<std::string>()) : std::nullopt;
  if (!type) {
    std::string names;
    for (auto& d : kDtypes) names += (names.empty() ? "" : ", ") + std::string(d.name);
    throw bad("has dtype " + jsonSnippet(e["dtype"]) + " (Sluice reads " + names + ")");
  }
  if (!e["shape"].is_array()) throw bad("has shape " + jsonSnippet(e["shape"]) + " (expected a list of sizes)");
  std::vector<int64_t> shape;
  // The bytes the shape needs, checked for overflow before anything is allocated.
  const int64_t elementBytes = static_cast<int64_t>(c10::elementSize(*type));
  int64_t bytes = elementBytes;
  for (auto& d : e["shape"]) {
    if (!d.is_number_integer() || d.get<int64_t>() < 0) {
      throw bad("has a size " + jsonSnippet(d) + " in its shape (sizes are whole numbers >= 0)");
    }
    const int64_t size = d.get<int64_t>();
    if (size > 0 && bytes > dataBytes / size) {
      throw bad("has shape " + jsonSnippet(e["shape"], 200) + ", larger than the file's whole data section (" +
                std::to_string(dataBytes) + " bytes)");
    }
    bytes *= size;
    shape.push_back(size);
  }
  const auto& off = e["data_offsets"];
  if (!off.is_array() || off.size() != 2 || !off[0].is_number_integer() || !off[1].is_number_integer()) {
    throw bad("has data_offsets " + jsonSnippet(off, 200) + " (expected [begin, end])");
  }
  const int64_t begin = off[0].get<int64_t>(), end = off[1].get<int64_t>();
  if (begin < 0 || end < begin || end > dataBytes) {
    throw bad("lies at bytes [" + std::to_string(begin) + ", " + std::to_string(end) + ") of a data section of " +
              std::to_string(dataBytes) + ": the file is truncated or not safetensors");
  }
  if (end - begin != bytes) {
    throw bad("has " + std::to_string(end - begin) + " bytes but shape " + shapeText(shape) + " of " +
              e["dtype"].get<std::string>() + " needs " + std::to_string(bytes));
  }
  auto t = torch::empty(shape, torch::TensorOptions().dtype(*type));
  if (bytes > 0) std::memcpy(t.data_ptr(), data + begin, static_cast<size_t>(bytes));
  return t;
}

}  // namespace

void saveSafeTensors(const std::string& path, const std::map<std::string, torch::Tensor>& tensors,
                     const std::map<std::string, std::string>& metadata) {
  Json header = Json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<torch::Tensor> bodies;
  int64_t offset = 0;
  for (auto& [name, tensor] : tensors) {  // (a std::map: in name order)
    auto t = tensor.detach().to(torch::kCPU).contiguous();
    const int64_t bytes = t.numel() * static_cast<int64_t>(t.element_size());
    header[name] = {{"dtype", dtypeName(t.scalar_type())}, {"shape", t.sizes().vec()}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    bodies.push_back(std::move(t));
  }
  std::string json = header.dump();
  json.append((8 - (8 + json.size()) % 8) % 8, ' ');  // the data starts 8-byte aligned
  std::string out(8, '\0');
  uint64_t n = json.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  out += json;
  out.reserve(out.size() + static_cast<size_t>(offset));
  for (auto& t : bodies) out.append(static_cast<const char*>(t.data_ptr()), t.numel() * t.element_size());
  writeFileAtomically(path, out);
}

std::map<std::string, torch::Tensor> loadSafeTensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  SLUICE_CHECK(in, DataError, "safetensors file '" << path << "' cannot be opened");
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  SLUICE_CHECK(bytes.size() >= 8, DataError, "safetensors file '" << path << "' has " << bytes.size()
                                                                   << " bytes: too short for the format's header");
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
  SLUICE_CHECK(n <= bytes.size() - 8, DataError,
               "safetensors file '" << path << "': its header claims " << n << " bytes but the file has "
                                    << bytes.size() << ": it is truncated or not safetensors");
  const Json header = parseUntrustedJson(bytes.substr(8, n), "safetensors file '" + path + "': the header");
  SLUICE_CHECK(header.is_object(), DataError, "safetensors file '" << path << "': the header is not a JSON object");
  const char* data = bytes.data() + 8 + n;
  const int64_t dataBytes = static_cast<int64_t>(bytes.size() - 8 - n);
  std::map<std::string, torch::Tensor> out;
  std::vector<std::pair<std::pair<int64_t, int64_t>, std::string>> spans;  // (begin, end), name
  for (auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      bool strings = entry.is_object();
      if (strings) {
        for (auto& item : entry.items()) strings = strings && item.value().is_string();
      }
      SLUICE_CHECK(strings, DataError, "safetensors file '" << path << "': __metadata__ is "
                                         << jsonSnippet(entry) << ", not an object of strings");
      continue;
    }
    out[name] = readEntry(path, name, entry, data, dataBytes);
    spans.push_back({{entry["data_offsets"][0].get<int64_t>(), entry["data_offsets"][1].get<int64_t>()}, name});
  }
  // As Python's safetensors checks: the tensors tile the data section in
  // order, with no overlap, no gap and nothing after the last one.
  std::sort(spans.begin(), spans.end());
  int64_t at = 0;
  for (auto& [span, name] : spans) {
    SLUICE_CHECK(span.first == at, DataError,
                 "safetensors file '" << path << "': tensor '" << name << "' starts at byte " << span.first
                                      << " of the data section, but the tensors before it end at byte " << at << " ("
                                      << (span.first < at ? "they overlap" : "a gap")
                                      << "): not a valid safetensors file");
    at = span.second;
  }
  SLUICE_CHECK(at == dataBytes, DataError,
               "safetensors file '" << path << "' has " << dataBytes - at << " bytes after its last tensor (the data "
                                    << "section is " << dataBytes << " bytes, the tensors end at " << at
                                    << "): trailing bytes, not a valid safetensors file");
  return out;
}

std::map<std::string, torch::Tensor> namedTensors(const torch::nn::Module& module) {
  std::map<std::string, torch::Tensor> out;
  for (auto& p : module.named_parameters()) out[p.key()] = p.value();
  for (auto& b : module.named_buffers()) out[b.key()] = b.value();
  return out;
}

int64_t loadWeights(torch::nn::Module& module, const std::string& path) {
  std::map<std::string, torch::Tensor> file;
  try {
    file = loadSafeTensors(path);
  } catch (const DataError& e) {
    throw ConfigError(std::string("config error: model.weights: ") + e.what());
  }
  const auto mine = namedTensors(module);
  auto error = [&](const std::string& why) { return ConfigError("config error: model.weights '" + path + "': " + why); };
  for (auto& [name, t] : file) {
    auto it = mine.find(name);
    if (it == mine.end()) {
      throw error("holds '" + name + "', which is no parameter or buffer of the model (its names are module paths, e.g. '" +
                  mine.begin()->first + "')");
    }
    if (it->second.sizes() != t.sizes() || it->second.scalar_type() != t.scalar_type()) {
      throw error("'" + name + "' is " + c10::toString(t.scalar_type()) + shapeText(t.sizes()) + " but the model's is " +
                  c10::toString(it->second.scalar_type()) + shapeText(it->second.sizes()));
    }
  }
  // A tied parameter (one tensor under several names) needs one of its names
  // in the file: Hugging Face's save_pretrained writes the embedding alone.
  std::set<const void*> given;
  for (auto& [name, t] : file) given.insert(mine.at(name).unsafeGetTensorImpl());
  int64_t missing = 0;
  std::string first;
  for (auto& p : module.named_parameters()) {
    if (!given.count(p.value().unsafeGetTensorImpl()) && missing++ == 0) first = p.key();
  }
  if (missing > 0) {
    throw error("lacks " + std::to_string(missing) + " of the model's " + std::to_string(module.named_parameters().size()) +
                " parameters, the first '" + first + "' (export a checkpoint with `sluice export --format safetensors`)");
  }
  torch::NoGradGuard noGrad;
  for (auto& [name, t] : file) mine.at(name).copy_(t);
  return static_cast<int64_t>(file.size());
}

}  // namespace sluice
