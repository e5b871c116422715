// core::RandomStream: the random numbers of training as a function of where
// they are drawn, not of which process draws them or what ran before.
//
// Note [random streams]: every node that draws random numbers (dropout,
// rand*, bernoulli, ...: isRandomOp) draws from a stream whose seed is
//   streamSeed(job seed, optimizer step, micro-batch, node)
// where micro-batch is the micro-batch's global index in the step (replica r
// of d holding m micro-batches has r*m .. r*m+m-1; one process holding d*m
// has them all, row for row the same) and node is the node's index in the
// whole model's OpGraph, which every split keeps. Nothing else enters: so 1
// process and any number of stages, chunks, replicas, any schedule and any
// memory plan draw the same numbers, a recompute replays them by
// construction (it runs under the key its forward ran under), a restart or a
// resume into another layout continues the same run, and forwards outside a
// training step (profiling, planning) cannot shift them.
//
// How: while a RandomKeyScope is active on the thread, NodeProgram seeds the
// device's default generator with the node's stream seed right before the
// node runs (seedForNode). On CPU that reseeds mt19937, which keeps the low
// 32 bits of the seed (two of n draws share a mask with probability about
// n^2 / 2^33: statistics, not exactness); on CUDA it sets the Philox key to
// the 64-bit seed with offset 0, so the node's draws are Philox's counter
// stream under that key, independent of the launch order. Cost: one reseed
// per random node per micro-batch (mt19937's 624-word init, about 1 us).
//
// Compiled execution (a TorchScript GraphFunction) gives no hook between
// nodes, so a stage that draws random numbers must run eager
// (StageModule refuses it). A CUDA graph capture (pipeline.execution:
// graphs, pipeline/StageGraphs.h) cannot reseed a generator while it
// captures: it installs a RandomNodeHook, which seedForNode calls instead
// (the capture gives each random node a generator of its own, reseeded with
// the node's stream seed before every replay: the same Philox key and
// offset 0 as eager).
//
//   RandomKeyScope scope({seed, step, microBatch}, device);
//   program.run(inputs);  // each random node draws from its own stream
#pragma once

#include <c10/core/Device.h>

#include <cstdint>
#include <string>
#include <vector>

namespace torch::jit {
struct Graph;
struct Node;
}  // namespace torch::jit

namespace sluice {

// Called before each random node runs while its scope is active, in place
// of reseeding the device's default generator.
class RandomNodeHook {
 public:
  virtual ~RandomNodeHook() = default;
  virtual void beforeRandomNode(int64_t node) = 0;
};

struct RandomKey {
  uint64_t seed = 0;        // job.seed
  int64_t step = 0;         // the optimizer step (0-based, as checkpoints count)
  int64_t microBatch = -1;  // global index in the step; -1: the worker's own index
};

// The stream seed of `node` under `key` (splitmix64 over the four words).
uint64_t streamSeed(const RandomKey& key, int64_t node);

// Ops that draw from the random generator (dropout, attention with a
// dropout_p, rand*, bernoulli, ...).
bool isRandomOp(const std::string& op);
// isRandomOp, less the dropouts whose train flag or probability is a
// constant that makes them draw nothing (graphs captured in eval mode).
bool drawsRandom(const torch::jit::Node* node);
// The stream ids (streamIds[position]) of `graph`'s nodes that draw random
// numbers, in node order; positions without an id (-1) are left out.
std::vector<int> randomStreamIds(const torch::jit::Graph& graph, const std::vector<int>& streamIds);

// Makes `key` the thread's active key for `device`'s generator until
// destroyed (scopes nest; the previous one comes back). With a hook,
// seedForNode calls it instead of reseeding.
class RandomKeyScope {
 public:
  RandomKeyScope(const RandomKey& key, c10::Device device, RandomNodeHook* hook = nullptr);
  ~RandomKeyScope();
  RandomKeyScope(const RandomKeyScope&) = delete;
  RandomKeyScope& operator=(const RandomKeyScope&) = delete;

 private:
  friend const RandomKey* activeRandomKey();
  friend bool seedForNode(int64_t node);
  RandomKey key_;
  c10::Device device_;
  RandomNodeHook* hook_;
  const RandomKeyScope* previous_;
};

// The active key, or nullptr.
const RandomKey* activeRandomKey();
// Seeds the active device's default generator with streamSeed(key, node)
// (or calls the scope's hook); false (and nothing done) when no key is active.
bool seedForNode(int64_t node);

}  // namespace sluice
