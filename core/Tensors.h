// core::tensorsIn: the tensors inside an IValue, as a graph node's inputs and
// outputs hold them (a tensor, a tensor list, or lists and tuples of them,
// nested), appended to `out` in order. Other values add nothing.
#pragma once

#include <ATen/core/ivalue.h>

#include <vector>

namespace sluice {

void tensorsIn(const c10::IValue& v, std::vector<at::Tensor>& out);

}  // namespace sluice
