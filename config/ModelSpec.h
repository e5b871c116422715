// config::ModelSpec: one kind of model in one row (STYLE rule 9; as
// torchtitan registers a model in one spec): its name for `model.name`, the
// model.* keys it reads, the traits other layers ask about, its checks, its
// memory estimate and its builder. Each built-in model's row is written in
// its own file (config/models/<Name>Spec.cpp) and listed once in the table
// (config/ModelSpecs.cpp); nothing else names a model. Config parses
// model.name into a pointer to its row (ModelConfig::spec), so an unknown
// name is refused at load and a model can never take another's checks.
//
//   const ModelSpec& gpt = modelSpec("gpt");  // ConfigError listing the names otherwise
//   gpt.reads("vocab_size");                  // true
//   gpt.validate(config);                     // at load (config/ConfigValidate.cpp)
//   gpt.build(config);                        // the module, forward, loss, data (train/ModelFromConfig.h)
//
// Adding a model (docs/architecture.md, "Add a model"): its module in
// models/, its spec file here, one row in the table. addModelSpec() adds a
// row at run time (tests/config/ToyModel.cpp: a test-only model). Torch-free:
// ModelSetup is only declared here (models/ModelSetup.h).
#pragma once

#include <deque>
#include <string>
#include <vector>

namespace sluice {

struct Config;
struct ModelSetup;

// One part of what a rank holds before the model is split, with the keys that drive it.
struct MemoryPart {
  std::string what;  // "one micro-batch's activations (training.micro_batch_size, model.embd)"
  double bytes = 0;
};

struct ModelSpec {
  std::string name;     // model.name
  std::string summary;  // one line, for the docs and the error that lists the names
  // The model.* keys it reads, besides name, fuse_attention and weights
  // (every model's): written to config.resolved.yaml; another model's keys
  // are accepted (configs switch model.name by --set) unless strictKeys.
  std::vector<std::string> keys;
  bool tiesEmbeddings = false;   // model.tie_embeddings' default (for a model that reads it)
  bool tokenWindows = false;     // reads windows of token ids: data.name text, tokens or synthetic tokens
  bool images = false;           // reads [1, 28, 28] images: data.name fashion_mnist
  bool torchScriptFile = false;  // model.path is a TorchScript module: model.pt at the end, export --format torchscript
  // model.path fixes the model's sizes: a key it does not read is refused
  // (why: strictKeysReason), and `sluice export` copies the config.json beside the file.
  bool strictKeys = false;
  std::string strictKeysReason;
  bool listed = true;  // false: a test-only row, not in README's key table

  // Its checks, after every key is read: ConfigError ("config error: ...")
  // naming the key and the arithmetic. May derive values (exported: the
  // block and vocabulary sizes from the program).
  void (*validate)(Config& config) = nullptr;
  // What one rank holds before the split, from the config alone
  // (parameters with gradients and Adam state, one micro-batch's activations).
  std::vector<MemoryPart> (*memory)(const Config& config) = nullptr;
  // The module (seeded by job.seed by the caller), its forward, loss and data.
  ModelSetup (*build)(const Config& config) = nullptr;

  bool reads(const std::string& key) const;
};

// The rows, built-in ones in the table's order, then those addModelSpec added.
const std::deque<ModelSpec>& modelSpecs();
// The row named `name`; ConfigError "unknown model 'x' (expected gpt | llama | ...)".
const ModelSpec& modelSpec(const std::string& name);
// model.name's default.
const ModelSpec& defaultModelSpec();
// Adds a row (test-only models); ConfigError for a name already taken or a
// row without its three functions. Returns true, for `const bool k = addModelSpec(...)`.
bool addModelSpec(ModelSpec spec);
// The names of the rows with a trait, or reading a key, in table order: "gpt, llama or exported".
std::string modelNamesWhere(bool ModelSpec::*trait);
std::string modelNamesReading(const std::string& key);

}  // namespace sluice
