// `sluice export CONFIG --checkpoint DIR -o OUT`: a checkpoint's weights as TorchScript or safetensors.
#include "cli/Commands.h"

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "checkpoint/Checkpoint.h"
#include "checkpoint/SafeTensors.h"
#include "config/Config.h"
#include "core/Capture.h"
#include "core/Error.h"
#include "core/Files.h"
#include "models/TorchScript.h"
#include "train/ModelFromConfig.h"

namespace sluice::cli {

namespace fs = std::filesystem;

// The checkpoint's parameters and buffers, by module path, as safetensors:
// -o a directory (its model.safetensors, as from_pretrained reads) or a
// *.safetensors file.
static int exportSafeTensors(const sluice::Config& config, const sluice::Manifest& manifest, const std::string& dir,
                      const std::string& output) {
  auto setup = sluice::makeModelSetup(config);
  // Tied names (one tensor under several module paths, e.g. an exported
  // model's lm_head.weight and transformer.wte.weight) are one tensor in the
  // checkpoint, under the name capture gave it: read once, written under each.
  std::set<std::string> saved;
  for (auto& f : manifest.files) saved.insert(f.tensors.begin(), f.tensors.end());
  std::map<const void*, std::vector<std::string>> aliases;
  const std::set<std::string> transient(setup.transientBuffers.begin(), setup.transientBuffers.end());
  for (auto& [name, tensor] : sluice::namedTensors(*setup.module)) {
    if (!transient.count(name)) aliases[tensor.unsafeGetTensorImpl()].push_back(name);
  }
  std::vector<std::string> names;
  std::vector<std::pair<std::string, std::vector<std::string>>> groups;  // (the checkpoint's name, all names)
  for (auto& [impl, group] : aliases) {
    auto found = std::find_if(group.begin(), group.end(), [&](const std::string& n) { return saved.count(n) > 0; });
    names.push_back(found != group.end() ? *found : group.front());
    groups.emplace_back(names.back(), group);
  }
  // A buffer the model derives and the checkpoint lacks is written as the model builds it.
  auto state = sluice::loadCheckpoint(manifest, sluice::withoutDerivedBuffers(manifest, names, *setup.module), {}, 0,
                                      false);
  for (auto& n : names) {
    if (!state.tensors.count(n)) state.tensors[n] = setup.module->named_buffers()[n];
  }
  for (auto& [picked, group] : groups) {
    for (auto& n : group) state.tensors[n] = state.tensors.at(picked);
  }
  std::string file = output;
  if (fs::path(output).extension() != ".safetensors") {
    fs::create_directories(output);
    file = (fs::path(output) / "model.safetensors").string();
  }
  sluice::saveSafeTensors(file, state.tensors, {{"format", "pt"}, {"sluice_step", std::to_string(manifest.step)}});
  // A Hugging Face model's config.json beside its program (models/export_hf.py
  // writes one): copied, so from_pretrained(output) reads the directory.
  const auto hfConfig = fs::path(config.model.path).parent_path() / "config.json";
  if (config.model.spec->strictKeys && file != output && fs::is_regular_file(hfConfig)) {
    sluice::writeFileAtomically((fs::path(output) / "config.json").string(), sluice::readFile(hfConfig.string()));
    std::cout << "copied " << hfConfig.string() << " to " << output << std::endl;
  }
  std::cout << "wrote " << file << ": the " << state.tensors.size() << " parameters and buffers of " << dir
            << " (step " << manifest.step << ")" << std::endl;
  return 0;
}

// sluice export: the checkpoint's parameters and buffers (by module path)
// put into the module at model.path and saved to -o (torchscript,
// models/TorchScript.h), or written as safetensors (checkpoint/SafeTensors.h).
int exportCommand(const CommandLine& a, int, char**) {
  auto config = sluice::Config::load(a.config, a.overrides);
  const bool torchscript = config.model.spec->torchScriptFile;
  const std::string format = !a.format.empty() ? a.format : torchscript ? "torchscript" : "safetensors";
  if (format == "torchscript" && !torchscript) {
    throw sluice::ConfigError("sluice export --format torchscript writes TorchScript models; " + a.config +
                              " has model.name " + config.model.spec->name +
                              ": use --format safetensors (or resume its checkpoints with checkpoint.resume)");
  }
  if (a.checkpoint.empty() || a.output.empty()) {
    throw sluice::ConfigError("sluice: usage: sluice export CONFIG --checkpoint DIR -o OUTPUT [--format F]\n\n" +
                              sluice::commandLineUsage());
  }
  std::string dir = a.checkpoint;
  if (!fs::exists(fs::path(dir) / "manifest.yaml") && fs::exists(fs::path(dir) / "latest")) {
    config.checkpoint.dir = dir;
    config.checkpoint.resume = sluice::ResumeSetting{sluice::ResumeMode::Auto, ""};
    dir = sluice::resumeDirectory(config);
  }
  sluice::CheckpointLayout layout;
  layout.model = sluice::modelFields(config);
  const auto manifest = sluice::openCheckpoint(dir, layout);
  if (format == "safetensors") return exportSafeTensors(config, manifest, dir, a.output);
  const auto names = sluice::models::torchScriptTensorNames(config.model.path);
  const auto state = sluice::loadCheckpoint(manifest, names, {}, 0, false);
  sluice::models::exportModule(config.model.path, state.tensors, a.output);
  std::cout << "wrote " << a.output << ": " << config.model.path << " with the " << state.tensors.size()
            << " parameters and buffers of " << dir << " (step " << manifest.step << ")" << std::endl;
  return 0;
}

}  // namespace sluice::cli
