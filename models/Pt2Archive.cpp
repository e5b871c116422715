#include "models/Pt2Archive.h"

#include <caffe2/serialize/inline_container.h>

#include <filesystem>
#include <sstream>
#include <nlohmann/json.hpp>

#include "core/Error.h"
#include "core/UntrustedJson.h"

namespace sluice::models {
namespace {

using Json = nlohmann::json;

std::string readRecord(caffe2::serialize::PyTorchStreamReader& zip, const std::string& name) {
  auto [data, size] = zip.getRecord(name);
  return std::string(static_cast<const char*>(data.get()), size);
}

Json parse(const std::string& path, const std::string& record, const std::string& text) {
  try {
    return parseUntrustedJson(text, record);
  } catch (const DataError& e) {
    throw ConfigError("model.path '" + path + "': " + e.what() + "; write the file again with torch.export.save");
  }
}

int64_t asInt(const Json& sym, const std::string& where) {
  SLUICE_CHECK(sym.contains("as_int"), ConfigError,
               where << " has a symbolic size (" << jsonSnippet(sym) << "); export with static shapes");
  return sym.at("as_int").get<int64_t>();
}

// One payload of a *_config.json: the storage file's bytes viewed with the
// entry's dtype, sizes, strides and offset. Storages are read once and
// shared by the FQNs that name the same file.
torch::Tensor payload(caffe2::serialize::PyTorchStreamReader& zip, const std::string& path, const std::string& dir,
                      const std::string& fqn, const Json& entry, std::map<std::string, torch::Tensor>& storages) {
  const std::string where = "model.path '" + path + "': " + fqn;
  SLUICE_CHECK(!entry.value("use_pickle", false), ConfigError,
               where << " was pickled (a tensor subclass); export plain tensors");
  const auto& meta = entry.at("tensor_meta");
  const auto dtype = pt2ScalarType(meta.at("dtype").get<int>(), where);
  std::vector<int64_t> sizes, strides;
  for (auto& s : meta.at("sizes")) sizes.push_back(asInt(s, where));
  for (auto& s : meta.at("strides")) strides.push_back(asInt(s, where));
  const int64_t offset = asInt(meta.at("storage_offset"), where);
  const std::string file = dir + entry.at("path_name").get<std::string>();
  auto found = storages.find(file);
  if (found == storages.end()) {
    SLUICE_CHECK(zip.hasRecord(file), ConfigError, where << ": the archive lacks " << file);
    const std::string bytes = readRecord(zip, file);
    auto raw = torch::empty({static_cast<int64_t>(bytes.size())}, torch::kUInt8);
    std::memcpy(raw.data_ptr(), bytes.data(), bytes.size());
    found = storages.emplace(file, raw).first;
  }
  const auto& raw = found->second;
  const int64_t item = static_cast<int64_t>(c10::elementSize(dtype));
  int64_t extent = sizes.empty() ? 1 : 0;  // elements the view reaches, past its offset
  if (!sizes.empty()) {
    bool empty = false;
    for (size_t d = 0; d < sizes.size(); ++d) empty = empty || sizes[d] == 0;
    if (!empty) {
      extent = 1;
      for (size_t d = 0; d < sizes.size(); ++d) extent += (sizes[d] - 1) * strides[d];
    }
  }
  SLUICE_CHECK(raw.numel() % item == 0 && (offset + extent) * item <= raw.numel(), ConfigError,
               where << ": " << raw.numel() << " bytes do not hold a " << c10::toString(dtype) << " tensor of sizes "
                     << c10::IntArrayRef(sizes) << " at offset " << offset << "; the archive is damaged");
  // The same view of the same storage under several FQNs (tied weights: one
  // Parameter in Python) is one tensor, so Sluice ties them (Note [tied
  // parameters] in train/RankTopology.h), never two leaves sharing memory.
  std::ostringstream key;
  key << file << "|" << c10::toString(dtype) << "|" << c10::IntArrayRef(sizes) << "|" << c10::IntArrayRef(strides)
      << "|" << offset;
  auto view = storages.find(key.str());
  if (view == storages.end()) {
    view = storages.emplace(key.str(), raw.view(dtype).as_strided(sizes, strides, offset)).first;
  }
  return view->second;
}

void readPayloads(caffe2::serialize::PyTorchStreamReader& zip, const std::string& path, const std::string& dir,
                  const std::string& config, Pt2Archive& out) {
  if (!zip.hasRecord(dir + config)) return;
  const Json doc = parse(path, dir + config, readRecord(zip, dir + config));
  std::map<std::string, torch::Tensor> storages;
  for (auto& [fqn, entry] : doc.at("config").items()) {
    out.tensors[fqn] = payload(zip, path, dir, fqn, entry, storages);
    const auto& meta = entry.at("tensor_meta");
    if (meta.contains("requires_grad") && meta.at("requires_grad").is_boolean() && !meta.at("requires_grad").get<bool>()) {
      out.frozen.insert(fqn);
    }
  }
}

}  // namespace

c10::ScalarType pt2ScalarType(int code, const std::string& where) {
  switch (code) {
    case 1: return c10::kByte;
    case 2: return c10::kChar;
    case 3: return c10::kShort;
    case 4: return c10::kInt;
    case 5: return c10::kLong;
    case 6: return c10::kHalf;
    case 7: return c10::kFloat;
    case 8: return c10::kDouble;
    case 12: return c10::kBool;
    case 13: return c10::kBFloat16;
    default: break;
  }
  throw ConfigError(where + ": dtype code " + std::to_string(code) +
                    " (torch.export's ScalarType) is not one Sluice trains with; use float32, bfloat16, float16 or "
                    "integer tensors");
}

namespace {

std::unique_ptr<caffe2::serialize::PyTorchStreamReader> openPt2(const std::string& path) {
  SLUICE_CHECK(std::filesystem::is_regular_file(path), ConfigError,
               "model.path '" << path << "' is not a file; write one with "
                                 "torch.export.save(torch.export.export(model, example_args), path)");
  std::unique_ptr<caffe2::serialize::PyTorchStreamReader> zip;
  try {
    zip = std::make_unique<caffe2::serialize::PyTorchStreamReader>(path);
  } catch (const c10::Error& e) {
    throw ConfigError("model.path '" + path + "' is not a torch.export archive (not a zip PyTorch wrote: " +
                      e.what_without_backtrace() + "); write one with torch.export.save");
  }
  const bool pt2 = zip->hasRecord("archive_format") && readRecord(*zip, "archive_format") == "pt2";
  SLUICE_CHECK(pt2 && zip->hasRecord("models/model.json"), ConfigError,
               "model.path '" << path << "' is a PyTorch zip but not a torch.export archive (no archive_format "
                                 "'pt2' with models/model.json; a TorchScript file is model.name: torchscript); "
                                 "write one with torch.export.save");
  return zip;
}

std::shared_ptr<const Json> readProgram(caffe2::serialize::PyTorchStreamReader& zip, const std::string& path) {
  return std::make_shared<const Json>(parse(path, "models/model.json", readRecord(zip, "models/model.json")));
}

}  // namespace

std::shared_ptr<const nlohmann::json> readPt2Program(const std::string& path) {
  auto zip = openPt2(path);
  return readProgram(*zip, path);
}

Pt2Archive readPt2(const std::string& path) {
  auto zip = openPt2(path);
  Pt2Archive out;
  out.path = path;
  out.program = readProgram(*zip, path);
  readPayloads(*zip, path, "data/weights/", "model_weights_config.json", out);
  readPayloads(*zip, path, "data/constants/", "model_constants_config.json", out);
  return out;
}

}  // namespace sluice::models
