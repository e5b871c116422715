#include "config/Config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "core/Error.h"
#include "core/Files.h"
#include "config/ConfigKeys.h"

namespace sluice {
namespace {

template <class T>
const char* typeName() {
  if constexpr (std::is_same_v<T, std::string>) return "a string";
  if constexpr (std::is_same_v<T, double>) return "a number";
  if constexpr (std::is_same_v<T, bool>) return "true or false";
  if constexpr (std::is_same_v<T, std::vector<int>>) return "a list of integers";
  if constexpr (std::is_same_v<T, std::vector<std::string>>) return "a list of strings";
  if constexpr (std::is_same_v<T, std::map<std::string, std::string>>) return "a mapping of names to values";
  return "an integer";
}

// A closed choice's name parsed into its row; ConfigError "config error: <key>
// must be a, b or c<note>, got 'x'" otherwise.
template <class T>
T parseClosedChoice(const std::vector<Choice<T>>& table, const std::string& name, const std::string& key,
                    const char* note) {
  std::vector<std::string> names;
  for (auto& row : table) {
    if (name == row.name) return row.kind;
    names.push_back(row.name);
  }
  throw ConfigError("config error: " + key + " must be " + joinedWithOr(names) + note + ", got '" + name + "'");
}

InputSpec readTensorSpec(const YAML::Node& node, const std::string& key) {
  SLUICE_CHECK(node.IsMap(), ConfigError, "config error: " << key << " must be a mapping {name, shape, dtype}");
  InputSpec t;
  for (auto it = node.begin(); it != node.end(); ++it) {
    const auto k = it->first.as<std::string>();
    try {
      if (k == "name") t.name = it->second.as<std::string>();
      else if (k == "shape") t.shape = it->second.as<std::vector<int64_t>>();
      else if (k == "dtype")
        t.dtype = parseClosedChoice(inputDtypeChoices(), it->second.as<std::string>(), key + ".dtype", "");
      else throw ConfigError("config error: unknown key '" + key + "." + k + "'. Known keys: dtype name shape");
    } catch (const YAML::Exception&) {
      throw ConfigError("config error: " + key + "." + k + ": expected " +
                        (k == "shape" ? "a list of sizes like [28, 28]" : "a string"));
    }
  }
  return t;
}

// YAML allows a key twice in a mapping and yaml-cpp keeps the first: a
// config where a later line silently loses is an error here.
void rejectDuplicateKeys(const YAML::Node& map, const std::string& prefix) {
  std::map<std::string, int> line;
  for (auto it = map.begin(); it != map.end(); ++it) {
    const auto key = it->first.as<std::string>();
    const int at = it->first.Mark().line + 1;
    auto [seen, fresh] = line.emplace(key, at);
    SLUICE_CHECK(fresh, ConfigError,
                 "config error: '" << prefix << key << "' is given twice (lines " << seen->second << " and " << at
                                   << "); keep one");
  }
}

// Reads one YAML map; remembers which keys were read so finish() can reject the rest.
class MapReader {
 public:
  MapReader(const YAML::Node& root, const std::string& section, const std::string& path = "")
      : path_(path.empty() ? section : path) {
    YAML::Node found = root[section];
    if (!found.IsDefined()) return;  // a missing section is an invalid node in yaml-cpp
    node_.reset(found);
    if (!node_.IsNull()) {
      SLUICE_CHECK(node_.IsMap(), ConfigError,
                   "config error: '" << path_ << "' must be a mapping of keys to values");
      rejectDuplicateKeys(node_, path_ + ".");
    }
  }

  template <class T>
  void get(const std::string& key, T& out) {
    known_.insert(key);
    if (!node_ || node_.IsNull()) return;
    const YAML::Node& node = node_;  // const: the non-const operator[] inserts the key
    YAML::Node v = node[key];
    if (!v) return;
    // `key:` with nothing after it (or --set key=) is a mistake, not the default.
    SLUICE_CHECK(!v.IsNull(), ConfigError,
                 "config error: " << path_ << "." << key << " has no value; give one, or remove the key to use the "
                                  << "default");
    try {
      out = v.as<T>();
      if constexpr (std::is_same_v<T, double>) {
        SLUICE_CHECK(std::isfinite(out), ConfigError,
                     "config error: " << path_ << "." << key << ": expected a finite number, got '" << v.Scalar()
                                      << "'");
      }
    } catch (const YAML::Exception&) {
      std::ostringstream shown;
      shown << v;
      throw ConfigError("config error: " + path_ + "." + key + ": expected " + typeName<T>() + ", got '" +
                        shown.str() + "'");
    }
  }

  // The raw node of a key (an invalid node when absent); marks the key as known.
  YAML::Node raw(const std::string& key) {
    known_.insert(key);
    if (!node_ || node_.IsNull()) return YAML::Node(YAML::NodeType::Undefined);
    const YAML::Node& node = node_;
    return node[key];
  }
  const std::string& path() const { return path_; }

  // A choice by name, parsed into its typed value (parse throws ConfigError
  // listing the names); `name` is the current value's name (the default).
  template <class T, class Parse>
  void getChoice(const std::string& key, T& out, std::string name, Parse parse) {
    get(key, name);
    try {
      out = parse(name);
    } catch (const ConfigError& e) {
      if (std::string(e.what()).rfind("config error: ", 0) == 0) throw;  // it names its key already
      throw ConfigError("config error: " + path_ + "." + key + ": " + e.what());
    }
  }

  // A nested section (e.g. optimizer.dist_adam); marks the key as known here.
  MapReader child(const std::string& key) {
    known_.insert(key);
    YAML::Node empty;
    return (!node_ || node_.IsNull()) ? MapReader(empty, key, path_ + "." + key) : MapReader(node_, key, path_ + "." + key);
  }

  void finish() {
    if (!node_ || node_.IsNull()) return;
    for (auto it = node_.begin(); it != node_.end(); ++it) {
      auto key = it->first.as<std::string>();
      if (!known_.count(key)) {
        std::ostringstream os;
        os << "config error: unknown key '" << path_ << "." << key << "'. Known keys of '" << path_ << "':";
        for (auto& k : known_) os << " " << k;
        throw ConfigError(os.str());
      }
    }
  }

 private:
  YAML::Node node_;
  std::string path_;
  std::set<std::string> known_;
};

void setPath(YAML::Node node, const std::vector<std::string>& parts, size_t i, const YAML::Node& value) {
  if (i + 1 == parts.size()) {
    node[parts[i]] = value;
    return;
  }
  const YAML::Node& view = node;
  if (!view[parts[i]] || !view[parts[i]].IsMap()) node[parts[i]] = YAML::Node(YAML::NodeType::Map);
  setPath(node[parts[i]], parts, i + 1, value);
}

void applyOverride(YAML::Node& root, const std::string& item) {
  auto eq = item.find('=');
  SLUICE_CHECK(eq != std::string::npos && eq > 0, ConfigError,
               "config error: --set expects key=value (for example training.steps=100), got '" << item << "'");
  std::string key = item.substr(0, eq), value = item.substr(eq + 1);
  std::vector<std::string> parts;
  std::stringstream ss(key);
  for (std::string p; std::getline(ss, p, '.');) {
    SLUICE_CHECK(!p.empty(), ConfigError, "config error: --set key '" << key << "' has an empty component");
    parts.push_back(p);
  }
  YAML::Node parsed;
  try {
    parsed = YAML::Load(value);
  } catch (const YAML::Exception& e) {
    throw ConfigError("config error: --set " + key + ": cannot parse value '" + value + "'");
  }
  setPath(root, parts, 0, parsed);
}

// Reads the keys visitKeys (ConfigKeys.h) lists from one section's MapReader.
class KeyReader {
 public:
  explicit KeyReader(MapReader reader) : r_(std::move(reader)) {}
  template <class T>
  void key(const char* name, T& out, bool /*shown*/ = true) {
    r_.get(name, out);
  }
  void key(const char* name, std::vector<InputSpec>& out, bool /*shown*/ = true) {
    auto inputs = r_.raw(name);
    if (!inputs.IsDefined() || inputs.IsNull()) return;
    SLUICE_CHECK(inputs.IsSequence(), ConfigError,
                 "config error: " << r_.path() << "." << name
                                  << " must be a list of {name, shape, dtype}, one per argument of forward");
    for (size_t i = 0; i < inputs.size(); ++i) {
      out.push_back(readTensorSpec(inputs[i], r_.path() + "." + name + "[" + std::to_string(i) + "]"));
    }
  }
  void key(const char* name, InputSpec& out, bool /*shown*/ = true) {
    auto node = r_.raw(name);
    if (node.IsDefined() && !node.IsNull()) out = readTensorSpec(node, r_.path() + "." + name);
  }
  template <class T, class NameOf, class Parse>
  void choice(const char* name, T& out, NameOf nameOf, Parse parse) {
    r_.getChoice(name, out, nameOf(out), parse);
  }
  template <class T>
  void choice(const char* name, T& out, const std::vector<Choice<T>>& table, const char* what) {
    r_.getChoice(name, out, choiceName(table, out), [&](const std::string& n) { return parseChoice(table, n, what); });
  }
  // A closed choice whose refusal reads "<key> must be a, b or c<note>, got 'x'"; `shown` as for key().
  template <class T>
  void closedChoice(const char* name, T& out, const std::vector<Choice<T>>& table, const char* note, bool = true) {
    const std::string key = r_.path() + "." + name;
    r_.getChoice(name, out, choiceName(table, out),
                 [&](const std::string& n) { return parseClosedChoice(table, n, key, note); });
  }
  template <class F>
  void section(const char* name, F visit) {
    KeyReader sub(r_.child(name));
    visit(sub);
    sub.finish();
  }
  template <class F>
  void derive(F f) {
    f();
  }
  void finish() { r_.finish(); }  // unknown keys of the section refused

 private:
  MapReader r_;
};

// The top level: one KeyReader per section.
class RootReader {
 public:
  explicit RootReader(const YAML::Node& root) : root_(root) {}
  template <class F>
  void section(const char* name, F visit) {
    KeyReader s{MapReader(root_, name)};
    visit(s);
    s.finish();
  }

 private:
  const YAML::Node& root_;
};

// The section names visitKeys lists, without reading any key.
struct SectionNames {
  std::vector<std::string> names;
  template <class F>
  void section(const char* name, F) {
    names.push_back(name);
  }
};

// The keys of root (unknown ones refused), without validating the values.
Config readKeys(const YAML::Node& root) {
  rejectDuplicateKeys(root, "");
  Config c;
  SectionNames sections;
  visitKeys(sections, c);
  for (auto it = root.begin(); it != root.end(); ++it) {
    auto key = it->first.as<std::string>();
    if (std::find(sections.names.begin(), sections.names.end(), key) != sections.names.end()) continue;
    std::string list;
    for (auto& n : sections.names) list += (list.empty() ? "" : ", ") + n;
    throw ConfigError("config error: unknown section '" + key + "'. Sections: " + list);
  }
  RootReader reader(root);
  visitKeys(reader, c);
  return c;
}

// Lists the keys visitKeys walks, by their full paths ("optimizer.dist_adam.mode").
struct KeyLister {
  std::vector<std::string>& out;
  std::string prefix;
  std::vector<std::pair<std::string, std::vector<std::string>>>* choices = nullptr;  // the table-typed keys' names
  template <class T>
  void key(const char* name, T&, bool /*shown*/ = true) {
    out.push_back(prefix + name);
  }
  template <class T, class A, class B>
  void choice(const char* name, T&, const A&, const B&) {
    out.push_back(prefix + name);
  }
  template <class T>
  void closedChoice(const char* name, T& value, const std::vector<Choice<T>>& table, const char*, bool = true) {
    choice(name, value, table, "");
  }
  template <class T>
  void choice(const char* name, T&, const std::vector<Choice<T>>& table, const char*) {
    out.push_back(prefix + name);
    if (!choices) return;
    choices->push_back({prefix + name, {}});
    for (auto& row : table) {
      if (row.listed) choices->back().second.push_back(row.name);
    }
  }
  template <class F>
  void section(const char* name, F visit) {
    KeyLister sub{out, prefix + name + ".", choices};
    visit(sub);
  }
  template <class F>
  void derive(F) {}
};

// Writes the keys visitKeys lists (those `shown` for this model) to YAML.
class KeyWriter {
 public:
  explicit KeyWriter(YAML::Emitter& e) : e_(e) {}
  template <class T>
  void key(const char* name, T& value, bool shown = true) {
    if (!shown) return;
    e_ << YAML::Key << name << YAML::Value;
    if constexpr (isVector<T>::value) e_ << YAML::Flow;
    e_ << value;
  }
  void key(const char* name, std::vector<InputSpec>& specs, bool shown = true) {
    if (!shown) return;
    e_ << YAML::Key << name << YAML::Value << YAML::BeginSeq;
    for (auto& t : specs) spec(t);
    e_ << YAML::EndSeq;
  }
  void key(const char* name, InputSpec& t, bool shown = true) {
    if (!shown) return;
    e_ << YAML::Key << name << YAML::Value;
    spec(t);
  }
  template <class T, class NameOf, class Parse>
  void choice(const char* name, T& value, NameOf nameOf, Parse) {
    e_ << YAML::Key << name << YAML::Value << nameOf(value);
  }
  template <class T>
  void choice(const char* name, T& value, const std::vector<Choice<T>>& table, const char*) {
    e_ << YAML::Key << name << YAML::Value << choiceName(table, value);
  }
  template <class T>
  void closedChoice(const char* name, T& value, const std::vector<Choice<T>>& table, const char*, bool shown = true) {
    if (shown) choice(name, value, table, "");
  }
  template <class F>
  void section(const char* name, F visit) {
    e_ << YAML::Key << name << YAML::Value << YAML::BeginMap;
    visit(*this);
    e_ << YAML::EndMap;
  }
  template <class F>
  void derive(F) {}

 private:
  template <class T>
  struct isVector : std::false_type {};
  template <class T>
  struct isVector<std::vector<T>> : std::true_type {};
  void spec(const InputSpec& t) {
    e_ << YAML::Flow << YAML::BeginMap << YAML::Key << "name" << YAML::Value << t.name << YAML::Key << "shape"
       << YAML::Value << YAML::Flow << t.shape << YAML::Key << "dtype" << YAML::Value
       << choiceName(inputDtypeChoices(), t.dtype) << YAML::EndMap;
  }
  YAML::Emitter& e_;
};

Config parse(const YAML::Node& root) {
  Config c = readKeys(root);
  for (auto section = root.begin(); section != root.end(); ++section) {
    if (!section->second.IsMap()) continue;
    for (auto key = section->second.begin(); key != section->second.end(); ++key) {
      c.givenKeys.insert(section->first.as<std::string>() + "." + key->first.as<std::string>());
    }
  }
  validateConfig(c);
  return c;
}

}  // namespace

std::vector<std::string> configKeys() {
  std::vector<std::string> keys;
  Config c;
  KeyLister lister{keys, ""};
  visitKeys(lister, c);
  return keys;
}

std::vector<std::pair<std::string, std::vector<std::string>>> configChoiceNames() {
  std::vector<std::string> keys;
  std::vector<std::pair<std::string, std::vector<std::string>>> choices;
  Config c;
  KeyLister lister{keys, "", &choices};
  visitKeys(lister, c);
  return choices;
}

Config Config::fromYamlText(const std::string& text, const std::vector<std::string>& overrides,
                            const std::string& origin) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    throw ConfigError("config error: " + origin + " is not valid YAML (line " + std::to_string(e.mark.line + 1) +
                      ", column " + std::to_string(e.mark.column + 1) + "): " + e.msg);
  }
  SLUICE_CHECK(root && !root.IsNull(), ConfigError,
               "config error: " << origin << " is empty: give at least the model and training sections (see "
                                << "configs/quickstart.yaml)");
  SLUICE_CHECK(root.IsMap(), ConfigError, "config error: " << origin << " must be a YAML mapping of sections");
  for (auto& o : overrides) applyOverride(root, o);
  return parse(root);
}

Config Config::load(const std::string& path, const std::vector<std::string>& overrides) {
  try {
    requireRegularFile(path, "config file");
  } catch (const ConfigError& e) {
    throw ConfigError(std::string("config error: ") + e.what());
  }
  std::ifstream f(path);
  SLUICE_CHECK(f, ConfigError, "config error: cannot read config file '" << path << "': " << std::strerror(errno));
  std::stringstream ss;
  ss << f.rdbuf();
  return fromYamlText(ss.str(), overrides, path);
}

std::string Config::checkpointDir() const {
  return checkpoint.dir.empty() ? (std::filesystem::path(job.outputDir) / "checkpoints").string() : checkpoint.dir;
}

std::string Config::toYaml() const {
  YAML::Emitter e;
  e.SetDoublePrecision(8);
  e << YAML::BeginMap;
  Config copy = *this;  // (the visitor takes fields by reference; writing changes none)
  KeyWriter writer(e);
  visitKeys(writer, copy);
  e << YAML::EndMap;
  return std::string(e.c_str()) + "\n";
}

}  // namespace sluice
