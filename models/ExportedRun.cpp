// models::ExportedModel::forward: runs the resolved program node by node
// through the dispatcher (the load-time checks are in Exported.cpp).
#include "models/Exported.h"

#include <ATen/ScalarOps.h>

#include <algorithm>
#include <unordered_map>

#include "core/Error.h"
#include "models/ExportedStep.h"
#include "models/Pt2Archive.h"

namespace sluice::models {
namespace {

using Env = std::unordered_map<std::string, c10::IValue>;

const torch::Tensor& tensorNamed(const Env& env, const Json& t) {
  return env.at(t.at("name").get<std::string>()).toTensor();
}

template <class T>
c10::List<T> listOf(const Json& values) {
  c10::List<T> out;
  for (auto& v : values) out.push_back(v.get<T>());
  return out;
}

// One argument as the IValue the schema's type takes (validated at load).
c10::IValue toIValue(const Json& arg, const c10::Argument& formal, const Env& env, const c10::Device& device,
                     bool training) {
  const std::string kind = kindOf(arg);
  const auto& v = arg.at(kind);
  if (kind == "as_none") return c10::IValue();
  if (kind == "as_tensor" || kind == "as_optional_tensor") {
    return v.contains("as_none") ? c10::IValue() : c10::IValue(tensorNamed(env, v.contains("as_tensor") ? v.at("as_tensor") : v));
  }
  const auto elem = formal.type()->kind() == c10::TypeKind::ListType
                        ? formal.type()->expectRef<c10::ListType>().getElementType()
                        : c10::TypePtr();
  if (kind == "as_tensors" || kind == "as_optional_tensors") {
    if (kind == "as_tensors" && !(elem && elem->kind() == c10::TypeKind::OptionalType)) {
      c10::List<at::Tensor> ts;
      for (auto& t : v) ts.push_back(tensorNamed(env, t));
      return ts;
    }
    c10::List<std::optional<at::Tensor>> ts;
    for (auto& t : v) {
      const Json& named = kind == "as_tensors" ? t : t.contains("as_tensor") ? t.at("as_tensor") : Json();
      ts.push_back(named.is_null() ? std::optional<at::Tensor>() : std::optional<at::Tensor>(tensorNamed(env, named)));
    }
    return ts;
  }
  if (isScalarKind(kind) && formal.type()->kind() == c10::TypeKind::TensorType) {
    const c10::Scalar number = kind == "as_int" ? c10::Scalar(v.get<int64_t>())
                               : kind == "as_float" ? c10::Scalar(v.get<double>())
                                                    : c10::Scalar(v.get<bool>());
    auto wrapped = c10::scalar_to_tensor(number);
    wrapped.unsafeGetTensorImpl()->set_wrapped_number(true);
    return wrapped;
  }
  if (kind == "as_bool") {
    const bool mode = formal.name() == "train" || formal.name() == "training";
    return mode ? training : v.get<bool>();
  }
  if (kind == "as_float" && formal.name() == "dropout_p" && !training) return 0.0;  // attention's dropout
  if (kind == "as_int") return v.get<int64_t>();
  if (kind == "as_sym_int") return v.at("as_int").get<int64_t>();
  if (kind == "as_float") return v.get<double>();
  if (kind == "as_string") return v.get<std::string>();
  if (kind == "as_ints") return listOf<int64_t>(v);
  if (kind == "as_sym_ints") {
    c10::List<int64_t> out;
    for (auto& s : v) out.push_back(s.at("as_int").get<int64_t>());
    return out;
  }
  if (kind == "as_floats") return listOf<double>(v);
  if (kind == "as_bools") return listOf<bool>(v);
  if (kind == "as_strings") return listOf<std::string>(v);
  if (kind == "as_scalar_type") return pt2ScalarType(v.get<int>(), "argument " + formal.name());
  if (kind == "as_layout") return c10::Layout::Strided;  // schema.py Layout 7; others refused at load
  if (kind == "as_memory_format") {
    static const c10::MemoryFormat formats[] = {c10::MemoryFormat::Contiguous, c10::MemoryFormat::Contiguous,
                                                c10::MemoryFormat::ChannelsLast, c10::MemoryFormat::ChannelsLast3d,
                                                c10::MemoryFormat::Preserve};
    return formats[std::clamp(v.get<int>(), 0, 4)];
  }
  return device;  // as_device: the job's
}

void run(const ExportedModel::Step& step, Env& env, const c10::Device& device, bool training) {
  const auto& schema = step.op->schema();
  std::unordered_map<std::string, const Json*> byName;
  for (const auto& in : step.node->at("inputs")) byName[in.at("name").get<std::string>()] = &in.at("arg");
  torch::jit::Stack stack;
  for (const auto& formal : schema.arguments()) {
    auto found = byName.find(formal.name());
    stack.push_back(found == byName.end() ? *formal.default_value()
                                          : toIValue(*found->second, formal, env, device, training));
  }
  step.op->callBoxed(stack);
  const auto& outs = step.node->at("outputs");
  for (size_t i = 0; i < outs.size() && i < stack.size(); ++i) {
    const std::string kind = kindOf(outs[i]);
    if (kind == "as_tensor") {
      env[outs[i].at(kind).at("name").get<std::string>()] = stack[i];
    } else if (kind == "as_tensors") {
      const auto list = stack[i].toTensorVector();
      const auto& names = outs[i].at(kind);
      for (size_t j = 0; j < names.size() && j < list.size(); ++j) env[names[j].at("name").get<std::string>()] = list[j];
    }
  }
}

}  // namespace

torch::Tensor ExportedModel::forward(const std::vector<torch::Tensor>& inputs) {
  SLUICE_CHECK(inputs.size() == 1, GraphError, "exported program: forward takes 1 input, got " << inputs.size());
  SLUICE_CHECK(inputs[0].sizes().vec() == input_.sizes, GraphError,
               "model.path '" << path_ << "' was exported for input " << input_.name << " of sizes "
                              << c10::IntArrayRef(input_.sizes) << ", got " << inputs[0].sizes()
                              << ": export with an example batch of training.micro_batch_size rows x the block size");
  std::unordered_map<std::string, torch::Tensor> tensors;
  for (const auto& p : holder_->named_parameters()) tensors[p.key()] = p.value();
  for (const auto& b : holder_->named_buffers()) tensors[b.key()] = b.value();
  const c10::Device device = inputs[0].device();
  Env env;
  for (const auto& [placeholder, fqn] : bound_) env[placeholder] = tensors.at(fqn);
  env[input_.name] = inputs[0];
  for (const auto& step : *steps_) {
    if (step.op) run(step, env, device, training_);
  }
  for (const auto& [fqn, value] : updates_) {
    torch::NoGradGuard noGrad;
    tensors.at(fqn).copy_(env.at(value).toTensor());
  }
  return env.at(output_.name).toTensor();
}

}  // namespace sluice::models
