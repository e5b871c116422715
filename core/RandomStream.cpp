#include "core/RandomStream.h"

#include <ATen/Context.h>
#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/ir/ir.h>

#include <mutex>
#include <set>

namespace sluice {

namespace {

thread_local const RandomKeyScope* active = nullptr;  // the innermost scope of this thread

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

uint64_t streamSeed(const RandomKey& key, int64_t node) {
  uint64_t h = splitmix64(key.seed);
  h = splitmix64(h ^ static_cast<uint64_t>(key.step));
  h = splitmix64(h ^ static_cast<uint64_t>(key.microBatch));
  return splitmix64(h ^ static_cast<uint64_t>(node));
}

bool isRandomOp(const std::string& op) {
  static const std::set<std::string> exact = {"aten::normal",     "aten::normal_",  "aten::uniform_",
                                              "aten::multinomial", "aten::rrelu",    "aten::rrelu_with_noise",
                                              "aten::exponential_", "aten::poisson", "aten::geometric_",
                                              "aten::cauchy_",     "aten::log_normal_"};
  return op.find("dropout") != std::string::npos || op == "aten::scaled_dot_product_attention" ||
         op.rfind("aten::rand", 0) == 0 ||
         op.find("bernoulli") != std::string::npos || exact.count(op) > 0;
}

bool drawsRandom(const torch::jit::Node* node) {
  const std::string op = node->kind().toQualString();
  if (!isRandomOp(op)) return false;
  if (op == "aten::scaled_dot_product_attention") {  // (q, k, v, attn_mask, dropout_p, ...): draws when dropout_p > 0
    if (node->inputs().size() < 5) return false;
    auto p = torch::jit::toIValue(node->inputs()[4]);
    return !(p && p->isDouble() && p->toDouble() == 0.0);
  }
  if (op.find("dropout") == std::string::npos || node->inputs().size() < 3) return true;
  // aten::*dropout*(input, p, train): a constant train=False or p=0 draws nothing.
  auto train = torch::jit::toIValue(node->inputs()[2]);
  if (train && train->isBool() && !train->toBool()) return false;
  auto p = torch::jit::toIValue(node->inputs()[1]);
  if (p && p->isDouble() && p->toDouble() == 0.0) return false;
  return true;
}

std::vector<int> randomStreamIds(const torch::jit::Graph& graph, const std::vector<int>& streamIds) {
  std::vector<int> out;
  size_t pos = 0;
  for (const auto* node : graph.nodes()) {
    if (pos < streamIds.size() && streamIds[pos] >= 0 && drawsRandom(node)) out.push_back(streamIds[pos]);
    ++pos;
  }
  return out;
}

RandomKeyScope::RandomKeyScope(const RandomKey& key, c10::Device device, RandomNodeHook* hook)
    : key_(key), device_(device), hook_(hook), previous_(active) {
  active = this;
}

RandomKeyScope::~RandomKeyScope() { active = previous_; }

const RandomKey* activeRandomKey() { return active ? &active->key_ : nullptr; }

bool seedForNode(int64_t node) {
  if (!active) return false;
  if (active->hook_) {
    active->hook_->beforeRandomNode(node);
    return true;
  }
  auto gen = at::globalContext().defaultGenerator(active->device_);
  std::lock_guard<std::mutex> lock(gen.mutex());
  // CPU: mt19937 reseeded (and its cached normal samples dropped); CUDA:
  // Philox key = the seed, offset 0.
  gen.set_current_seed(streamSeed(active->key_, node));
  return true;
}

}  // namespace sluice
