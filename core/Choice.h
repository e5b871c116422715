// core::Choice: a user's choice among named kinds (device, backend, guard
// mode, ...): one table of {kind, name, summary} rows per choice, parsed
// once into its typed value (STYLE rule 9). Adding a kind is a row.
//
//   const std::vector<Choice<DeviceKind>> kKinds = {{DeviceKind::Cpu, "cpu", "..."}, ...};
//   DeviceKind k = parseChoice(kKinds, "cuda", "device");   // ConfigError listing "cpu | cuda" otherwise
//   choiceName(kKinds, k);                                  // "cuda"
#pragma once

#include <string>
#include <vector>

#include "core/Error.h"

namespace sluice {

template <class Kind>
struct Choice {
  Kind kind;
  const char* name;
  const char* summary;
  bool listed = true;  // false: a test-only row, parsed but not listed in README's tables (configChoiceNames)
};

// "a, b or c": names as a sentence lists them (error messages that name the choices).
inline std::string joinedWithOr(const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) out += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  return out;
}

// "cpu | cuda" (the listed rows)
template <class Kind>
std::string choiceNames(const std::vector<Choice<Kind>>& table) {
  std::string names;
  for (auto& c : table) {
    if (c.listed) names += (names.empty() ? "" : " | ") + std::string(c.name);
  }
  return names;
}

// Throws ConfigError "unknown <what> '<name>' (expected a | b)".
template <class Kind>
Kind parseChoice(const std::vector<Choice<Kind>>& table, const std::string& name, const char* what) {
  for (auto& c : table) {
    if (name == c.name) return c.kind;
  }
  throw ConfigError("unknown " + std::string(what) + " '" + name + "' (expected " + choiceNames(table) + ")");
}

template <class Kind>
const char* choiceName(const std::vector<Choice<Kind>>& table, Kind kind) {
  for (auto& c : table) {
    if (c.kind == kind) return c.name;
  }
  return "?";
}

}  // namespace sluice
