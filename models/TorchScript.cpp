#include "models/TorchScript.h"

#include <caffe2/serialize/inline_container.h>
#include <torch/script.h>
#include <torch/csrc/jit/passes/inliner.h>
#include <torch/csrc/jit/runtime/graph_executor.h>

#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <sstream>

#include "core/Error.h"

namespace sluice::models {
namespace {

// Every tensor's storage is one record data/N in the archive, written with
// exactly the storage's bytes; LibTorch sizes a loaded storage from the
// pickled element count, not from its record, so a record cut short inside a
// well-formed archive is read past its end later (a crash, exit 139). Each
// storage must find a record of its own size.
void checkRecordSizes(const std::string& path, const torch::jit::Module& module) {
  std::multiset<size_t> records;
  {
    caffe2::serialize::PyTorchStreamReader reader(path);
    for (const auto& name : reader.getAllRecords()) {
      // "data/N" (getAllRecords drops the archive's top folder; some versions keep it).
      const auto slash = name.find('/');
      if (name.rfind("data/", 0) == 0 || (slash != std::string::npos && name.compare(slash + 1, 5, "data/") == 0)) {
        records.insert(reader.getRecordSize(name));
      }
    }
  }
  std::set<const c10::StorageImpl*> seen;
  for (const auto& a : module.named_attributes(/*recurse=*/true)) {
    if (!a.value.isTensor()) continue;
    const auto& t = a.value.toTensor();
    if (!t.defined() || !t.has_storage() || t.storage().nbytes() == 0) continue;
    if (!seen.insert(t.storage().unsafeGetStorageImpl()).second) continue;
    auto it = records.find(t.storage().nbytes());
    SLUICE_CHECK(it != records.end(), ConfigError,
                 "model.path '" << path << "': tensor '" << a.name << "' has " << t.storage().nbytes()
                                << " bytes but no tensor record in the file holds that many (a record is truncated "
                                   "or corrupted); save the model again");
    records.erase(it);
  }
}

torch::jit::Module loadFile(const std::string& path) {
  torch::jit::Module module;
  try {
    module = torch::jit::load(path);
  } catch (const std::exception& e) {
    std::string why = e.what();
    why = why.substr(0, why.find('\n'));
    throw ConfigError("model.path '" + path + "' is not a TorchScript file (" + why +
                      "); save one from PyTorch with torch.jit.script(model).save(path) or "
                      "torch.jit.trace(model, example).save(path)");
  }
  checkRecordSizes(path, module);
  return module;
}

std::string where(const torch::jit::Node* node) {
  auto loc = node->sourceRange().file_line_col();
  if (!loc) return "";
  return " at " + std::get<0>(*loc) + ":" + std::to_string(std::get<1>(*loc));
}

// The first node on which `value` depends (through its producers, inside
// blocks too) that turns a tensor's data into a Python scalar, or null.
const torch::jit::Node* readsTensorData(const torch::jit::Value* value, std::set<const torch::jit::Value*>& seen) {
  static const std::set<std::string> kinds{"aten::Bool", "aten::Int", "aten::Float", "aten::item",
                                           "aten::is_nonzero", "aten::ScalarImplicit", "prim::TensorToBool",
                                           "aten::equal", "aten::allclose"};
  if (!seen.insert(value).second) return nullptr;
  const auto* node = value->node();
  if (kinds.count(node->kind().toQualString())) {
    for (auto* in : node->inputs()) {
      if (in->type()->kind() == c10::TypeKind::TensorType) return node;
    }
  }
  for (auto* in : node->inputs()) {
    if (const auto* found = readsTensorData(in, seen)) return found;
  }
  return nullptr;
}

void rejectDataDependentControlFlow(const std::string& path, torch::jit::Block* block) {
  for (auto* node : block->nodes()) {
    const bool isIf = node->kind() == c10::prim::If, isLoop = node->kind() == c10::prim::Loop;
    if (isIf || isLoop) {
      std::vector<const torch::jit::Value*> conditions;
      if (isIf) conditions.push_back(node->input(0));
      if (isLoop) {
        conditions.push_back(node->input(0));
        conditions.push_back(node->input(1));
        conditions.push_back(node->blocks()[0]->outputs()[0]);
      }
      for (const auto* cond : conditions) {
        std::set<const torch::jit::Value*> seen;
        if (const auto* reader = readsTensorData(cond, seen)) {
          throw GraphError("model.path '" + path + "': forward has a " + (isIf ? "branch (prim::If" : "loop (prim::Loop") +
                           where(node) + ") whose condition depends on tensor values (" +
                           reader->kind().toQualString() + where(reader) +
                           "); Sluice captures one op graph for all batches, so this would train the branch the first "
                           "batch took. Make it data-independent (e.g. torch.where instead of if) or export with "
                           "torch.jit.trace for the shapes you train with");
        }
      }
    }
    for (auto* b : node->blocks()) rejectDataDependentControlFlow(path, b);
  }
}

// Registers each parameter and buffer of `m` on `h` (recursing into children).
void mirror(const torch::jit::Module& m, torch::nn::Module& h) {
  for (const auto& p : m.named_parameters(/*recurse=*/false)) h.register_parameter(p.name, p.value, p.value.requires_grad());
  for (const auto& b : m.named_buffers(/*recurse=*/false)) h.register_buffer(b.name, b.value);
  for (const auto& child : m.named_children()) {
    auto sub = std::make_shared<torch::nn::Module>(child.name);
    mirror(child.value, *sub);
    h.register_module(child.name, sub);
  }
}

}  // namespace

TorchScriptModel TorchScriptModel::load(const std::string& path, const std::vector<std::string>& inputNames,
                                        bool targetsLast) {
  TorchScriptModel model;
  model.path_ = path;
  model.module_ = std::make_shared<torch::jit::Module>(loadFile(path));
  auto& m = *model.module_;
  SLUICE_CHECK(m.find_method("forward"), ConfigError, "model.path '" << path << "' has no forward method");
  m.train();
  const auto& schema = m.get_method("forward").function().getSchema();
  std::ostringstream expected;
  for (size_t i = 1; i < schema.arguments().size(); ++i) {
    expected << (i > 1 ? ", " : "") << schema.arguments()[i].name() << ": " << schema.arguments()[i].type()->str();
  }
  const size_t args = schema.arguments().size() - 1;  // less self
  const size_t declared = inputNames.size() + (targetsLast ? 1 : 0);
  SLUICE_CHECK(args == declared, ConfigError,
               "model.inputs: forward of '" << path << "' takes " << args << " argument" << (args == 1 ? "" : "s") << " ("
                                            << expected.str() << "), model.inputs declares " << inputNames.size()
                                            << (targetsLast ? " (+ the targets, last, for model.loss: none)" : "")
                                            << "; list one {name, shape, dtype} per argument, in order");
  for (size_t i = 1; i < schema.arguments().size(); ++i) {
    const auto& a = schema.arguments()[i];
    SLUICE_CHECK(a.type()->kind() == c10::TypeKind::TensorType, ConfigError,
                 "model.inputs: argument '" << a.name() << "' of forward of '" << path << "' is a " << a.type()->str()
                                            << "; Sluice passes tensors only (forward(" << expected.str() << "))");
  }
  auto graph = m.get_method("forward").graph()->copy();
  torch::jit::Inline(*graph);
  rejectDataDependentControlFlow(path, graph->block());
  model.holder_ = std::make_shared<torch::nn::Module>("TorchScript");
  mirror(m, *model.holder_);
  return model;
}

torch::Tensor TorchScriptModel::forward(const std::vector<torch::Tensor>& inputs) {
  std::vector<c10::IValue> args(inputs.begin(), inputs.end());
  // The plain interpreter: the optimizing executor would run differentiable
  // subgraphs whose forward returns ints (e.g. batch norm's impl index), which
  // the tracer cannot record; capture needs the ops, not their speed.
  torch::jit::GraphOptimizerEnabledGuard plain(false);
  auto out = module_->forward(args);
  SLUICE_CHECK(out.isTensor(), GraphError,
               "model.path '" << path_ << "': forward returned a " << out.tagKind()
                              << "; Sluice trains modules that return one tensor (the logits or prediction, or the "
                                 "loss with model.loss: none). Return a tensor from forward");
  return out.toTensor();
}

namespace {

// Each tensor of the module once, under the first name it has (a tied
// weight, head.weight = tok.weight, is one tensor with two names: the graph
// and the checkpoints call it by the first), with all its names.
struct ModuleTensor {
  std::vector<std::string> names;
  at::Tensor tensor;
};
std::vector<ModuleTensor> uniqueTensors(const torch::jit::Module& m) {
  std::vector<ModuleTensor> out;
  std::map<const c10::TensorImpl*, size_t> index;
  auto add = [&](const std::string& name, const at::Tensor& t) {
    auto [it, fresh] = index.emplace(t.unsafeGetTensorImpl(), out.size());
    if (fresh) out.push_back({{}, t});
    out[it->second].names.push_back(name);
  };
  for (const auto& p : m.named_parameters(true)) add(p.name, p.value);
  for (const auto& b : m.named_buffers(true)) add(b.name, b.value);
  return out;
}

}  // namespace

std::vector<std::string> torchScriptTensorNames(const std::string& source) {
  std::vector<std::string> names;
  for (auto& t : uniqueTensors(loadFile(source))) names.push_back(t.names.front());
  return names;
}

void exportModule(const std::string& source, const std::map<std::string, torch::Tensor>& tensors,
                  const std::string& out) {
  auto m = loadFile(source);
  torch::NoGradGuard noGrad;
  // Written once per tensor, so tied weights stay one tensor in the saved module.
  for (auto& [names, slot] : uniqueTensors(m)) {
    auto it = tensors.end();
    for (auto& name : names) {
      if (it == tensors.end()) it = tensors.find(name);
    }
    SLUICE_CHECK(it != tensors.end(), CheckpointError, "export: no trained value for '" << names.front() << "' of " << source);
    SLUICE_CHECK(it->second.sizes() == slot.sizes() && it->second.scalar_type() == slot.scalar_type(), CheckpointError,
                 "export: '" << it->first << "' is " << it->second.sizes() << " " << it->second.scalar_type()
                             << ", the module at " << source << " has " << slot.sizes() << " " << slot.scalar_type());
    slot.copy_(it->second);
  }
  const auto tmp = out + ".tmp";
  try {
    m.save(tmp);
  } catch (const std::exception& e) {
    std::filesystem::remove(tmp);
    throw CheckpointError("export: cannot write " + out + " (" + std::string(e.what()).substr(0, 200) + ")");
  }
  std::filesystem::rename(tmp, out);
}

void TorchScriptModel::setTraining(bool on) { module_->train(on); }

}  // namespace sluice::models
