// core::tensorsIn: the tensors inside an IValue, as a graph node's inputs and
// outputs hold them (a tensor, a tensor list, or lists and tuples of them,
// nested), appended to `out` in order. Other values add nothing.
// core::tensorBytes: the bytes of tensors (undefined ones count 0).
#pragma once

#include <ATen/core/ivalue.h>

#include <vector>

namespace sluice {

void tensorsIn(const c10::IValue& v, std::vector<at::Tensor>& out);
int64_t tensorBytes(const std::vector<at::Tensor>& tensors);

}  // namespace sluice
