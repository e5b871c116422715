// core::hostsync: reads of training tensors' values on the host. On a GPU
// each such read waits for the device, so the training loop should make none
// between log points (the overlap rule: losses are read at log points only).
// Every read on the training path goes through read(), which counts it; the
// metrics report shows the count per step. Host-side control data (the stop
// vote's flag, all-reduced by MPI into host memory) is not counted.
#pragma once

#include <ATen/core/Tensor.h>

#include <atomic>
#include <cstdint>

namespace sluice::hostsync {

inline std::atomic<int64_t>& counter() {
  static std::atomic<int64_t> n{0};
  return n;
}
inline int64_t count() { return counter().load(); }

template <class T>
T read(const at::Tensor& t) {
  counter().fetch_add(1);
  return t.item<T>();
}

}  // namespace sluice::hostsync
