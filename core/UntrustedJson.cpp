#include "core/UntrustedJson.h"

#include <set>
#include <vector>

#include "core/Error.h"

namespace sluice {
namespace {

using Json = nlohmann::json;

std::string cut(std::string s, size_t n) {
  if (s.size() > n) s = s.substr(0, n) + "...";
  return s;
}

// Thrown by the parser callback; turned into a DataError below.
struct Refusal {
  std::string reason;
};

}  // namespace

Json parseUntrustedJson(const std::string& text, const std::string& what, int maxDepth) {
  std::vector<std::set<std::string>> keys;  // one set per open object
  auto check = [&](int depth, Json::parse_event_t event, Json& parsed) -> bool {
    switch (event) {
      case Json::parse_event_t::object_start:
      case Json::parse_event_t::array_start:
        if (depth >= maxDepth) {
          throw Refusal{"nests values more than " + std::to_string(maxDepth) + " levels deep"};
        }
        if (event == Json::parse_event_t::object_start) keys.emplace_back();
        break;
      case Json::parse_event_t::object_end:
        if (!keys.empty()) keys.pop_back();
        break;
      case Json::parse_event_t::key:
        if (!keys.empty() && !keys.back().insert(parsed.get<std::string>()).second) {
          throw Refusal{"names the key " + jsonSnippet(parsed) + " twice in one object"};
        }
        break;
      default:
        break;
    }
    return true;
  };
  try {
    return Json::parse(text, check);
  } catch (const Refusal& r) {
    throw DataError(what + " " + r.reason);
  } catch (const Json::exception& e) {
    throw DataError(what + " is not JSON (" + cut(e.what(), 200) + ")");
  }
}

std::string jsonSnippet(const Json& value, size_t maxChars) {
  if (value.is_array()) return "a list of " + std::to_string(value.size()) + " values";
  if (value.is_object()) return "an object with " + std::to_string(value.size()) + " keys";
  return cut(value.dump(), maxChars);
}

}  // namespace sluice
