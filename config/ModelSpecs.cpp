// The model table: one row per model, each written in its own file
// (config/models/<Name>Spec.cpp). Adding a model: its row here.
#include "config/ModelSpec.h"

#include <algorithm>

#include "config/models/Specs.h"
#include "core/Choice.h"
#include "core/Error.h"

namespace sluice {
namespace {

std::deque<ModelSpec>& table() {
  static std::deque<ModelSpec> rows = {modelspecs::gpt(),         modelspecs::llama(), modelspecs::mlp(),
                                       modelspecs::cnn(),         modelspecs::torchScript(),
                                       modelspecs::exported()};
  return rows;
}

}  // namespace

bool ModelSpec::reads(const std::string& key) const { return std::find(keys.begin(), keys.end(), key) != keys.end(); }

const std::deque<ModelSpec>& modelSpecs() { return table(); }

const ModelSpec& modelSpec(const std::string& name) {
  for (const auto& row : table()) {
    if (row.name == name) return row;
  }
  std::string names;
  for (const auto& row : table()) names += (names.empty() ? "" : " | ") + row.name;
  throw ConfigError("unknown model '" + name + "' (expected " + names + ")");
}

const ModelSpec& defaultModelSpec() { return modelSpec("gpt"); }

bool addModelSpec(ModelSpec spec) {
  SLUICE_CHECK(spec.validate && spec.memory && spec.build, ConfigError,
               "model '" << spec.name << "': a spec needs its validate, memory and build functions");
  for (const auto& row : table()) {
    SLUICE_CHECK(row.name != spec.name, ConfigError, "model '" << spec.name << "' is in the model table already");
  }
  table().push_back(std::move(spec));
  return true;
}

std::string modelNamesWhere(bool ModelSpec::*trait) {
  std::vector<std::string> names;
  for (const auto& row : table()) {
    if (row.*trait) names.push_back(row.name);
  }
  return joinedWithOr(names);
}

std::string modelNamesReading(const std::string& key) {
  std::vector<std::string> names;
  for (const auto& row : table()) {
    if (row.reads(key)) names.push_back(row.name);
  }
  return joinedWithOr(names);
}

}  // namespace sluice
