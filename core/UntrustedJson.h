// core::UntrustedJson: JSON from files Sluice did not write (a safetensors
// header, a .pt2 archive's records), read so that no file can crash the
// process or flood a message.
//
// Contract:
//   - parseUntrustedJson refuses, while parsing and before anything deep is
//     built, nesting beyond maxDepth (a value nested 100,000 levels deep
//     used to overflow the stack when printed), and an object that names a
//     key twice (the later would win silently; Python's safetensors and
//     torch.export readers refuse it too). Errors are DataError
//     "<what>: <reason>", the parser's own text cut to 200 characters.
//   - jsonSnippet gives a value for an error message without recursion:
//     a scalar as JSON cut to maxChars, a list or object by its size.
#pragma once

#include <cstddef>
#include <string>

#include <nlohmann/json.hpp>

namespace sluice {

// what: the file and record, e.g. "safetensors file 'x.safetensors': the header".
nlohmann::json parseUntrustedJson(const std::string& text, const std::string& what, int maxDepth = 64);

std::string jsonSnippet(const nlohmann::json& value, size_t maxChars = 80);

}  // namespace sluice
