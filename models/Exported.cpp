#include "models/Exported.h"

#include <ATen/core/dispatch/Dispatcher.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "core/Error.h"
#include "core/UntrustedJson.h"
#include "models/ExportedStep.h"
#include "models/Pt2Archive.h"

namespace sluice::models {

std::string kindOf(const Json& arg) { return arg.empty() ? std::string("empty") : arg.begin().key(); }

bool isScalarKind(const std::string& kind) { return kind == "as_int" || kind == "as_float" || kind == "as_bool"; }

namespace {

// Targets that only check metadata the archive fixes: not run.
const std::set<std::string> kAssertions = {"torch.ops.aten._assert_tensor_metadata.default",
                                           "torch.ops.aten._assert_async.msg", "torch.ops.aten._assert_async.default",
                                           "torch.ops.aten._assert_scalar.default"};

// Argument kinds mapped to IValues (torch/_export/serde/schema.py, Argument).
const std::set<std::string> kArgumentKinds = {
    "as_none",   "as_tensor",  "as_tensors", "as_optional_tensors", "as_optional_tensor", "as_int",
    "as_ints",   "as_float",   "as_floats",  "as_bool",             "as_bools",           "as_string",
    "as_strings", "as_sym_int", "as_sym_ints", "as_scalar_type",     "as_layout",          "as_memory_format",
    "as_device"};

class Refusal {
 public:
  Refusal(std::string path, const Json& node)
      : path_(std::move(path)), name_(node.value("name", "?")), target_(node.value("target", "?")) {}
  [[noreturn]] void operator()(const std::string& what, const std::string& todo) const {
    throw ConfigError("model.path '" + path_ + "': node " + name_ + " (" + target_ + ") " + what + "; " + todo);
  }

 private:
  std::string path_, name_, target_;
};

// "torch.ops.aten.add.Tensor" -> the registered operator aten::add.Tensor.
std::optional<c10::OperatorHandle> findOperator(const std::string& target) {
  const std::string prefix = "torch.ops.";
  if (target.rfind(prefix, 0) != 0) return std::nullopt;
  const std::string rest = target.substr(prefix.size());
  const auto a = rest.find('.'), b = rest.rfind('.');
  if (a == std::string::npos || a == b) return std::nullopt;
  const std::string name = rest.substr(0, a) + "::" + rest.substr(a + 1, b - a - 1);
  std::string overload = rest.substr(b + 1);
  if (overload == "default") overload = "";
  return c10::Dispatcher::singleton().findSchema({name, overload});
}

// A Python number passed where the schema takes a Tensor (aten.mul.Tensor(x,
// 0.5): Python wraps it): the overload taking a Scalar there instead
// (mul.Scalar), as TorchScript and C++ call it; none: the number is passed
// as a wrapped 0-dim tensor (toIValue).
c10::OperatorHandle scalarOverload(const c10::OperatorHandle& op, const Json& node) {
  const auto& schema = op.schema();
  for (const auto& in : node.at("inputs")) {
    const auto index = schema.argumentIndexWithName(in.at("name").get<std::string>());
    if (!index || !isScalarKind(kindOf(in.at("arg")))) continue;
    if (schema.arguments()[*index].type()->kind() != c10::TypeKind::TensorType) continue;
    std::string overload = schema.overload_name();
    const auto at = overload.rfind("Tensor");
    if (at == std::string::npos) return op;
    overload.replace(at, 6, "Scalar");
    auto alt = c10::Dispatcher::singleton().findSchema({schema.name(), overload});
    if (!alt) return op;
    const auto altIndex = alt->schema().argumentIndexWithName(in.at("name").get<std::string>());
    if (!altIndex || alt->schema().arguments()[*altIndex].type()->kind() != c10::TypeKind::NumberType) return op;
    return *alt;
  }
  return op;
}

// Checks one input argument of a node at load: a kind Sluice maps, a name the schema has, static sizes, a dense
// layout, tensors defined before the node. Returns the argument's name.
std::string checkArgument(const Refusal& refuse, const c10::FunctionSchema& schema, const Json& in,
                          const std::set<std::string>& defined) {
  const std::string argName = in.at("name").get<std::string>();
  const auto& arg = in.at("arg");
  const std::string kind = kindOf(arg);
  if (!kArgumentKinds.count(kind)) refuse("takes argument '" + argName + "' as " + kind, "export without it");
  if (!schema.argumentIndexWithName(argName)) {
    refuse("names argument '" + argName + "', which " + schema.name() + " does not have",
           "export with the same PyTorch as this LibTorch (2.11)");
  }
  auto symbolic = [&](const Json& s) {
    if (!s.contains("as_int")) refuse("has a symbolic size in '" + argName + "'", "export with static shapes");
  };
  if (kind == "as_sym_int") symbolic(arg.at(kind));
  if (kind == "as_layout" && arg.at(kind).get<int>() != 7) refuse("takes a sparse or mkldnn layout", "export dense tensors");
  if (kind == "as_sym_ints") {
    for (auto& s : arg.at(kind)) symbolic(s);
  }
  auto reads = [&](const Json& t) {
    const auto n = t.at("name").get<std::string>();
    if (!defined.count(n)) refuse("reads " + n + " before it is defined", "write the archive again");
  };
  if (kind == "as_tensor") reads(arg.at(kind));
  if (kind == "as_tensors") {
    for (auto& t : arg.at(kind)) reads(t);
  }
  if (kind == "as_optional_tensors") {
    for (auto& t : arg.at(kind)) {
      if (t.contains("as_tensor")) reads(t.at("as_tensor"));
    }
  }
  return argName;
}

// Adds the tensors a node returns to `defined`; refuses results other than tensors.
void defineOutputs(const Refusal& refuse, const Json& node, std::set<std::string>& defined) {
  for (const auto& out : node.at("outputs")) {
    const std::string kind = kindOf(out);
    if (kind == "as_tensor") {
      defined.insert(out.at(kind).at("name").get<std::string>());
    } else if (kind == "as_tensors") {
      for (auto& t : out.at(kind)) defined.insert(t.at("name").get<std::string>());
    } else if (kind != "as_none") {
      refuse("returns " + kind, "Sluice maps tensor results only: export with static shapes");
    }
  }
}

// Checks one node at load: its target, its arguments against the schema,
// the values it reads (defined before it), what it defines.
ExportedModel::Step resolve(const std::string& path, const Json& node, std::set<std::string>& defined) {
  const Refusal refuse(path, node);
  ExportedModel::Step step;
  step.node = &node;
  const std::string target = node.value("target", "");
  if (kAssertions.count(target)) return step;
  step.op = findOperator(target);
  if (!step.op) {
    refuse("is not an ATen operator in LibTorch's registry",
           "Sluice trains programs of ATen operators: export without higher-order ops (torch.cond, while_loop, "
           "wrapped sub-graphs) or Python custom operators");
  }
  step.op = scalarOverload(*step.op, node);
  const auto& schema = step.op->schema();
  std::set<std::string> given;
  for (const auto& in : node.at("inputs")) given.insert(checkArgument(refuse, schema, in, defined));
  for (const auto& a : schema.arguments()) {
    if (!given.count(a.name()) && !a.default_value()) refuse("lacks argument '" + a.name() + "'", "write it again");
  }
  defineOutputs(refuse, node, defined);
  return step;
}

// Registers `tensor` under its dotted name, making the modules on the way.
void registerAt(torch::nn::Module& root, const std::string& fqn, const torch::Tensor& tensor, bool parameter,
                bool requiresGrad) {
  torch::nn::Module* at = &root;
  size_t start = 0;
  for (auto dot = fqn.find('.'); dot != std::string::npos; start = dot + 1, dot = fqn.find('.', start)) {
    const std::string part = fqn.substr(start, dot - start);
    auto children = at->named_children();
    if (!children.contains(part)) at->register_module(part, std::make_shared<torch::nn::Module>(part));
    at = at->named_children()[part].get();
  }
  const std::string leaf = fqn.substr(start);
  if (parameter) {
    at->register_parameter(leaf, tensor, requiresGrad);
  } else {
    at->register_buffer(leaf, tensor);
  }
}

ExportedTensor tensorValue(const std::string& path, const Json& graph, const std::string& name) {
  const auto& meta = graph.at("tensor_values").at(name);
  ExportedTensor t;
  t.name = name;
  t.dtype = pt2ScalarType(meta.at("dtype").get<int>(), "model.path '" + path + "': " + name);
  for (auto& s : meta.at("sizes")) {
    SLUICE_CHECK(s.contains("as_int"), ConfigError,
                 "model.path '" << path << "': " << name << " has a symbolic size (" << jsonSnippet(s)
                                << "): export with static shapes (the example batch of training.micro_batch_size "
                                   "rows, no dynamic_shapes)");
    t.sizes.push_back(s.at("as_int").get<int64_t>());
  }
  return t;
}

void refuseSymbolicShapes(const std::string& path, const Json& graph) {
  SLUICE_CHECK(graph.value("sym_int_values", Json::object()).empty(), ConfigError,
               "model.path '" << path << "': the program has symbolic shapes (dynamic dimensions); export with static "
                                 "shapes: the example batch of training.micro_batch_size rows, no dynamic_shapes");
}

// The user inputs and outputs of the signature: exactly one tensor each.
ExportedSignature signatureOf(const std::string& path, const Json& module) {
  const auto& graph = module.at("graph");
  refuseSymbolicShapes(path, graph);
  // The names of the user inputs (outputs): each must be a tensor.
  auto tensorsOf = [&](const char* specs, const char* kind, const std::string& what) {
    std::vector<std::string> names;
    for (const auto& spec : module.at("signature").at(specs)) {
      if (kindOf(spec) != kind) continue;
      const auto& arg = spec.at(kind).at("arg");
      SLUICE_CHECK(kindOf(arg) == "as_tensor", ConfigError,
                   "model.path '" << path << "': " << what << " is " << jsonSnippet(arg) << ", not a tensor; export with "
                                  << "tensor inputs (other arguments as kwargs) and the logits as the one output");
      names.push_back(arg.at("as_tensor").at("name").get<std::string>());
    }
    return names;
  };
  const auto users = tensorsOf("input_specs", "user_input", "an input of forward");
  const auto outputs = tensorsOf("output_specs", "user_output", "an output of forward");
  SLUICE_CHECK(users.size() == 1, ConfigError,
               "model.path '" << path << "': forward takes " << users.size()
                              << " tensor inputs; Sluice feeds one (the token ids): export with one input");
  SLUICE_CHECK(outputs.size() == 1, ConfigError,
               "model.path '" << path << "': forward returns " << outputs.size()
                              << " tensors; return one (the logits: e.g. return_dict=False and index [0] in a "
                                 "wrapper, as models/export_hf.py does)");
  return {tensorValue(path, graph, users[0]), tensorValue(path, graph, outputs[0])};
}

// A graph input: a parameter, buffer or lifted constant (its FQN), or the
// user input (fqn "").
struct Placeholder {
  std::string name, fqn;
  bool parameter = false;
  bool transient = false;  // a non-persistent buffer or a lifted constant (ExportedModel::transientBuffers)
};

// The graph's placeholders, in the signature's order. Constant inputs (kwargs
// baked in) have none; other kinds (effect tokens, custom objects) are refused.
std::vector<Placeholder> placeholdersOf(const std::string& path, const Json& module) {
  std::vector<Placeholder> out;
  for (const auto& spec : module.at("signature").at("input_specs")) {
    const std::string kind = kindOf(spec);
    const auto& s = spec.at(kind);
    if (kind == "parameter" || kind == "buffer" || kind == "tensor_constant") {
      out.push_back({s.at("arg").at("name").get<std::string>(),
                     s.at(kind == "parameter" ? "parameter_name" : kind == "buffer" ? "buffer_name"
                                                                                   : "tensor_constant_name"),
                     kind == "parameter", kind == "tensor_constant" || (kind == "buffer" && !s.value("persistent", true))});
    } else if (kind == "user_input") {
      out.push_back({s.at("arg").at("as_tensor").at("name").get<std::string>(), "", false, false});
    } else if (kind != "constant_input") {
      throw ConfigError("model.path '" + path + "': an input of kind " + kind +
                        " (effect tokens, custom objects) cannot be trained by Sluice; export without it");
    }
  }
  return out;
}

// The user input, and every view of it, may not be written: Sluice feeds
// each micro-batch's input once, read-only (torch.export's training IR keeps
// in-place ops, e.g. ids.clamp_(0, 255), as they are). `aliases` holds the
// input and the views made of it so far; a node whose schema writes an
// argument that is one of them is refused.
void refuseInputWrites(const std::string& path, const Json& node, const c10::FunctionSchema& schema,
                       std::set<std::string>& aliases) {
  bool readsAlias = false;
  for (const auto& in : node.at("inputs")) {
    const auto& arg = in.at("arg");
    if (kindOf(arg) != "as_tensor") continue;
    const std::string tensor = arg.at("as_tensor").at("name").get<std::string>();
    if (!aliases.count(tensor)) continue;
    readsAlias = true;
    const auto index = schema.argumentIndexWithName(in.at("name").get<std::string>());
    const auto* alias = index ? schema.arguments()[*index].alias_info() : nullptr;
    if (alias && alias->isWrite()) {
      Refusal(path, node)("writes to the program's input in place (" + tensor + ")",
                          "Sluice feeds each micro-batch's input read-only: export a program that does not modify "
                          "its input (use the out-of-place op)");
    }
  }
  bool returnsView = false;
  for (const auto& r : schema.returns()) returnsView = returnsView || r.alias_info() != nullptr;
  if (!readsAlias || !returnsView) return;
  for (const auto& out : node.at("outputs")) {
    if (kindOf(out) == "as_tensor") aliases.insert(out.at("as_tensor").at("name").get<std::string>());
  }
}

// Every node resolved in order (resolve()), from the placeholders.
std::vector<ExportedModel::Step> resolveAll(const std::string& path, const Json& module,
                                            const std::vector<Placeholder>& placeholders) {
  std::set<std::string> defined, inputAliases;
  for (const auto& p : placeholders) {
    defined.insert(p.name);
    if (p.fqn.empty()) inputAliases.insert(p.name);  // the user input
  }
  std::vector<ExportedModel::Step> steps;
  for (const auto& node : module.at("graph").at("nodes")) {
    steps.push_back(resolve(path, node, defined));
    if (steps.back().op) refuseInputWrites(path, node, steps.back().op->schema(), inputAliases);
  }
  return steps;
}

}  // namespace

// A program record whose structure is not torch.export's (a key missing, a
// value of another type: nlohmann-json's exceptions) is a ConfigError naming
// the file, not the library's text.
template <class F>
auto asProgramError(const std::string& path, F f) -> decltype(f()) {
  try {
    return f();
  } catch (const nlohmann::json::exception& e) {
    std::string why = e.what();
    if (const auto at = why.find("] "); at != std::string::npos) why = why.substr(at + 2);  // drop "[json.exception...]"
    if (why.size() > 200) why = why.substr(0, 200) + "...";
    throw ConfigError("model.path '" + path + "': its program is not one torch.export writes (" + why +
                      "); write the file again with torch.export.save");
  }
}

static ExportedSignature readSignature(const std::string& path);

ExportedSignature readExportedSignature(const std::string& path) {
  return asProgramError(path, [&] { return readSignature(path); });
}

static ExportedSignature readSignature(const std::string& path) {
  const auto program = readPt2Program(path);
  const auto& module = program->at("graph_module");
  auto signature = signatureOf(path, module);
  resolveAll(path, module, placeholdersOf(path, module));
  return signature;
}

ExportedModel ExportedModel::load(const std::string& path) {
  return asProgramError(path, [&] { return loadProgram(path); });
}

ExportedModel ExportedModel::loadProgram(const std::string& path) {
  auto archive = readPt2(path);
  ExportedModel m;
  m.path_ = path;
  m.program_ = archive.program;
  const auto& module = m.program_->at("graph_module");
  const auto signature = signatureOf(path, module);
  m.input_ = signature.input;
  m.output_ = signature.output;
  m.holder_ = std::make_shared<torch::nn::Module>("Exported");
  const auto placeholders = placeholdersOf(path, module);
  for (const auto& p : placeholders) {
    if (p.fqn.empty()) continue;  // the user input
    auto found = archive.tensors.find(p.fqn);
    SLUICE_CHECK(found != archive.tensors.end(), ConfigError,
                 "model.path '" << path << "': the archive lacks the values of " << p.fqn);
    // A parameter saved with requires_grad False (a frozen embedding or
    // backbone) stays frozen: no gradient, no optimizer state, exported as read.
    const bool emptyPart = p.fqn.front() == '.' || p.fqn.back() == '.' || p.fqn.find("..") != std::string::npos;
    SLUICE_CHECK(!emptyPart, ConfigError,
                 "model.path '" << path << "': a parameter or buffer is named '" << p.fqn
                                << "', with an empty part; the archive is damaged: write it again with torch.export.save");
    try {
      registerAt(*m.holder_, p.fqn, found->second, p.parameter, !archive.frozen.count(p.fqn));
    } catch (const c10::Error& e) {
      throw ConfigError("model.path '" + path + "': cannot hold '" + p.fqn + "' (" + e.what_without_backtrace() +
                        "); the archive is damaged: write it again with torch.export.save");
    }
    if (p.transient) m.transient_.push_back(p.fqn);
    m.bound_.emplace_back(p.name, p.fqn);
  }
  int64_t trainable = 0, parameters = 0;
  for (const auto& p : m.holder_->named_parameters()) {
    ++parameters;
    trainable += p.value().requires_grad() ? 1 : 0;
  }
  SLUICE_CHECK(trainable > 0, ConfigError,
               "model.path '" << path << "' has nothing to train: "
                              << (parameters == 0 ? std::string("the program has no parameters")
                                                  : "all its " + std::to_string(parameters) +
                                                        " parameters were saved with requires_grad=False (frozen)")
                              << "; export a model with trainable parameters");
  m.steps_ = std::make_shared<std::vector<Step>>(resolveAll(path, module, placeholders));
  for (const auto& spec : module.at("signature").at("output_specs")) {
    const std::string kind = kindOf(spec);
    const auto& arg = spec.at(kind).at("arg");
    if (kind == "buffer_mutation") {
      m.updates_.emplace_back(spec.at(kind).at("buffer_name").get<std::string>(), arg.at("name").get<std::string>());
    } else if (kind != "user_output") {
      throw ConfigError("model.path '" + path + "': an output of kind " + kind + " (" + jsonSnippet(arg) +
                        ") cannot be trained by Sluice; return one tensor (the logits) and mutate only buffers");
    }
  }
  return m;
}

}  // namespace sluice::models
