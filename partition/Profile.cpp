#include "partition/Profile.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <thread>
#include <chrono>
#include <cstdio>
#include <cmath>
#include <fstream>
#include <numeric>
#include <sstream>

#include "partition/Profiler.h"
#include "core/Error.h"
#include "core/Files.h"
#include "core/SystemInfo.h"
#include "core/Bytes.h"
#include "memory/SwapTier.h"
#include "sluice_profile.pb.h"

namespace sluice::partition {

double Profile::totalForward() const {
  double s = 0;
  for (auto& n : nodes) s += n.forwardSeconds;
  return s;
}

double Profile::totalBackward() const {
  double s = 0;
  for (auto& n : nodes) s += n.backwardSeconds;
  return s;
}

int64_t Profile::totalSaved() const {
  int64_t s = 0;
  for (auto& n : nodes) s += n.savedBytes;
  return s;
}

namespace {
constexpr const char* kProfileFormat = "sluice-profile-3";

void nodeToProto(const NodeProfile& n, proto::NodeProfile* pn) {
  pn->set_index(n.index);
  pn->set_op(n.op);
  pn->set_forward_s(n.forwardSeconds);
  pn->set_backward_s(n.backwardSeconds);
  pn->set_weight_backward_s(n.weightBackwardSeconds);
  pn->set_output_bytes(n.outputBytes);
  pn->set_saved_bytes(n.savedBytes);
  pn->set_param_bytes(n.paramBytes);
  pn->set_recomputable(n.recomputable);
  pn->set_random(n.random);
  pn->set_workspace_bytes(n.workspaceBytes);
  pn->set_forward_workspace_bytes(n.forwardWorkspaceBytes);
}

// The memory facts: every saved storage, and per node its outputs' storages
// and whether it writes a parameter.
void factsToProto(const memory::MemoryFacts& facts, proto::Profile& p) {
  for (auto& f : facts.storages) {
    auto* q = p.add_storages();
    q->set_node(f.key.node);
    q->set_slot(f.key.slot);
    q->set_bytes(f.bytes);
    for (int s : f.savers) q->add_savers(s);
    for (int w : f.writers) q->add_writers(w);
  }
  for (size_t n = 0; n < facts.outputs.size(); ++n) {
    auto* q = p.add_node_outputs();
    q->set_writes_parameter(n < facts.writesParameter.size() && facts.writesParameter[n]);
    for (auto& v : facts.outputs[n]) {
      auto* o = q->add_outputs();
      o->set_kind(v.kind);
      o->set_node(v.key.node);
      o->set_slot(v.key.slot);
    }
  }
}

void machineToProto(const MachineProfile& machine, proto::MachineProfile* m) {
  m->set_p2p_bandwidth_bytes_per_s(machine.p2pBandwidth);
  m->set_p2p_latency_s(machine.p2pLatency);
  m->set_swap_write_bytes_per_s(machine.swapWriteBandwidth);
  m->set_swap_read_bytes_per_s(machine.swapReadBandwidth);
  m->set_swap_cpu_s_per_byte(machine.swapCpuSecondsPerByte);
  m->set_threads(machine.threads);
  m->set_blas(machine.blas);
}

}  // namespace

void Profile::save(const std::string& path) const {
  proto::Profile p;
  p.set_format(kProfileFormat);
  p.set_graph_hash(graphHash);
  p.set_iterations(iterations);
  for (auto& n : nodes) nodeToProto(n, p.add_nodes());
  factsToProto(facts, p);
  p.set_loss_saved_bytes(lossSavedBytes);
  p.set_loss_workspace_bytes(lossWorkspaceBytes);
  p.set_loss_forward_s(lossForwardSeconds);
  p.set_loss_backward_s(lossBackwardSeconds);
  p.set_micro_batch_size(microBatchSize);
  p.set_data_bytes(dataBytes);
  p.set_refill_wait_s(refill.waitSeconds);
  p.set_refill_rounds(refill.rounds);
  for (auto& piece : refill.pieces) {
    auto* q = p.add_refill_pieces();
    q->set_first_node(piece.firstNode);
    q->set_end_node(piece.endNode);
    q->set_share(piece.share);
  }
  machineToProto(machine, p.mutable_machine());
  writeFileAtomically(path, p.SerializeAsString());
}

Profile Profile::load(const std::string& path, const std::string& expectedHash) {
  std::ifstream f(path, std::ios::binary);
  SLUICE_CHECK(f, GraphError, "cannot open profile " << path);
  proto::Profile p;
  SLUICE_CHECK(p.ParseFromIstream(&f) && !p.graph_hash().empty(), GraphError,
               "profile " << path << " is truncated or not a Sluice profile; run `sluice profile` again");
  SLUICE_CHECK(p.format() == kProfileFormat, GraphError,
               "profile " << path << " was made by an older Sluice (format '" << p.format() << "', this one reads '"
                          << kProfileFormat << "'): run `sluice profile` again");
  SLUICE_CHECK(expectedHash.empty() || p.graph_hash() == expectedHash, GraphError,
               "profile " << path << " was made for another graph (hash " << p.graph_hash() << ", this model and batch "
                          << "shape hash to " << expectedHash << "); profile this config again");
  Profile out;
  out.graphHash = p.graph_hash();
  out.iterations = p.iterations();
  for (auto& pn : p.nodes()) {
    out.nodes.push_back({pn.index(), pn.op(), pn.forward_s(), pn.backward_s(), pn.output_bytes(), pn.saved_bytes(),
                         pn.param_bytes(), pn.recomputable(), pn.random(), pn.workspace_bytes(),
                         pn.weight_backward_s(), pn.forward_workspace_bytes()});
  }
  for (auto& q : p.storages()) {
    memory::StorageFact f;
    f.key = {q.node(), q.slot()};
    f.bytes = q.bytes();
    f.savers.assign(q.savers().begin(), q.savers().end());
    f.writers.assign(q.writers().begin(), q.writers().end());
    out.facts.storages.push_back(std::move(f));
  }
  for (auto& q : p.node_outputs()) {
    std::vector<memory::ValueStorage> outs;
    for (auto& o : q.outputs()) {
      memory::ValueStorage v;
      v.kind = static_cast<memory::ValueStorage::Kind>(o.kind());
      v.key = {o.node(), o.slot()};
      outs.push_back(v);
    }
    out.facts.outputs.push_back(std::move(outs));
    out.facts.writesParameter.push_back(q.writes_parameter() ? 1 : 0);
  }
  out.lossSavedBytes = p.loss_saved_bytes();
  out.lossWorkspaceBytes = p.loss_workspace_bytes();
  out.lossForwardSeconds = p.loss_forward_s();
  out.lossBackwardSeconds = p.loss_backward_s();
  out.microBatchSize = p.micro_batch_size();
  out.dataBytes = p.data_bytes();
  out.refill.waitSeconds = p.refill_wait_s();
  out.refill.rounds = p.refill_rounds();
  for (auto& q : p.refill_pieces()) {
    out.refill.pieces.push_back({q.first_node(), q.end_node(), q.share()});
  }
  auto& m = p.machine();
  out.machine = {m.p2p_bandwidth_bytes_per_s(), m.p2p_latency_s(), m.swap_write_bytes_per_s(),
                 m.swap_read_bytes_per_s(), m.swap_cpu_s_per_byte(), m.threads(), m.blas()};
  return out;
}

std::string RefillProfile::describe() const {
  std::ostringstream os;
  os << "after a " << std::lround(1e3 * waitSeconds)
     << " ms wait, forward + backward ran longer than back to back by:";
  char buf[64];
  for (auto& piece : pieces) {
    std::snprintf(buf, sizeof(buf), " nodes [%d, %d) %+.1f%%;", piece.firstNode, piece.endNode, 100 * piece.share);
    os << buf;
  }
  os << " (" << rounds << " rounds over the ranks)";
  return os.str();
}

std::string Profile::summary(int topNodes) const {
  std::ostringstream os;
  char buf[256];
  std::snprintf(buf, sizeof(buf), "profile of graph %s: %zu nodes, forward %.2f ms, backward %.2f ms, saved %s\n",
                graphHash.c_str(), nodes.size(), 1e3 * totalForward(), 1e3 * totalBackward(),
                formatBytes(totalSaved()).c_str());
  os << buf;
  std::snprintf(buf, sizeof(buf), "loss (last stage): forward %.2f ms, backward %.2f ms, micro-batch size %d\n",
                1e3 * lossForwardSeconds, 1e3 * lossBackwardSeconds, microBatchSize);
  os << buf;
  std::snprintf(buf, sizeof(buf),
                "machine: p2p %.0f MB/s, latency %.1f us; swap write %.0f MB/s, read %.0f MB/s, compute lost %.2f ms "
                "per MiB swapped; %d threads, %s\n",
                machine.p2pBandwidth / 1e6, machine.p2pLatency * 1e6, machine.swapWriteBandwidth / 1e6,
                machine.swapReadBandwidth / 1e6, machine.swapCpuSecondsPerByte * 1e3 * 1048576, machine.threads,
                machine.blas.c_str());
  os << buf;
  if (!refill.pieces.empty()) os << "refill " << refill.describe() << "\n";
  std::vector<const NodeProfile*> order;
  for (auto& n : nodes) order.push_back(&n);
  std::sort(order.begin(), order.end(), [](auto* a, auto* b) {
    return a->forwardSeconds + a->backwardSeconds > b->forwardSeconds + b->backwardSeconds;
  });
  std::snprintf(buf, sizeof(buf), "%6s  %-22s %10s %10s %12s %12s\n", "node", "op", "fwd us", "bwd us", "saved", "params");
  os << buf;
  for (int i = 0; i < std::min<int>(topNodes, static_cast<int>(order.size())); ++i) {
    auto* n = order[i];
    std::snprintf(buf, sizeof(buf), "%6d  %-22s %10.1f %10.1f %12s %12s\n", n->index, n->op.c_str(),
                  1e6 * n->forwardSeconds, 1e6 * n->backwardSeconds, formatBytes(n->savedBytes).c_str(),
                  formatBytes(n->paramBytes).c_str());
    os << buf;
  }
  return os.str();
}

namespace {

double pingPong(const Communicator& comm, int64_t bytes, int reps) {
  auto buf = torch::zeros({bytes}, torch::kUInt8);
  TensorSpec spec{{bytes}, c10::kByte};
  comm.barrier();
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) {
    if (comm.rank() == 0) {
      comm.send(buf, 1, 1);
      comm.recv(spec, 1, 2);
    } else if (comm.rank() == 1) {
      comm.recv(spec, 0, 1);
      comm.send(buf, 0, 2);
    }
  }
  double rtt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
  return rtt / 2;  // one-way time
}

// Seconds a fixed compute load (matmuls) loses per byte a thread beside it
// swaps (writes and reads back), on every rank at once; the median of three
// trials, averaged over ranks. On a virtual machine the kernel's and the
// hypervisor's share of disk I/O lands on the same cores as the compute.
double swapCpuCost(const Communicator& comm, memory::FileSwapTier& tier) {
  auto a = torch::randn({256, 256}), b = torch::randn({256, 256});
  auto load = [&](int reps) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) (void)torch::mm(a, b);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  int reps = 16;
  while (load(reps) < 0.25 && reps < (1 << 20)) reps *= 2;
  auto agreed = torch::tensor({static_cast<int64_t>(reps)});
  comm.allReduce(agreed, ReduceOp::Max);  // the same work everywhere
  reps = static_cast<int>(agreed.item<int64_t>());
  const int64_t block = 4 << 20;
  auto data = torch::ones({block}, torch::kUInt8);
  std::vector<double> costs;
  for (int trial = 0; trial < 3; ++trial) {
    comm.barrier();
    const double alone = load(reps);
    comm.barrier();
    std::atomic<bool> stop{false};
    std::atomic<int64_t> moved{0};
    std::thread io([&] {
      while (!stop) {
        const int64_t at = tier.write(data.data_ptr(), block);
        tier.sync();
        tier.read(at, data.data_ptr(), block);
        tier.release(at, block);
        moved += block;
      }
    });
    const double busy = load(reps);
    stop = true;
    io.join();
    costs.push_back(moved > 0 ? std::max(0.0, busy - alone) / static_cast<double>(moved) : 0.0);
  }
  std::sort(costs.begin(), costs.end());
  auto cost = torch::tensor({costs[1]}, torch::kFloat64);
  comm.allReduce(cost, ReduceOp::Average);
  return cost.item<double>();
}

}  // namespace

void averageOverRanks(Profile& profile, const Communicator& comm) {
  const int64_t n = static_cast<int64_t>(profile.nodes.size());
  auto times = torch::zeros({3 * n + 2}, torch::kFloat64);
  auto* t = times.data_ptr<double>();
  for (int64_t i = 0; i < n; ++i) {
    const auto& node = profile.nodes[i];
    t[i] = node.forwardSeconds, t[n + i] = node.backwardSeconds, t[2 * n + i] = node.weightBackwardSeconds;
  }
  t[3 * n] = profile.lossForwardSeconds;
  t[3 * n + 1] = profile.lossBackwardSeconds;
  comm.allReduce(times, ReduceOp::Average);
  for (int64_t i = 0; i < n; ++i) {
    auto& node = profile.nodes[i];
    node.forwardSeconds = t[i], node.backwardSeconds = t[n + i], node.weightBackwardSeconds = t[2 * n + i];
  }
  profile.lossForwardSeconds = t[3 * n];
  profile.lossBackwardSeconds = t[3 * n + 1];
}

MachineProfile measureMachine(const Communicator& comm, const std::string& dir) {
  MachineProfile m;
  m.threads = at::get_num_threads();
  m.blas = blasKind();
  if (comm.size() >= 2) {
    const double small = pingPong(comm, 64, 50);
    const int64_t big = 8 << 20;
    const double large = pingPong(comm, big, 10);
    m.p2pLatency = small;
    m.p2pBandwidth = big / std::max(1e-9, large - small);
  }
  if (!dir.empty()) {
    // The swap tier training uses, on every rank at once (they share the
    // disk as in training): written, then read back from disk.
    memory::FileSwapTier tier(dir);
    comm.barrier();
    const int64_t block = 4 << 20, blocks = 16;
    auto data = torch::ones({block}, torch::kUInt8);
    std::vector<int64_t> where;
    auto t0 = std::chrono::steady_clock::now();
    for (int b = 0; b < blocks; ++b) where.push_back(tier.write(data.data_ptr(), block));
    tier.sync();
    auto t1 = std::chrono::steady_clock::now();
    for (int b = 0; b < blocks; ++b) tier.read(where[b], data.data_ptr(), block);
    auto t2 = std::chrono::steady_clock::now();
    auto bw = torch::tensor({block * blocks / std::chrono::duration<double>(t1 - t0).count(),
                             block * blocks / std::chrono::duration<double>(t2 - t1).count()},
                            torch::kFloat64);
    comm.allReduce(bw, ReduceOp::Average);
    m.swapWriteBandwidth = bw[0].item<double>();
    m.swapReadBandwidth = bw[1].item<double>();
    m.swapCpuSecondsPerByte = swapCpuCost(comm, tier);
  }
  return m;
}

}  // namespace sluice::partition
