// core::StageModule: runs one stage's graph.
//
// Eager mode (what `sluice train` uses by default): node by node through the
// dispatcher with a NodeProgram, which lets an observer see every node (the
// memory plan attributes saved tensors that way and re-runs nodes for
// recompute). Compiled mode: the graph runs as a torch::jit::GraphFunction
// (TorchScript's optimizing executor). Either way the stage is built on the
// first call for each input signature (shapes, dtypes, devices,
// requires_grad) and reused after. Both build the usual autograd graph, so
// backward is LibTorch autograd and parameter gradients accumulate into the
// parameters' .grad.
//
// Random nodes (Note [random streams], core/RandomStream.h): given stream
// ids (the OpGraph index of each node), eager mode keys each random node's
// draws by the active RandomKeyScope; compiled mode cannot, so a stage given
// stream ids whose graph draws random numbers is refused in compiled mode
// (GraphError naming the node).
//
// Counters (compiles, cache hits, compile/execute seconds) are cumulative.
// When the same stage compiles more than kRecompileWarnAfter signatures, a
// warning names the input whose shape changed (pad or bucket shapes to avoid it).
// Not thread-safe.
#pragma once

#include <ATen/core/ivalue.h>

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/ExecMode.h"

namespace torch::jit {
struct Graph;
struct GraphFunction;
}  // namespace torch::jit

namespace sluice {

class NodeObserver;
class NodeProgram;

struct StageMetrics {
  int64_t compiles = 0;
  int64_t cacheHits = 0;
  double compileSeconds = 0;  // wall time of first calls (includes their execution)
  double executeSeconds = 0;  // wall time of all other calls
  // Compiles after the first: "input 'NAME' changed shape to [..]" (the first such input).
  std::vector<std::string> recompileCauses;
};

class StageModule {
 public:
  static constexpr int kRecompileWarnAfter = 3;

  StageModule(std::shared_ptr<torch::jit::Graph> graph, std::string name, ExecMode mode = ExecMode::Compiled,
              std::vector<std::string> inputNames = {}, std::vector<int> streamIds = {});
  ~StageModule();
  StageModule(StageModule&&) noexcept;
  StageModule& operator=(StageModule&&) noexcept;

  // observer: eager mode only (GraphError in compiled mode).
  std::vector<at::Tensor> forward(const std::vector<at::Tensor>& inputs, NodeObserver* observer = nullptr);
  // The node-by-node program of eager mode (built on first use).
  const NodeProgram& program();
  const StageMetrics& metrics() const { return metrics_; }
  const std::string& name() const { return name_; }
  ExecMode mode() const { return mode_; }

 private:
  struct Compiled;
  std::shared_ptr<torch::jit::Graph> graph_;
  std::string name_;
  ExecMode mode_;
  std::vector<std::string> inputNames_;
  std::vector<int> streamIds_;
  std::unordered_map<std::string, std::unique_ptr<Compiled>> cache_;
  std::unique_ptr<NodeProgram> program_;
  std::vector<std::vector<int64_t>> lastShapes_;
  StageMetrics metrics_;
};

}  // namespace sluice
