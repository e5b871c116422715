// models::ExportedModel's resolved program node, and how an argument's kind
// is read (internal: shared by models/Exported.cpp, which loads and checks
// the program, and models/ExportedRun.cpp, which runs it).
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "models/Exported.h"

namespace sluice::models {

using Json = nlohmann::json;

struct ExportedModel::Step {
  std::optional<c10::OperatorHandle> op;  // none: an assertion, not run (Exported.h)
  const Json* node = nullptr;
};

// The kind of an argument or output: the key of its one entry ("as_tensor", ...), "empty" when none.
std::string kindOf(const Json& arg);

// A Python number ("as_int", "as_float", "as_bool").
bool isScalarKind(const std::string& kind);

}  // namespace sluice::models
