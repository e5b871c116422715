#include "core/Flops.h"

#include <torch/types.h>

#include <chrono>
#include <functional>
#include <numeric>

namespace sluice {
namespace {

int64_t numel(const std::vector<int64_t>& shape) {
  return std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<int64_t>());
}

const std::vector<int64_t>* shapeOf(const OpGraph& graph, const OpNode& node, size_t input) {
  if (input >= node.inputs.size()) return nullptr;
  try {
    const auto& v = graph.value(node.inputs[input]);
    return v.isTensor && !v.shape.empty() ? &v.shape : nullptr;
  } catch (const std::exception&) {
    return nullptr;  // not a value the graph describes (a constant)
  }
}

}  // namespace

double nodeForwardFlops(const OpGraph& graph, const OpNode& node) {
  if (node.outputs.empty() || !node.outputs[0].isTensor) return 0;
  const double out = static_cast<double>(numel(node.outputs[0].shape));
  const auto& op = node.op;
  // Products whose inner dimension is the last of an input: 2 x out x K.
  size_t left = SIZE_MAX;
  if (op == "aten::matmul" || op == "aten::mm" || op == "aten::bmm" || op == "aten::linear") left = 0;
  if (op == "aten::addmm" || op == "aten::baddbmm") left = 1;
  if (left != SIZE_MAX) {
    const auto* a = shapeOf(graph, node, left);
    return a ? 2 * out * static_cast<double>(a->back()) : 0;
  }
  if (op == "aten::_convolution" || op == "aten::convolution" || op == "aten::conv1d" || op == "aten::conv2d" ||
      op == "aten::conv3d") {
    // weight [out channels, in channels / groups, kernel...]: each output
    // element is a dot product of the weight's other dimensions.
    const auto* w = shapeOf(graph, node, 1);
    return w ? 2 * out * static_cast<double>(numel(*w) / w->front()) : 0;
  }
  if (op == "aten::scaled_dot_product_attention") {
    // q [..., L, E], k [..., S, E]: q k^T is 2 x numel(q) x S, then the
    // weights times v: 2 x numel(out) x S.
    const auto *q = shapeOf(graph, node, 0), *k = shapeOf(graph, node, 1);
    if (!q || !k || k->size() < 2) return 0;
    const double s = static_cast<double>((*k)[k->size() - 2]);
    return 2 * static_cast<double>(numel(*q)) * s + 2 * out * s;
  }
  return 0;
}

double forwardFlops(const OpGraph& graph, int first, int end) {
  double total = 0;
  for (int i = first; i < end; ++i) total += nodeForwardFlops(graph, graph.nodes().at(i));
  return total;
}

double measureMatmulRate(const c10::Device& device, c10::ScalarType dtype, double seconds) {
  torch::NoGradGuard noGrad;
  const int64_t n = device.is_cuda() ? 8192 : 1024;
  const auto options = torch::TensorOptions().device(device).dtype(dtype);
  // Constant operands: the values do not change the speed, and no random
  // generator is touched.
  const auto a = torch::full({n, n}, 0.5, options), b = torch::full({n, n}, 0.25, options);
  auto c = torch::mm(a, b);
  c.sum().item<double>();  // warm-up; waits for the device
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  int64_t products = 0;
  double elapsed = 0;
  while (elapsed < seconds) {
    for (int i = 0; i < (device.is_cuda() ? 8 : 1); ++i, ++products) c = torch::mm(a, b);
    if (device.is_cuda()) c.sum().item<double>();  // the device has finished them (on CPU mm returns done)
    elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  }
  return 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n) *
         static_cast<double>(products) / elapsed;
}

}  // namespace sluice
