#include "core/AttentionFusion.h"

#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/ir/ir.h>

#include <cmath>
#include <cstring>
#include <optional>

namespace sluice {

namespace {

using torch::jit::Node;
using torch::jit::Value;

bool is(const Node* n, const char* op) { return std::strcmp(n->kind().toQualString(), op) == 0; }

std::optional<double> constantNumber(Value* v) {
  auto iv = torch::jit::toIValue(v);
  if (!iv) return std::nullopt;
  if (iv->isDouble()) return iv->toDouble();
  if (iv->isInt()) return static_cast<double>(iv->toInt());
  if (iv->isTensor() && iv->toTensor().numel() == 1) return iv->toTensor().item<double>();
  return std::nullopt;
}

std::optional<int64_t> constantInt(Value* v) {
  auto iv = torch::jit::toIValue(v);
  if (iv && iv->isInt()) return iv->toInt();
  return std::nullopt;
}

bool onlyReader(Value* v, Node* reader) { return v->uses().size() == 1 && v->uses()[0].user == reader; }

// Concrete sizes, dtype and device of a tensor value (empty sizes when unknown).
struct Shape {
  std::vector<int64_t> sizes;
  std::optional<c10::ScalarType> dtype;
  std::optional<c10::Device> device;
};

Shape shapeOf(Value* v) {
  Shape s;
  auto t = v->type()->cast<c10::TensorType>();
  if (!t) return s;
  if (auto sizes = t->sizes().concrete_sizes()) s.sizes = *sizes;
  s.dtype = t->scalarType();
  s.device = t->device();
  return s;
}

// slice(t, dim, start, end, step) with constant arguments, applied to the
// captured value; false when an argument is not a constant.
bool applySlice(Node* slice, at::Tensor& t) {
  auto dim = constantInt(slice->input(1)), step = constantInt(slice->input(4));
  if (!dim || !step) return false;
  std::optional<int64_t> bounds[2];
  for (int i = 0; i < 2; ++i) {
    auto iv = torch::jit::toIValue(slice->input(2 + i));
    if (!iv || !(iv->isNone() || iv->isInt())) return false;
    if (iv->isInt()) bounds[i] = iv->toInt();
  }
  t = at::slice(t, *dim, bounds[0], bounds[1], *step);
  return true;
}

// cond = eq(slices of a graph input, 0): true when, from the captured values,
// it masks exactly the positions above the diagonal of an L x S block.
bool isCausalMask(Value* cond, int64_t L, int64_t S, const std::vector<c10::IValue>& inputs) {
  Node* eq = cond->node();
  if (!is(eq, "aten::eq") || eq->inputs().size() != 2) return false;
  auto zero = constantNumber(eq->input(1));
  if (!zero || *zero != 0) return false;
  std::vector<Node*> slices;
  Value* m = eq->input(0);
  while (m->node()->kind() != c10::prim::Param) {
    Node* s = m->node();
    if (!is(s, "aten::slice") || s->inputs().size() != 5) return false;
    slices.push_back(s);
    m = s->input(0);
  }
  if (m->offset() >= inputs.size() || !inputs[m->offset()].isTensor()) return false;
  at::Tensor t = inputs[m->offset()].toTensor();
  for (auto it = slices.rbegin(); it != slices.rend(); ++it)
    if (!applySlice(*it, t)) return false;
  if (t.dim() < 2 || t.size(-2) != L || t.size(-1) != S) return false;
  for (int64_t d = 0; d + 2 < t.dim(); ++d)
    if (t.size(d) != 1) return false;
  const auto masked = (t.reshape({L, S}) == 0).cpu();
  return at::equal(masked, at::ones({L, S}, at::kBool).triu(1));
}

struct Match {
  Value *q = nullptr, *k = nullptr, *v = nullptr;
  double scale = 1;
  Node* last = nullptr;  // matmul(p, v): its output becomes the fused node's
};

// The reader of p (through a dropout of probability 0) when it is matmul(p, v).
// A dropout of p > 0 keeps the attention as written in train and eval mode
// alike (eval: train=False, draws nothing), so that an evaluation graph has
// the training graph's nodes.
Node* weightsTimesValues(Value* p) {
  if (p->uses().size() != 1) return nullptr;
  Node* next = p->uses()[0].user;
  if (is(next, "aten::dropout")) {
    auto probability = next->inputs().size() == 3 ? constantNumber(next->input(1)) : std::nullopt;
    if (next->input(0) != p || !probability || *probability != 0 || next->output()->uses().size() != 1) return nullptr;
    p = next->output();
    next = p->uses()[0].user;
  }
  return is(next, "aten::matmul") && next->input(0) == p ? next : nullptr;
}

// scores * c or scores / c, read only by `reader`: the scale, or nothing.
std::optional<double> scaleOf(Node* n, Node* reader) {
  if (!onlyReader(n->output(), reader) || n->inputs().size() != 2) return std::nullopt;
  auto c = constantNumber(n->input(1));
  if (!c || *c == 0) return std::nullopt;
  if (is(n, "aten::mul")) return *c;
  if (is(n, "aten::div")) return 1.0 / *c;
  return std::nullopt;
}

bool sameAttentionShapes(const Shape& q, const Shape& k, const Shape& v, const Shape& out) {
  if (q.sizes.size() != 4 || k.sizes != v.sizes || k.sizes.size() != 4 || out.sizes != q.sizes) return false;
  // float32 on the CPU only (see the header: where the fused kernel is faster and deterministic).
  if (q.dtype != c10::kFloat || k.dtype != c10::kFloat || v.dtype != c10::kFloat) return false;
  if (!q.device || !q.device->is_cpu() || k.device != q.device || v.device != q.device) return false;
  return q.sizes[0] == k.sizes[0] && q.sizes[1] == k.sizes[1] && q.sizes[3] == k.sizes[3] &&
         q.sizes[2] == k.sizes[2];  // L == S: causal over one sequence
}

std::optional<Match> matchAt(Node* softmax, const std::vector<c10::IValue>& inputs) {
  if (softmax->inputs().size() != 3) return std::nullopt;
  auto dim = constantInt(softmax->input(1));
  auto dtype = torch::jit::toIValue(softmax->input(2));
  if (!dim || (*dim != -1 && *dim != 3) || !dtype || !dtype->isNone()) return std::nullopt;
  Match m;
  m.last = weightsTimesValues(softmax->output());
  Node* fill = softmax->input(0)->node();
  if (!m.last || !is(fill, "aten::masked_fill") || !onlyReader(fill->output(), softmax)) return std::nullopt;
  auto fillValue = constantNumber(fill->input(2));
  if (!fillValue || !std::isinf(*fillValue) || *fillValue > 0) return std::nullopt;
  Node* scaled = fill->input(0)->node();
  auto scale = scaleOf(scaled, fill);  // (checks that `scaled` is a mul or div before its input is read)
  if (!scale) return std::nullopt;
  Node* qk = scaled->input(0)->node();
  if (!is(qk, "aten::matmul") || !onlyReader(qk->output(), scaled)) return std::nullopt;
  Node* kt = qk->input(1)->node();
  if (!is(kt, "aten::transpose")) return std::nullopt;
  auto d0 = constantInt(kt->input(1)), d1 = constantInt(kt->input(2));
  // k transposed in its last two dimensions (of 4): {-2, -1} or {2, 3}, either order.
  if (!d0 || !d1 || std::min((*d0 + 4) % 4, (*d1 + 4) % 4) != 2 || std::max((*d0 + 4) % 4, (*d1 + 4) % 4) != 3)
    return std::nullopt;
  m.q = qk->input(0);
  m.k = kt->input(0);
  m.v = m.last->input(1);
  m.scale = *scale;
  const Shape q = shapeOf(m.q);
  if (!sameAttentionShapes(q, shapeOf(m.k), shapeOf(m.v), shapeOf(m.last->output()))) return std::nullopt;
  if (!isCausalMask(fill->input(1), q.sizes[2], q.sizes[2], inputs)) return std::nullopt;
  return m;
}

// The fused kernel's output type: its sizes are matmul(p, v)'s, but its
// strides are the kernel's own (CPU's flash kernel returns [B, L, H, E]
// memory transposed), found by running it once on zeros of q's, k's and v's
// sizes, strides, dtype and device.
c10::TypePtr fusedOutputType(const Match& m) {
  auto probe = [](Value* v) {
    auto t = v->type()->expect<c10::TensorType>();
    const auto options = at::TensorOptions().dtype(*t->scalarType()).device(*t->device());
    const auto sizes = *t->sizes().concrete_sizes();
    const auto strides = t->strides().concrete_sizes();
    return strides ? at::empty_strided(sizes, *strides, options).zero_() : at::zeros(sizes, options);
  };
  at::NoGradGuard noGrad;
  const auto out = at::scaled_dot_product_attention(probe(m.q), probe(m.k), probe(m.v), std::nullopt, 0.0, true, m.scale);
  const auto old = m.last->output()->type()->expect<c10::TensorType>();
  return c10::TensorType::create(out)->withRequiresGrad(old->requiresGrad());
}

void rewrite(torch::jit::Graph& g, const Match& m) {
  torch::jit::WithInsertPoint point(m.last);
  Value* none = g.insertConstant(c10::IValue());
  Value* dropout = g.insertConstant(0.0);
  Value* causal = g.insertConstant(true);
  Value* scale = g.insertConstant(m.scale);
  Value* gqa = g.insertConstant(false);
  Node* fused = g.create(c10::Symbol::fromQualString("aten::scaled_dot_product_attention"),
                         {m.q, m.k, m.v, none, dropout, causal, scale, gqa}, 1);
  g.insertNode(fused);
  fused->output()->setType(fusedOutputType(m));
  m.last->output()->replaceAllUsesWith(fused->output());
}

}  // namespace

int fuseCausalAttention(torch::jit::Graph& graph, const std::vector<c10::IValue>& inputs) {
  std::vector<Match> matches;
  for (Node* n : graph.nodes())
    if (is(n, "aten::softmax"))
      if (auto m = matchAt(n, inputs)) matches.push_back(*m);
  for (const auto& m : matches) rewrite(graph, m);
  return static_cast<int>(matches.size());
}

}  // namespace sluice
