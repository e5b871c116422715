// memory::StageMemory: carries out a MemoryPlan for one pipeline stage.
//
// While the stage's graph runs node by node (NodeProgram) with this object as
// its observer and its hooks() installed (SavedTensorScope), every tensor
// autograd saves is attributed (Note [storage keys], MemoryPlan.h):
//   - on a parameter's storage, a boundary input's, or a constant's: kept;
//   - else on a storage some node created: that storage's decision applies.
// Kept tensors are held as tensor.detach(). A swapped storage is written to
// the swap tier (SwapEngine) at its first save; the memory goes once forward
// no longer needs it and the write is durable. A recomputed storage is not
// held at all: the inputs its segment needs are captured in forward (a
// captured tensor that is itself swapped or recomputed is held as a reference
// to that storage's record, not as memory), and the first backward read
// re-runs the segment with grad mode on, each captured input's requires_grad
// as in forward, under the random key the forward ran under (Note [random
// streams], core/RandomStream.h: a random node in a recomputed segment needs
// one; the NodeProgram needs stream ids), so random nodes draw the same
// numbers without any generator state being kept. Every saved tensor's version is checked at unpack (Note
// [saved tensor rules], SavedTensorHooks.h): an in-place change after saving
// is a MemoryError naming the op that saved it.
//
// Nothing here owns the saved data but the autograd graph: records live as
// long as a saved tensor (or a captured input of a segment) refers to them,
// so a graph dropped without backward frees everything (liveRecords() and
// liveHandles() go back to 0). The NodeProgram and this object must outlive
// every graph built through them.
//
// With recordFacts, the same attribution fills a MemoryFacts (the profiler).
//
// Thread use: forward, backward and every call here on one compute thread;
// swap I/O runs on the SwapEngine's thread.
//
//   StageMemory memory(program, stage.nodeIndex, params, {plan});
//   memory.beginForward(mb, boundaryInputs);
//   { SavedTensorScope scope(memory.hooks()); out = module.forward(in, &memory); }
//   memory.endForward();
//   ...
//   memory.prefetch(nextMb);              // queue reads ahead (optional)
//   memory.beginBackward(mb);             // reads of mb's swapped storages
//   torch::autograd::backward(...);
//   memory.endBackward(mb);
//
// Note [split backward memory]: under a schedule that splits backward
// (pipeline/BackwardSplit.h) a micro-batch's backward runs in two calls,
// each between beginBackward and an end: BackwardInput ends with
// endBackwardInput, BackwardWeight with endBackward. What BackwardInput
// reads and BackwardWeight no longer needs goes with the autograd nodes
// BackwardSplit releases (their saved tensors hold the records). What
// BackwardWeight still needs stays referenced: a kept storage stays; a
// swapped one is given back to the tier after BackwardInput
// (SwapEngine::evict; unless the weight half runs next) and read again,
// prefetched in the schedule's order, before BackwardWeight; a recomputed
// one that BackwardInput rebuilt (an autograd node unpacks all its saved
// tensors, so a node feeding both halves rebuilds its weight-side inputs
// too) is held until BackwardWeight, and one only the weight half reads is
// rebuilt there, under the forward's random key as always.
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/NodeProgram.h"
#include "memory/MemoryFacts.h"
#include "memory/MemoryPlan.h"
#include "memory/SavedTensorHooks.h"
#include "memory/SwapEngine.h"

namespace sluice::memory {

struct StageMemoryStats {
  int64_t swappedBytes = 0;      // of this stage's storages, sent to the swap tier
  int64_t recomputedBytes = 0;   // storages rebuilt by recompute
  int64_t recomputes = 0;        // segment re-runs
  double recomputeSeconds = 0;
  SwapStats swap;
};

struct StageMemoryOptions {
  MemoryPlan plan;
  std::string swapDir;       // the swap tier's directory when the plan swaps (CPU)
  c10::Device device = c10::Device(c10::kCPU);  // the stage's device: picks the swap tier (makeSwapTier)
  bool recordFacts = false;  // fill facts() (every micro-batch; the profiler runs one)
  std::string stageName = "stage";
  // The swap engine of the rank's stages together (several stages per rank:
  // one window for the rank, as the plan predicts); null: one of its own
  // (swapDir, device, the plan's window). stats().swap is then the rank's.
  std::shared_ptr<SwapEngine> engine;
};

namespace detail {
struct Context;
struct Entry;
struct MicroBatchState;
class PlanHooks;
}  // namespace detail

class StageMemory : public NodeObserver {
 public:
  // nodeIndex: OpGraph index of each program position (-1: not an OpGraph node).
  // params: the stage's parameters and buffers (their storages are always kept).
  StageMemory(const NodeProgram& program, std::vector<int> nodeIndex, const std::vector<at::Tensor>& params,
              StageMemoryOptions options);
  ~StageMemory() override;
  StageMemory(const StageMemory&) = delete;
  StageMemory& operator=(const StageMemory&) = delete;

  void beginForward(int microBatch, const std::vector<at::Tensor>& boundaryInputs);
  HooksFactory hooks();
  void endForward();
  // Queues reads of this micro-batch's swapped storages (last saved first)
  // behind the reads already queued on the swap engine (which the rank's
  // stages share); they run within the swap window. Queuing one twice, or one
  // whose forward has not run, is a no-op.
  void prefetch(int microBatch);
  bool swaps() const;  // the plan swaps something on this stage
  // prefetch(microBatch), at the start of one of its backward pieces.
  void beginBackward(int microBatch);
  void endBackward(int microBatch);
  // The end of a split backward's input half (Note [split backward memory]):
  // swapped storages the weight half still needs go back to the tier unless
  // weightNext (the weight half of this micro-batch runs right after).
  void endBackwardInput(int microBatch, bool weightNext);

  bool active() const;  // the plan frees something, or facts are recorded
  // Swap I/O, swap stalls and recomputes as trace events while `trace` is
  // active (core/Trace.h); null: none.
  void setTrace(TraceRecorder* trace);
  // Blocks until every swapped storage is written to the tier (tests use it
  // to make sure backward reads them back rather than catching them in memory).
  void flushSwaps();
  StageMemoryStats stats() const;
  const MemoryFacts& facts() const;
  std::string swapDescription() const;

  // Records and saved-tensor handles alive in this process (all stages).
  static int64_t liveRecords();
  static int64_t liveHandles();

  void beforeNode(int pos, const std::vector<c10::IValue>& inputs) override;
  void afterNode(int pos, const std::vector<c10::IValue>& inputs, const std::vector<c10::IValue>& outputs) override;

 private:
  friend class detail::PlanHooks;
  void pack(const at::Tensor& tensor, detail::PlanHooks& hooks);
  void createRecord(detail::Entry& entry, int decision, const at::Tensor& t, const c10::StorageImpl* s);
  std::shared_ptr<detail::Context> context_;
  std::unique_ptr<detail::MicroBatchState> forward_;  // the micro-batch being forwarded
  std::map<int, std::vector<std::weak_ptr<SwapSlot>>> swapOrder_;  // micro-batch -> slots in save order
};

}  // namespace sluice::memory
