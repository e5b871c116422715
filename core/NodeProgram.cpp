#include "core/NodeProgram.h"

#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/runtime/operator.h>

#include <optional>
#include <unordered_map>

#include "core/Error.h"
#include "core/RandomStream.h"

namespace sluice {

using torch::jit::IValue;
using torch::jit::Stack;

namespace {

enum class StepKind { Operation, Constant, ListConstruct, TupleConstruct, Unpack };

}  // namespace

struct NodeProgram::Step {
  StepKind kind = StepKind::Operation;
  mutable std::optional<torch::jit::Operation> operation;  // kind == Operation (its call is not const)
  IValue constant;                  // kind == Constant
  c10::TypePtr listElement;         // kind == ListConstruct
  std::vector<int> inputs, outputs; // slots
  std::vector<int> release;         // slots whose last reader is this node
  bool random = false;              // draws random numbers (drawsRandom)
  int streamId = -1;                // its stable index (Note [random streams])
};

namespace {

// List/tuple construction and unpacking have no operator schema: the
// TorchScript interpreter implements them itself, and so does this program.
void runStructural(StepKind kind, const c10::TypePtr& listElement, const torch::jit::Node* node, Stack& stack) {
  switch (kind) {
    case StepKind::ListConstruct: {
      c10::impl::GenericList list(listElement);
      list.reserve(stack.size());
      for (auto& v : stack) list.push_back(std::move(v));
      stack.clear();
      stack.emplace_back(std::move(list));
      return;
    }
    case StepKind::TupleConstruct: {
      auto tuple = c10::ivalue::Tuple::create(std::vector<IValue>(std::make_move_iterator(stack.begin()),
                                                                  std::make_move_iterator(stack.end())));
      stack.clear();
      stack.emplace_back(std::move(tuple));
      return;
    }
    case StepKind::Unpack: {
      IValue v = std::move(stack.at(0));
      std::vector<IValue> elements = v.isTuple() ? v.toTupleRef().elements().vec()
                                                 : std::vector<IValue>(v.toListRef().begin(), v.toListRef().end());
      SLUICE_CHECK(elements.size() == node->outputs().size(), GraphError,
                   node->kind().toQualString() << " expected " << node->outputs().size() << " elements, got "
                                               << elements.size());
      stack = Stack(std::make_move_iterator(elements.begin()), std::make_move_iterator(elements.end()));
      return;
    }
    default:
      return;
  }
}

}  // namespace

// How a node runs: its constant, its structural kind, or its registered operation (checked to exist).
NodeProgram::Step NodeProgram::compileStep(torch::jit::Node* node) {
  Step step;
  const auto kind = node->kind();
  if (kind == c10::prim::Constant) {
    step.kind = StepKind::Constant;
    auto value = torch::jit::toIValue(node->output());
    SLUICE_CHECK(value.has_value(), GraphError, "cannot evaluate constant " << node->output()->debugName());
    step.constant = *value;
  } else if (kind == c10::prim::ListConstruct) {
    step.kind = StepKind::ListConstruct;
    step.listElement = node->output()->type()->expectRef<c10::ListType>().getElementType();
  } else if (kind == c10::prim::TupleConstruct) {
    step.kind = StepKind::TupleConstruct;
  } else if (kind == c10::prim::ListUnpack || kind == c10::prim::TupleUnpack) {
    step.kind = StepKind::Unpack;
  } else {
    SLUICE_CHECK(node->blocks().empty(), GraphError,
                 "node " << kind.toQualString() << " has sub-blocks (control flow); Sluice runs straight-line graphs: "
                         << "trace the model, or remove data-dependent control flow");
    SLUICE_CHECK(node->maybeOperator(), GraphError,
                 "no operator is registered for node " << kind.toQualString() << " (output %"
                                                       << (node->outputs().empty() ? "?" : node->output(0)->debugName())
                                                       << ")");
    step.operation.emplace(node->getOperation());
  }
  return step;
}

NodeProgram::NodeProgram(std::shared_ptr<torch::jit::Graph> graph, std::vector<int> streamIds)
    : graph_(std::move(graph)) {
  std::unordered_map<const torch::jit::Value*, int> slot;
  for (auto* in : graph_->inputs()) slot[in] = numSlots_++;
  std::unordered_map<int, int> lastReader;  // slot -> node position
  for (auto* node : graph_->nodes()) {
    const int pos = static_cast<int>(nodes_.size());
    nodes_.push_back(node);
    Step step = compileStep(node);
    step.random = drawsRandom(node);
    if (pos < static_cast<int>(streamIds.size())) step.streamId = streamIds[pos];
    for (auto* in : node->inputs()) {
      const int s = slot.at(in);
      step.inputs.push_back(s);
      lastReader[s] = pos;
    }
    for (auto* out : node->outputs()) {
      slot[out] = numSlots_;
      step.outputs.push_back(numSlots_++);
    }
    steps_.push_back(std::move(step));
  }
  for (auto* out : graph_->outputs()) {
    const int s = slot.at(out);
    outputSlots_.push_back(s);
    lastReader[s] = static_cast<int>(nodes_.size());  // never released inside run()
  }
  for (auto& [s, pos] : lastReader) {
    if (pos < static_cast<int>(nodes_.size())) steps_[pos].release.push_back(s);
  }
  // Outputs nobody reads are dropped as soon as their node ran.
  for (auto& step : steps_) {
    for (int s : step.outputs) {
      if (!lastReader.count(s)) step.release.push_back(s);
    }
  }
  for (int pos = 0; pos < numNodes(); ++pos) positionOf_[nodes_[pos]] = pos;
  for (size_t i = 0; i < graph_->inputs().size(); ++i) inputIndexOf_[graph_->inputs()[i]] = static_cast<int>(i);
}

NodeProgram::~NodeProgram() = default;

int NodeProgram::producerOf(const torch::jit::Value* v) const {
  auto it = positionOf_.find(v->node());
  return it == positionOf_.end() ? -1 : it->second;
}

int NodeProgram::graphInputIndex(const torch::jit::Value* v) const {
  auto it = inputIndexOf_.find(v);
  return it == inputIndexOf_.end() ? -1 : it->second;
}

void NodeProgram::runNode(int pos, Stack& stack) const {
  const Step& step = steps_.at(pos);
  if (step.random && activeRandomKey()) {
    SLUICE_CHECK(step.streamId >= 0, GraphError,
                 "node " << pos << " (" << nodes_[pos]->kind().toQualString()
                         << ") draws random numbers but has no stream id (Note [random streams]; internal error)");
    seedForNode(step.streamId);
  }
  switch (step.kind) {
    case StepKind::Operation:
      (*step.operation)(stack);
      return;
    case StepKind::Constant:
      stack.clear();
      stack.push_back(step.constant);
      return;
    default:
      runStructural(step.kind, step.listElement, nodes_[pos], stack);
  }
}

std::vector<IValue> NodeProgram::run(std::vector<IValue> inputs, NodeObserver* observer) const {
  SLUICE_CHECK(inputs.size() == graph_->inputs().size(), GraphError,
               "the graph has " << graph_->inputs().size() << " inputs, got " << inputs.size());
  std::vector<IValue> slots(numSlots_);
  for (size_t i = 0; i < inputs.size(); ++i) slots[i] = std::move(inputs[i]);
  Stack stack, in;
  for (int pos = 0; pos < numNodes(); ++pos) {
    const Step& step = steps_[pos];
    stack.clear();
    for (int s : step.inputs) stack.push_back(slots[s]);
    if (observer) {
      in = stack;
      observer->beforeNode(pos, in);
    }
    runNode(pos, stack);
    SLUICE_CHECK(stack.size() == step.outputs.size(), GraphError,
                 nodes_[pos]->kind().toQualString() << " returned " << stack.size() << " values, the graph expects "
                                                    << step.outputs.size());
    if (observer) observer->afterNode(pos, in, stack);
    in.clear();
    for (size_t i = 0; i < step.outputs.size(); ++i) slots[step.outputs[i]] = std::move(stack[i]);
    for (int s : step.release) slots[s] = IValue();
  }
  std::vector<IValue> out;
  for (int s : outputSlots_) out.push_back(slots[s]);
  return out;
}

}  // namespace sluice
