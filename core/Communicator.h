// core::Communicator: tensors over Open MPI (CPU tensors; a CUDA build adds NCCL).
//
// Contract
// - Collective calls must be made by every rank of the communicator in the same
//   order (MPI semantics); p2p calls pair by (peer, tag).
// - Blocking calls return when the local buffers may be reused. Nonblocking
//   calls return a Work; wait() blocks until done and then runs the checks that
//   need the data (a p2p receive compares the sender's shape/dtype with the
//   expected ones and throws CommError on mismatch). A Work destroyed before
//   wait() waits in its destructor: MPI must never write into freed memory.
//   Note [abandoned work]: while an exception unwinds (and after a wait timed
//   out), a pending Work is abandoned instead: its requests and buffers are
//   kept alive, never freed, so that the error reaches the caller (who ends
//   the job) rather than waiting forever on a peer that will never answer.
// - Watchdog: every wait (all blocking calls are nonblocking calls plus a
//   wait) gives up after setWaitTimeout() seconds (0: never) with a CommError
//   naming the operation, the peer and tag, and what the thread was doing
//   (CommActivity, e.g. "step 7, micro-batch 2, recv activation").
// - Tensors must be contiguous CPU tensors; reductions support float, double,
//   int32 and int64. Averages are a sum followed by a division by size().
// - Every communicator returns MPI errors (MPI_ERRORS_RETURN) instead of
//   aborting; every failed MPI call throws CommError naming the operation, the
//   rank and, for p2p, the peer and tag.
// - Thread use: one thread at a time per communicator (MPI_THREAD_SERIALIZED
//   or better is requested at initialize()).
//
// Usage:
//   sluice::Communicator::initialize(&argc, &argv);
//   auto world = sluice::Communicator::world();
//   auto t = torch::ones({4});
//   world.allReduce(t);                        // sum over ranks, in place
//   auto pair = world.split(world.rank() / 2); // sub-communicators
#pragma once

#include <torch/torch.h>
#include <mpi.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace sluice {

enum class ReduceOp { Sum, Average, Max, Min };

// What the receiver expects; checked against the sender's header on receipt.
struct TensorSpec {
  std::vector<int64_t> shape;
  c10::ScalarType dtype = c10::kFloat;
  std::string describe() const;
};

// What this thread is doing, for error and timeout messages; scopes nest
// ("step 7" then "micro-batch 2, recv activation").
class CommActivity {
 public:
  explicit CommActivity(std::string what);
  ~CommActivity();
  CommActivity(const CommActivity&) = delete;
  CommActivity& operator=(const CommActivity&) = delete;
  static std::string current();  // "" when none
};

// A pending nonblocking operation. Movable, not copyable.
class Work {
 public:
  Work() = default;
  Work(std::vector<MPI_Request> requests, std::vector<torch::Tensor> keepAlive,
       std::function<void()> onComplete, std::string what);
  Work(Work&& other) noexcept;
  Work& operator=(Work&& other) noexcept;
  Work(const Work&) = delete;
  Work& operator=(const Work&) = delete;
  ~Work();

  // Blocks until the operation completed, then runs its completion checks.
  void wait();
  // Nonblocking: true (after the completion checks, releasing the buffers)
  // once the operation completed; false while it is still in flight.
  bool test();
  bool pending() const { return !requests_.empty(); }

 private:
  void abandon();
  [[noreturn]] void fail(int mpiError);  // abandons, then throws CommError
  void finish();                          // after completion: release, run onComplete
  std::vector<MPI_Request> requests_;
  std::vector<torch::Tensor> keepAlive_;
  std::function<void()> onComplete_;
  std::string what_;
};

// Result of a receive: the tensor and the sender's requires_grad flag.
struct Received {
  torch::Tensor tensor;
  bool requiresGrad = false;
};

// A nonblocking receive; wait() returns the received tensor.
class RecvWork {
 public:
  RecvWork() = default;
  RecvWork(Work work, std::shared_ptr<Received> result) : work_(std::move(work)), result_(std::move(result)) {}
  Received wait();
  bool valid() const { return result_ != nullptr; }

 private:
  Work work_;
  std::shared_ptr<Received> result_;
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
  static Communicator world();
  static Communicator self();
  // Aborts every rank of MPI_COMM_WORLD (used when one rank fails).
  [[noreturn]] static void abortAll(int code);
  // The watchdog: seconds any wait may take before it throws (0: no limit).
  static void setWaitTimeout(double seconds);
  static double waitTimeout();

  Communicator() = default;
  int rank() const { return rank_; }
  int size() const { return size_; }
  bool valid() const { return comm_ != nullptr; }

  // Ranks with the same color form a sub-communicator, ordered by key (default: rank).
  Communicator split(int color, int key = -1) const;

  // --- point to point. Tags must be in [0, kMaxTag]. ---
  static constexpr int kMaxTag = 16000;
  void send(const torch::Tensor& tensor, int dst, int tag, bool requiresGrad = false) const;
  Work isend(const torch::Tensor& tensor, int dst, int tag, bool requiresGrad = false) const;
  // Receives a tensor whose shape/dtype must equal `expected`.
  Received recv(const TensorSpec& expected, int src, int tag) const;
  RecvWork irecv(const TensorSpec& expected, int src, int tag) const;
  // Receives a tensor of any shape/dtype (blocking: reads the header first).
  Received recvAny(int src, int tag) const;

  // --- collectives (in place where the name says so) ---
  void allReduce(torch::Tensor& tensor, ReduceOp op = ReduceOp::Sum) const;
  Work iallReduce(torch::Tensor& tensor, ReduceOp op = ReduceOp::Sum) const;
  // input.numel() == size() * output.numel(); rank r gets the reduction of chunk r.
  void reduceScatter(const torch::Tensor& input, torch::Tensor& output, ReduceOp op = ReduceOp::Sum) const;
  Work ireduceScatter(const torch::Tensor& input, torch::Tensor& output, ReduceOp op = ReduceOp::Sum) const;
  // output.numel() == size() * input.numel(); chunk r of output is rank r's input.
  void allGather(const torch::Tensor& input, torch::Tensor& output) const;
  Work iallGather(const torch::Tensor& input, torch::Tensor& output) const;
  void broadcast(torch::Tensor& tensor, int root) const;
  void barrier() const;

  MPI_Comm handle() const { return comm_ ? *comm_ : MPI_COMM_NULL; }
  // "rank r", plus its world rank when this is a sub-communicator where they differ.
  std::string peerName(int r) const;

 private:
  explicit Communicator(std::shared_ptr<MPI_Comm> comm);
  std::shared_ptr<MPI_Comm> comm_;
  int rank_ = 0;
  int size_ = 0;
};

}  // namespace sluice
