#include "core/Tensors.h"

namespace sluice {

void tensorsIn(const c10::IValue& v, std::vector<at::Tensor>& out) {
  if (v.isTensor()) {
    out.push_back(v.toTensor());
  } else if (v.isTensorList()) {
    for (const auto& t : v.toTensorList()) out.push_back(t);
  } else if (v.isList()) {
    for (const auto& e : v.toListRef()) tensorsIn(e, out);
  } else if (v.isTuple()) {
    for (const auto& e : v.toTupleRef().elements()) tensorsIn(e, out);
  }
}

int64_t tensorBytes(const std::vector<at::Tensor>& tensors) {
  int64_t total = 0;
  for (auto& t : tensors) {
    if (t.defined()) total += static_cast<int64_t>(t.nbytes());
  }
  return total;
}

}  // namespace sluice
