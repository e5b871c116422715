// core::Communicator: tensors between ranks, over a backend chosen by the
//
// Public API (docs/architecture.md, "Public API"); a usage example follows the contract.
// tensor's device (core/CommBackend.h): CPU tensors over Open MPI; CUDA
// tensors over NCCL where one is attached (withDeviceBackend), else over
// MPI through host staging (core/MpiBackend.h, Note [host staging]).
//
// Contract
// - Collective calls must be made by every rank of the communicator in the
//   same order (MPI and NCCL semantics); p2p calls pair by (peer, tag), and
//   on NCCL also by order: between two ranks, messages in one direction are
//   received in the order they were sent (one NCCL communicator per ordered
//   pair of ranks), which the header's tag checks (Note [p2p header]).
// - Nonblocking calls return a Work. What wait() blocks: MPI: the host until
//   the operation is done and its checks passed (a p2p receive compares the
//   sender's shape/dtype/tag with the expected ones and throws CommError on
//   a mismatch); NCCL: nothing on the host: the caller's current CUDA stream
//   waits for the operation (which runs on the communicator's own stream),
//   and the receive's header is checked by the NCCL watchdog, which aborts
//   the communicator on a mismatch. A Work destroyed before wait() waits in
//   its destructor: no library may write into freed memory.
//   Note [abandoned work]: while an exception unwinds (and after a wait timed
//   out), a pending Work is abandoned instead: its requests and buffers are
//   kept alive, never freed, so that the error reaches the caller (who ends
//   the job) rather than waiting forever on a peer that will never answer.
// - Watchdog: every wait gives up after setWaitTimeout() seconds (0: never)
//   with a CommError naming the operation, the peer and tag, and what the
//   thread was doing (CommActivity, e.g. "step 7, micro-batch 2, recv
//   activation"). NCCL operations are watched by the backend's own thread
//   under the same timeout (ncclCommGetAsyncError, then ncclCommAbort): a
//   failed or timed-out NCCL communicator throws that error from every later
//   call on it.
// - Tensors must be contiguous, CPU or CUDA. Reductions support float,
//   double, int32 and int64 (NCCL also half and bfloat16). Averages are a
//   sum followed by a division by size() on every backend.
// - Errors are CommErrors naming the operation, the rank and, for p2p, the
//   peer and tag; no backend aborts the process by itself.
// - Thread use: one thread at a time per communicator (MPI_THREAD_MULTIPLE
//   is requested at initialize(), so several communicators may be used from
//   several threads).
//
// Usage:
//   sluice::Communicator::initialize(&argc, &argv);
//   auto world = sluice::Communicator::world();
//   auto t = torch::ones({4});
//   world.allReduce(t);                        // sum over ranks, in place
//   auto pair = world.split(world.rank() / 2); // sub-communicators
//   auto gpu = pair.withDeviceBackend(CommBackendKind::Nccl, c10::Device(c10::kCUDA, 0));
//   auto g = torch::ones({4}, c10::kCUDA);
//   gpu.allReduce(g);                          // over NCCL, ordered on the current stream
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/Choice.h"
#include "core/CommActivity.h"
#include "core/CommBackend.h"

namespace sluice {

// The backend kinds and their table: core/CommBackendKind.h.

// What the receiver expects; checked against the sender's header on receipt.
struct TensorSpec {
  std::vector<int64_t> shape;
  c10::ScalarType dtype = c10::kFloat;
  c10::Device device = c10::kCPU;  // where the received tensor is placed
  std::string describe() const;
};

// A pending nonblocking operation. Movable, not copyable.
class Work {
 public:
  Work() = default;
  Work(std::unique_ptr<PendingOp> op, std::string what);
  Work(Work&& other) noexcept;
  Work& operator=(Work&& other) noexcept;
  Work(const Work&) = delete;
  Work& operator=(const Work&) = delete;
  ~Work();

  // Blocks (under the watchdog) until the operation completed, then runs its
  // completion checks; see the contract for what an NCCL wait blocks.
  void wait();
  // Nonblocking: true (after the completion checks, releasing the buffers)
  // once the operation completed; false while it is still in flight.
  bool test();
  bool pending() const { return op_ != nullptr; }

 private:
  void abandon();
  std::unique_ptr<PendingOp> op_;
  std::string what_;
};

// Result of a receive: the tensor and the sender's requires_grad flag
// (unknown over NCCL, whose receiver's host does not wait for the header).
struct Received {
  at::Tensor tensor;
  std::optional<bool> requiresGrad;
};

// A nonblocking receive; wait() returns the received tensor.
class RecvWork {
 public:
  RecvWork() = default;
  RecvWork(Work work, at::Tensor tensor, std::shared_ptr<std::optional<bool>> requiresGrad)
      : work_(std::move(work)), tensor_(std::move(tensor)), requiresGrad_(std::move(requiresGrad)) {}
  Received wait();
  bool valid() const { return requiresGrad_ != nullptr; }

 private:
  Work work_;
  at::Tensor tensor_;
  std::shared_ptr<std::optional<bool>> requiresGrad_;
};

class Communicator {
 public:
  // MPI_Init_thread if MPI is not initialized yet (singleton init works without mpirun).
  static void initialize(int* argc, char*** argv);
  static void finalize();
  static bool initialized();
  // True when this process was started by mpirun/srun (not a singleton).
  static bool launchedByMpi();

  // Counters over every communicator of this process (the metrics report):
  // seconds spent in Work::wait (every blocking operation waits there), and
  // the payload bytes posted by p2p sends, received by p2p receives, and
  // given to collectives.
  struct Traffic {
    double waitSeconds = 0;
    int64_t sentBytes = 0, receivedBytes = 0, collectiveBytes = 0;
  };
  static Traffic traffic();
  // Every rank of the job, or this rank alone, over a host backend of
  // core/CommBackends.h's table ("mpi": Open MPI).
  static Communicator world(const std::string& hostBackend = "mpi");
  static Communicator self(const std::string& hostBackend = "mpi");
  // A communicator over any host backend (the factory's rows use it).
  static Communicator over(std::shared_ptr<HostBackend> host);
  // Aborts every rank of MPI_COMM_WORLD (used when one rank fails).
  [[noreturn]] static void abortAll(int code);
  // The watchdog: seconds any wait may take before it throws (0: no limit);
  // `setting` is what a timeout's message tells the user to raise (the
  // config key in force: cluster.init_timeout_s at start-up, then
  // cluster.timeout_s).
  static void setWaitTimeout(double seconds, const char* setting = "cluster.timeout_s");
  static double waitTimeout();
  static const char* waitTimeoutSetting();

  Communicator() = default;
  int rank() const;
  int size() const;
  bool valid() const { return host_ != nullptr; }

  // Ranks with the same color form a sub-communicator, ordered by key
  // (default: rank). An attached NCCL backend is split too. Collective.
  Communicator split(int color, int key = -1) const;
  // This communicator with `kind` carrying its CUDA tensors, on `device`
  // (this rank's GPU). Collective. Nccl: creates an NCCL communicator (the
  // unique id goes over MPI) and, with pointToPoint, one per ordered pair of
  // ranks for p2p; CommError in a build without CUDA, without a device, or
  // when two ranks of this communicator use the same GPU (they cannot form
  // an NCCL communicator: use Mpi, host staging). Mpi: nothing to create.
  Communicator withDeviceBackend(CommBackendKind kind, c10::Device device, bool pointToPoint = true) const;
  // Which backend carries this communicator's CUDA tensors.
  CommBackendKind deviceBackend() const;

  // --- point to point. Tags must be in [0, kMaxTag]. ---
  static constexpr int kMaxTag = 16000;
  void send(const at::Tensor& tensor, int dst, int tag, bool requiresGrad = false) const;
  Work isend(const at::Tensor& tensor, int dst, int tag, bool requiresGrad = false) const;
  // Receives a tensor whose shape/dtype must equal `expected`, onto expected.device.
  Received recv(const TensorSpec& expected, int src, int tag) const;
  RecvWork irecv(const TensorSpec& expected, int src, int tag) const;
  // Receives a CPU tensor of any shape/dtype over MPI (blocking: reads the header first).
  Received recvAny(int src, int tag) const;

  // --- collectives (in place where the name says so) ---
  void allReduce(at::Tensor& tensor, ReduceOp op = ReduceOp::Sum) const;
  Work iallReduce(at::Tensor& tensor, ReduceOp op = ReduceOp::Sum) const;
  // input.numel() == size() * output.numel(); rank r gets the reduction of chunk r.
  void reduceScatter(const at::Tensor& input, at::Tensor& output, ReduceOp op = ReduceOp::Sum) const;
  Work ireduceScatter(const at::Tensor& input, at::Tensor& output, ReduceOp op = ReduceOp::Sum) const;
  // output.numel() == size() * input.numel(); chunk r of output is rank r's input.
  void allGather(const at::Tensor& input, at::Tensor& output) const;
  Work iallGather(const at::Tensor& input, at::Tensor& output) const;
  void broadcast(at::Tensor& tensor, int root) const;
  // Over MPI: the host waits for every rank.
  void barrier() const;

  // "rank r", plus its world rank when this is a sub-communicator where they differ.
  std::string peerName(int r) const;

 private:
  explicit Communicator(std::shared_ptr<HostBackend> host, std::shared_ptr<CommBackend> device = nullptr);
  // The backend that moves `tensor` (the device backend for CUDA tensors when attached, else the host's).
  CommBackend& backendFor(const at::Tensor& tensor) const;
  std::shared_ptr<HostBackend> host_;    // CPU tensors and the control plane (MPI)
  std::shared_ptr<CommBackend> device_;  // CUDA tensors (NCCL); null: the host backend's (MPI: host staging)
  c10::Device deviceOf_ = c10::kCPU;
  bool pointToPoint_ = true;
};

}  // namespace sluice
