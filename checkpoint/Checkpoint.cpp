#include "checkpoint/Checkpoint.h"

#include <torch/nn/module.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>

#include "core/Error.h"
#include "core/Files.h"
#include "core/TensorFile.h"
#include "launch/Faults.h"
#include "launch/LauncherWatch.h"

namespace sluice {
namespace fs = std::filesystem;

namespace {

constexpr const char* kFormat = "sluice-checkpoint-1";

std::string stepName(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "step_%08lld", static_cast<long long>(step));
  return buf;
}

std::string fileName(int rank) { return "rank_" + std::to_string(rank) + ".tensors"; }

// One string per rank, gathered on every rank (fixed-size rows of bytes).
std::vector<std::string> allGatherStrings(const Communicator& world, const std::string& mine) {
  auto len = torch::tensor({static_cast<int64_t>(mine.size())});
  world.allReduce(len, ReduceOp::Max);
  const int64_t width = len.item<int64_t>() + 1;
  auto row = torch::zeros({width}, torch::kUInt8);
  std::memcpy(row.data_ptr(), mine.data(), mine.size());
  auto all = torch::zeros({width * world.size()}, torch::kUInt8);
  world.allGather(row, all);
  std::vector<std::string> out;
  for (int r = 0; r < world.size(); ++r) {
    const char* p = static_cast<const char*>(all.data_ptr()) + r * width;
    out.emplace_back(p, strnlen(p, static_cast<size_t>(width)));
  }
  return out;
}

std::string describeFile(const CheckpointFile& f) {
  YAML::Emitter e;
  e << YAML::Flow << YAML::BeginMap << YAML::Key << "name" << YAML::Value << f.name << YAML::Key << "rank"
    << YAML::Value << f.rank << YAML::Key << "stage" << YAML::Value << f.stage << YAML::Key << "bytes" << YAML::Value
    << f.bytes << YAML::Key << "checksum" << YAML::Value << f.checksum << YAML::Key << "tensors" << YAML::Value
    << YAML::Flow << f.tensors << YAML::EndMap;
  return e.c_str();
}

std::string manifestYaml(const Manifest& m, const std::vector<std::string>& files) {
  YAML::Emitter e;
  e << YAML::BeginMap;
  e << YAML::Key << "format" << YAML::Value << kFormat;
  e << YAML::Key << "sluice" << YAML::Value << SLUICE_VERSION;
  e << YAML::Key << "step" << YAML::Value << m.step;
  e << YAML::Key << "lr" << YAML::Value << m.lr;
  e << YAML::Key << "samples_seen" << YAML::Value << m.samplesSeen;
  e << YAML::Key << "plan_checksum" << YAML::Value << m.planChecksum;
  if (m.lossScale > 0) {
    e << YAML::Key << "loss_scale" << YAML::Value << m.lossScale;
    e << YAML::Key << "loss_scale_good_steps" << YAML::Value << m.lossScaleGoodSteps;
  }
  e << YAML::Key << "graph_hash" << YAML::Value << m.layout.graphHash;
  e << YAML::Key << "model" << YAML::Value << YAML::BeginMap;
  for (auto& [k, v] : m.layout.model) e << YAML::Key << k << YAML::Value << v;
  e << YAML::EndMap;
  e << YAML::Key << "layout" << YAML::Value << YAML::BeginMap << YAML::Key << "stages" << YAML::Value << m.layout.stages
    << YAML::Key << "data_parallel" << YAML::Value << m.layout.dataParallel << YAML::Key << "cuts" << YAML::Value
    << YAML::Flow << m.layout.cuts << YAML::EndMap;
  e << YAML::Key << "files" << YAML::Value << YAML::BeginSeq;
  for (auto& f : files) e << YAML::Load(f);
  e << YAML::EndSeq << YAML::EndMap;
  return std::string(e.c_str()) + "\n";
}

void removeCheckpointsBeyond(const std::string& dir, int64_t keep) {
  if (keep <= 0) return;
  std::vector<std::string> complete;
  for (auto& entry : fs::directory_iterator(dir)) {
    const auto name = entry.path().filename().string();
    if (name.rfind("step_", 0) == 0 && fs::exists(entry.path() / "manifest.yaml")) complete.push_back(name);
  }
  std::sort(complete.begin(), complete.end());
  for (size_t i = 0; i + static_cast<size_t>(keep) < complete.size(); ++i) fs::remove_all(fs::path(dir) / complete[i]);
}

}  // namespace

std::map<std::string, std::string> modelFields(const Config& config) {
  std::map<std::string, std::string> out;
  auto root = YAML::Load(config.toYaml());
  for (auto it = root["model"].begin(); it != root["model"].end(); ++it) {
    // Not the model itself: where its first weights came from (a resume reads
    // the checkpoint's), and whether capture fuses attention (the same
    // parameters either way; a buffer only the unfused graph reads is the
    // model's own, Trainer::plan).
    const auto key = it->first.as<std::string>();
    if (key == "weights" || key == "fuse_attention") continue;
    if (it->second.IsScalar()) {
      out[it->first.as<std::string>()] = it->second.as<std::string>();
    } else {
      YAML::Emitter e;
      e << YAML::Flow << it->second;
      out[it->first.as<std::string>()] = e.c_str();
    }
  }
  return out;
}

std::string saveCheckpoint(const std::string& dir, const CheckpointInfo& info, const CheckpointLayout& layout,
                           const RankState& state, int stage, const Communicator& world, int64_t keepLatestK) {
  const int64_t step = info.step;
  const fs::path target = fs::path(dir) / stepName(step);
  if (world.rank() == 0) fs::create_directories(target);
  world.barrier();
  // This rank's file: written, fsynced, renamed (Note [checkpoint commit]).
  std::map<std::string, torch::Tensor> tensors;
  CheckpointFile file;
  file.name = fileName(world.rank());
  file.rank = world.rank();
  file.stage = stage;
  for (auto& [name, t] : state.tensors) {
    tensors["tensor/" + name] = t;
    file.tensors.push_back(name);
  }
  for (auto& [name, a] : state.adam) {
    if (!a.expAvg.defined()) continue;
    tensors["adam/" + name + "/exp_avg"] = a.expAvg;
    tensors["adam/" + name + "/exp_avg_sq"] = a.expAvgSq;
    tensors["adam/" + name + "/step"] = torch::tensor({a.step});
  }
  if (state.rng.defined()) tensors["rng"] = state.rng;
  tensors["step"] = torch::tensor({step});
  const std::string bytes = encodeTensors(tensors);
  faults::atCheckpointWrite(world.rank(), step);
  exitIfLauncherGone();  // Note [no orphans]: no checkpoint after the launcher's death
  writeFileDurably((target / file.name).string(), bytes);
  file.bytes = static_cast<int64_t>(bytes.size());
  file.checksum = checksum(bytes);
  // Every rank has committed when the gather returns; then the manifest, then `latest`.
  const auto files = allGatherStrings(world, describeFile(file));
  if (world.rank() == 0) {
    Manifest m;
    m.step = step;
    m.lr = info.lr;
    m.samplesSeen = info.samplesSeen;
    m.lossScale = info.lossScale;
    m.lossScaleGoodSteps = info.lossScaleGoodSteps;
    m.layout = layout;
    if (!info.planBytes.empty()) {
      writeFileDurably((target / "plan.pb").string(), info.planBytes);
      m.planChecksum = checksum(info.planBytes);
    }
    exitIfLauncherGone();
    writeFileDurably((target / "manifest.yaml").string(), manifestYaml(m, files));
    writeFileDurably((fs::path(dir) / "latest").string(), stepName(step) + "\n");
    removeCheckpointsBeyond(dir, keepLatestK);
  }
  world.barrier();
  return target.string();
}

std::string resumeDirectory(const Config& c) {
  switch (c.checkpoint.resume.mode) {
    case ResumeMode::None: return "";
    case ResumeMode::Directory: return c.checkpoint.resume.directory;
    case ResumeMode::Auto: break;
  }
  const fs::path latest = fs::path(c.checkpointDir()) / "latest";
  if (!fs::exists(latest)) return "";
  std::string name = readFile(latest.string());
  name.erase(name.find_last_not_of(" \n\r\t") + 1);
  SLUICE_CHECK(!name.empty() && name.find('/') == std::string::npos, CheckpointError,
               "checkpoint pointer " << latest.string() << " is corrupt; set checkpoint.resume to a checkpoint "
                                     << "directory or none");
  return (fs::path(c.checkpointDir()) / name).string();
}

namespace {

// What a hand-edited or foreign manifest could get wrong, before anything is
// read by it: its step (the directory step_<N> it sits in was named from it),
// the layout's counts, and the file names (only this rank's own file names,
// rank_<r>.tensors, inside the checkpoint: never a path elsewhere).
void checkManifest(const Manifest& m, const fs::path& dir) {
  const std::string where = "checkpoint " + m.path + ": manifest.yaml";
  SLUICE_CHECK(m.step >= 0, CheckpointError, where << " says step " << m.step << ", not a step count");
  const std::string base = dir.filename().empty() ? dir.parent_path().filename().string() : dir.filename().string();
  if (base.rfind("step_", 0) == 0 && base.size() > 5 && base.find_first_not_of("0123456789", 5) == std::string::npos) {
    const int64_t named = std::stoll(base.substr(5));
    SLUICE_CHECK(named == m.step, CheckpointError,
                 where << " says step " << m.step << " but the checkpoint is " << base
                       << " (written after step " << named << "): the manifest was edited or belongs to another "
                          "checkpoint");
  }
  SLUICE_CHECK(m.layout.stages >= 1 && m.layout.dataParallel >= 1, CheckpointError,
               where << " says " << m.layout.stages << " stages and " << m.layout.dataParallel
                     << " replicas: both must be at least 1");
  const int ranks = m.layout.stages * m.layout.dataParallel;
  for (auto& f : m.files) {
    SLUICE_CHECK(f.rank >= 0 && f.rank < ranks && f.stage >= 0 && f.stage < m.layout.stages, CheckpointError,
                 where << " lists " << f.name << " for rank " << f.rank << ", stage " << f.stage << ", outside its "
                       << ranks << " ranks and " << m.layout.stages << " stages");
    SLUICE_CHECK(f.name == fileName(f.rank), CheckpointError,
                 where << " names the file '" << f.name << "' for rank " << f.rank << "; a checkpoint's files are "
                       << fileName(f.rank) << " and so on, inside it");
    SLUICE_CHECK(f.bytes >= 0, CheckpointError, where << " gives " << f.name << " " << f.bytes << " bytes");
  }
}

// The manifest's fields, read from its YAML (CheckpointError when one is
// missing or not of its type, or the format is another). root is a handle
// taken by value, not const: yaml-cpp's const lookups report a missing field
// in other words than these non-const ones.
Manifest manifestFields(YAML::Node root, const std::string& path) {
  Manifest m;
  m.path = path;
  try {
    SLUICE_CHECK(root["format"].as<std::string>() == kFormat, CheckpointError,
                 "checkpoint " << path << " has format '" << root["format"].as<std::string>() << "'; this Sluice reads "
                               << kFormat);
    m.step = root["step"].as<int64_t>();
    m.lr = root["lr"].as<double>();
    m.samplesSeen = root["samples_seen"].as<int64_t>();
    m.planChecksum = root["plan_checksum"] ? root["plan_checksum"].as<std::string>() : "";
    if (root["loss_scale"]) {
      m.lossScale = root["loss_scale"].as<double>();
      m.lossScaleGoodSteps = root["loss_scale_good_steps"].as<int64_t>();
    }
    m.version = root["sluice"].as<std::string>();
    m.layout.graphHash = root["graph_hash"].as<std::string>();
    for (auto it = root["model"].begin(); it != root["model"].end(); ++it) {
      m.layout.model[it->first.as<std::string>()] = it->second.as<std::string>();
    }
    m.layout.stages = root["layout"]["stages"].as<int>();
    m.layout.dataParallel = root["layout"]["data_parallel"].as<int>();
    m.layout.cuts = root["layout"]["cuts"].as<std::vector<int>>();
    for (auto f : root["files"]) {
      CheckpointFile cf;
      cf.name = f["name"].as<std::string>();
      cf.rank = f["rank"].as<int>();
      cf.stage = f["stage"].as<int>();
      cf.bytes = f["bytes"].as<int64_t>();
      cf.checksum = f["checksum"].as<std::string>();
      cf.tensors = f["tensors"].as<std::vector<std::string>>();
      m.files.push_back(std::move(cf));
    }
  } catch (const YAML::Exception& e) {
    throw CheckpointError("checkpoint " + path + ": manifest.yaml lacks a field (" + e.msg + ")");
  }
  return m;
}

}  // namespace

Manifest openCheckpoint(const std::string& path, const CheckpointLayout& current) {
  const fs::path dir(path);
  const fs::path manifestPath = dir / "manifest.yaml";
  SLUICE_CHECK(fs::exists(manifestPath), CheckpointError,
               "checkpoint " << path << " is incomplete or not a checkpoint (no manifest.yaml): resume from another "
                             << "(checkpoint.resume) or start fresh (checkpoint.resume: none)");
  YAML::Node root;
  try {
    root = YAML::LoadFile(manifestPath.string());
  } catch (const YAML::Exception& e) {
    throw CheckpointError("checkpoint " + path + ": manifest.yaml is corrupt (" + e.msg + ")");
  }
  Manifest m = manifestFields(root, path);
  checkManifest(m, dir);
  // The same model: every model key must agree.
  for (auto& [key, value] : current.model) {
    auto it = m.layout.model.find(key);
    const std::string there = it == m.layout.model.end() ? "(absent)" : it->second;
    SLUICE_CHECK(there == value, CheckpointError,
                 "checkpoint " << path << " was made for another model: model." << key << " is " << there
                               << " there and " << value << " in this config");
  }
  for (auto& f : m.files) {
    const fs::path p = dir / f.name;
    SLUICE_CHECK(fs::exists(p), CheckpointError, "checkpoint " << path << " lacks " << f.name);
    SLUICE_CHECK(static_cast<int64_t>(fs::file_size(p)) == f.bytes, CheckpointError,
                 "checkpoint file " << p.string() << " is truncated: " << fs::file_size(p) << " bytes, the manifest says "
                                    << f.bytes);
  }
  return m;
}

std::string checkpointPlanBytes(const Manifest& m) {
  if (m.planChecksum.empty()) return "";
  const std::string p = (fs::path(m.path) / "plan.pb").string();
  SLUICE_CHECK(fs::exists(p), CheckpointError, "checkpoint " << m.path << " lacks plan.pb");
  const std::string bytes = readFile(p);
  SLUICE_CHECK(checksum(bytes) == m.planChecksum, CheckpointError,
               "checkpoint file " << p << " is corrupted: checksum " << checksum(bytes) << ", the manifest says "
                                  << m.planChecksum);
  return bytes;
}

std::vector<std::string> withoutDerivedBuffers(const Manifest& m, const std::vector<std::string>& names,
                                               const torch::nn::Module& module) {
  std::set<std::string> held, buffers;
  for (const auto& f : m.files) held.insert(f.tensors.begin(), f.tensors.end());
  for (const auto& b : module.named_buffers()) buffers.insert(b.key());
  std::vector<std::string> out;
  for (const auto& n : names) {
    if (held.count(n) || !buffers.count(n)) out.push_back(n);
  }
  return out;
}

RankState loadCheckpoint(const Manifest& m, const std::vector<std::string>& names,
                         const std::vector<std::string>& trainable, int rank, bool sameLayout) {
  // Which files to read: those that hold a tensor this rank needs (+ its own for the generator state).
  std::map<std::string, const CheckpointFile*> holder;
  for (auto& f : m.files) {
    for (auto& t : f.tensors) holder.emplace(t, &f);
  }
  std::map<std::string, std::map<std::string, torch::Tensor>> read;
  auto contents = [&](const CheckpointFile& f) -> std::map<std::string, torch::Tensor>& {
    auto it = read.find(f.name);
    if (it != read.end()) return it->second;
    const std::string p = (fs::path(m.path) / f.name).string();
    const std::string bytes = readFile(p);
    SLUICE_CHECK(checksum(bytes) == f.checksum, CheckpointError,
                 "checkpoint file " << p << " is corrupted: checksum " << checksum(bytes) << ", the manifest says "
                                    << f.checksum);
    try {
      return read.emplace(f.name, decodeTensors(bytes, p)).first->second;
    } catch (const Error& e) {
      throw CheckpointError(std::string("checkpoint file is unreadable: ") + e.what());
    }
  };
  // An entry the manifest says a file holds (CheckpointError when it does not: files swapped or edited).
  auto entry = [&](const CheckpointFile& f, const std::string& key) -> torch::Tensor {
    auto& all = contents(f);
    auto it = all.find(key);
    SLUICE_CHECK(it != all.end(), CheckpointError,
                 "checkpoint file " << (fs::path(m.path) / f.name).string() << " lacks " << key
                                    << ", which manifest.yaml says it holds: the files were swapped or edited");
    return it->second;
  };
  RankState out;
  for (auto& name : names) {
    auto h = holder.find(name);
    SLUICE_CHECK(h != holder.end(), CheckpointError,
                 "checkpoint " << m.path << " has no tensor " << name << ": it was made for another model");
    out.tensors[name] = entry(*h->second, "tensor/" + name);
  }
  for (auto& name : trainable) {
    auto h = holder.find(name);
    if (h == holder.end()) continue;
    auto& all = contents(*h->second);
    auto m1 = all.find("adam/" + name + "/exp_avg");
    if (m1 == all.end()) continue;  // saved before the first step
    optim::AdamState a;
    a.expAvg = m1->second;
    a.expAvgSq = entry(*h->second, "adam/" + name + "/exp_avg_sq");
    a.step = entry(*h->second, "adam/" + name + "/step").item<int64_t>();
    out.adam[name] = a;
  }
  if (sameLayout) {
    for (auto& f : m.files) {
      if (f.rank != rank) continue;
      auto& all = contents(f);
      auto it = all.find("rng");
      if (it != all.end()) out.rng = it->second;
    }
  }
  return out;
}

}  // namespace sluice
