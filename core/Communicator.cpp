#include "core/Communicator.h"

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <sstream>
#include <thread>

#include "core/Error.h"
#include "core/Log.h"
#include "core/CommBackends.h"
#include "core/MpiBackend.h"  // the process-wide MPI start, stop and abort
#include "core/SystemInfo.h"
#include "core/WaitPolicy.h"

namespace sluice {
namespace {

// Seconds a wait polls back to back (yielding) before it sleeps (Note
// [waiting]): 200 ms, or 0.5 ms when this machine runs more ranks than it has
// cores (Open MPI's OMPI_COMM_WORLD_LOCAL_SIZE), where a polling rank would
// take CPU time from the ranks it waits for.
const WaitPolicy& hostWaitPolicy() {
  static const WaitPolicy policy = waitPolicy(hostOversubscribed());
  return policy;
}

std::atomic<double> timeoutSeconds{0};
thread_local std::vector<std::string> activities;
std::atomic<int64_t> waitNanos{0}, sentBytes{0}, receivedBytes{0}, collectiveBytes{0};

// Adds the time from construction to destruction to waitNanos.
struct WaitTimer {
  std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
  ~WaitTimer() {
    waitNanos.fetch_add(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count());
  }
};

const std::vector<Choice<CommBackendKind>> kBackends = {
    {CommBackendKind::Mpi, "mpi", "Open MPI; CUDA tensors staged through host memory (ranks may share a GPU)"},
    {CommBackendKind::Nccl, "nccl", "NCCL on the GPUs (one GPU per rank; CUDA builds)"},
};

void checkTensor(const torch::Tensor& t, const char* op) {
  SLUICE_CHECK(t.defined(), CommError, op << ": tensor is undefined");
  SLUICE_CHECK(t.device().is_cpu() || t.device().is_cuda(), CommError,
               op << ": expected a CPU or CUDA tensor, got " << t.device());
  SLUICE_CHECK(t.is_contiguous(), CommError, op << ": tensor must be contiguous");
  SLUICE_CHECK(t.nbytes() <= static_cast<size_t>(INT32_MAX), CommError,
               op << ": tensor of " << t.nbytes() << " bytes exceeds the 2 GiB per-message limit");
}

void checkPair(const torch::Tensor& a, const torch::Tensor& b, const char* op) {
  SLUICE_CHECK(a.scalar_type() == b.scalar_type(), CommError, op << ": input and output dtypes differ");
  SLUICE_CHECK(a.device() == b.device(), CommError,
               op << ": input on " << a.device() << " but output on " << b.device());
}

void checkTag(int tag, const char* op) {
  SLUICE_CHECK(tag >= 0 && tag <= Communicator::kMaxTag, CommError,
               op << ": tag " << tag << " outside [0, " << Communicator::kMaxTag << "]");
}

std::string shapeText(const std::vector<int64_t>& shape) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? "," : "") << shape[i];
  os << "]";
  return os.str();
}

}  // namespace

// ---------------- backend choices ----------------

const std::vector<Choice<CommBackendKind>>& commBackendKinds() { return kBackends; }
const char* commBackendName(CommBackendKind kind) { return choiceName(kBackends, kind); }
CommBackendKind parseCommBackend(const std::string& name) {
  return parseChoice(kBackends, name, "communication backend");
}

bool commBackendBuilt(CommBackendKind kind) {
  return kind == CommBackendKind::Mpi || deviceBackendFactory(kind) != nullptr;
}

CommBackendKind chooseDeviceBackend(std::optional<CommBackendKind> requested, bool gpusShared) {
  if (!requested) {
    return commBackendBuilt(CommBackendKind::Nccl) && !gpusShared ? CommBackendKind::Nccl : CommBackendKind::Mpi;
  }
  if (*requested == CommBackendKind::Nccl) {
    SLUICE_CHECK(commBackendBuilt(CommBackendKind::Nccl), ConfigError,
                 "config error: job.backend is nccl but this build of Sluice has no CUDA; use job.backend: mpi or auto");
    SLUICE_CHECK(!gpusShared, ConfigError,
                 "config error: job.backend is nccl but some host runs more ranks than it has GPUs (NCCL needs one GPU "
                 "per rank); use job.backend: mpi (host staging) or auto, or fewer ranks per host");
  }
  return *requested;
}

// ---------------- P2pHeader ----------------

P2pHeader P2pHeader::of(const torch::Tensor& t, bool requiresGrad, int tag) {
  SLUICE_CHECK(t.dim() <= kMaxDims, CommError, "send: tensors above " << kMaxDims << " dims are not supported");
  P2pHeader h;
  h.words[0] = kMagic;
  h.words[1] = static_cast<int64_t>(t.scalar_type());
  h.words[2] = requiresGrad ? 1 : 0;
  h.words[3] = tag;
  h.words[4] = t.dim();
  for (int64_t i = 0; i < t.dim(); ++i) h.words[5 + i] = t.size(i);
  return h;
}

std::string P2pHeader::describe() const {
  if (words[0] != kMagic || words[4] < 0 || words[4] > kMaxDims) return "with a corrupt header";
  return c10::toString(static_cast<c10::ScalarType>(words[1])) +
         shapeText(std::vector<int64_t>(words.begin() + 5, words.begin() + 5 + words[4]));
}

bool P2pHeader::matches(const torch::Tensor& expected, int tag) const {
  bool same = words[0] == kMagic && words[1] == static_cast<int64_t>(expected.scalar_type()) && words[3] == tag &&
              words[4] == expected.dim();
  for (int64_t i = 0; same && i < expected.dim(); ++i) same = words[5 + i] == expected.size(i);
  return same;
}

std::string TensorSpec::describe() const { return c10::toString(dtype) + shapeText(shape); }

// ---------------- CommActivity ----------------

CommActivity::CommActivity(std::string what) { activities.push_back(std::move(what)); }
CommActivity::~CommActivity() { activities.pop_back(); }

std::string CommActivity::current() {
  std::string out;
  for (auto& a : activities) out += (out.empty() ? "" : ", ") + a;
  return out;
}

// ---------------- Work ----------------

Work::Work(std::unique_ptr<PendingOp> op, std::string what) : op_(std::move(op)), what_(std::move(what)) {}

void Work::abandon() {
  if (op_) op_->abandon();
  op_.reset();
}

Work::Work(Work&& other) noexcept { *this = std::move(other); }

Work& Work::operator=(Work&& other) noexcept {
  if (this != &other) {
    if (pending()) {
      if (std::uncaught_exceptions() > 0) {
        abandon();
      } else {
        try { wait(); } catch (...) {}
      }
    }
    op_ = std::move(other.op_);
    what_ = std::move(other.what_);
  }
  return *this;
}

Work::~Work() {
  if (!pending()) return;
  if (std::uncaught_exceptions() > 0) {
    abandon();  // Note [abandoned work]
    return;
  }
  try {
    wait();
  } catch (const std::exception& e) {
    log::error(std::string("pending ") + what_ + " failed in destructor: " + e.what());
  }
}

Communicator::Traffic Communicator::traffic() {
  return {static_cast<double>(waitNanos.load()) * 1e-9, sentBytes.load(), receivedBytes.load(), collectiveBytes.load()};
}

void Work::wait() {
  if (!op_) return;
  WaitTimer timer;
  const double timeout = timeoutSeconds.load();
  // Poll, so that a peer that never answers is noticed. Note [waiting]
  // (core/WaitPolicy.h, which the step simulation plays out): for the first
  // 200 ms (0.5 ms where ranks outnumber cores) poll back to back, yielding the core
  // between polls (a rank that waits has nothing else to run; when ranks
  // share cores, the yield lets the peer we wait for run). Pipeline waits
  // are a peer's forward or backward, up to tens of ms where stages are
  // unequal, and a message is taken within microseconds of its arrival.
  // Longer waits (collectives behind a slow rank, a stopped peer) sleep,
  // 50 us doubling up to 1 ms, so an idle rank costs no CPU. (Sleeping from
  // the first 0.5 ms on added up to 1 ms to every wait: the profile measured
  // a 0.94 ms one-way latency for 64 bytes, and each pipeline hop paid it.
  // Sleeping after 10 ms made a light stage that waits ~35 ms per action
  // compute ~11% slower than polling through the wait: on a VM an idle core
  // is halted and its caches go to other work.)
  const auto t0 = std::chrono::steady_clock::now();
  const WaitPolicy& policy = hostWaitPolicy();
  double nap = policy.firstNapSeconds;
  for (;;) {
    bool done = false;
    try {
      done = op_->test();
    } catch (...) {
      op_.reset();  // it abandoned itself
      throw;
    }
    if (done) break;
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (timeout > 0 && waited > timeout) {
      const std::string what = what_, during = CommActivity::current();
      abandon();
      char buf[64];
      std::snprintf(buf, sizeof(buf), "%g", timeout);
      throw CommError("timed out after " + std::string(buf) + " s waiting for " + what +
                      (during.empty() ? "" : " (" + during + ")") + " on rank " + std::to_string(mpiWorldRank()) +
                      ": the peer did not answer (it may have failed, stopped or be stuck); raise " +
                      Communicator::waitTimeoutSetting() + " if such waits are expected");
    }
    if (waited < policy.pollSeconds) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::duration<double>(nap));
      nap = std::min(policy.maxNapSeconds, nap * 2);
    }
  }
  op_.reset();
}

bool Work::test() {
  if (!op_) return true;
  bool done = false;
  try {
    done = op_->test();
  } catch (...) {
    op_.reset();
    throw;
  }
  if (done) op_.reset();
  return done;
}

Received RecvWork::wait() {
  SLUICE_CHECK(requiresGrad_ != nullptr, CommError, "RecvWork::wait on an empty handle");
  work_.wait();
  Received r{tensor_, *requiresGrad_};
  tensor_ = torch::Tensor();
  requiresGrad_.reset();
  return r;
}

// ---------------- Communicator ----------------

void Communicator::initialize(int* argc, char*** argv) {
  int already = 0;
  MPI_Initialized(&already);
  if (already) return;
  int provided = 0;
  mpiCheck(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread", -1);
  // Errors come back as return codes (CommError), not as an abort inside MPI.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
  if (provided < MPI_THREAD_SERIALIZED) {
    log::warn("MPI provides thread level " + std::to_string(provided) +
              " (< MPI_THREAD_SERIALIZED); communication from autograd threads is unsafe");
  }
}

void Communicator::finalize() {
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (init && !fin) MPI_Finalize();
}

bool Communicator::initialized() {
  int init = 0;
  MPI_Initialized(&init);
  return init != 0;
}

bool Communicator::launchedByMpi() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMI_SIZE") != nullptr ||
         std::getenv("PMIX_RANK") != nullptr;
}

Communicator Communicator::world(const std::string& hostBackend) {
  SLUICE_CHECK(initialized(), CommError, "Communicator::world() called before Communicator::initialize()");
  return Communicator(hostBackendKind(hostBackend).world());
}

Communicator Communicator::self(const std::string& hostBackend) {
  SLUICE_CHECK(initialized(), CommError, "Communicator::self() called before Communicator::initialize()");
  return Communicator(hostBackendKind(hostBackend).self());
}

Communicator Communicator::over(std::shared_ptr<HostBackend> host) {
  SLUICE_CHECK(host != nullptr, CommError, "Communicator::over: no backend");
  return Communicator(std::move(host));
}

namespace {
std::atomic<const char*> timeoutSetting{"cluster.timeout_s"};
}  // namespace

void Communicator::setWaitTimeout(double seconds, const char* setting) {
  timeoutSeconds.store(std::max(0.0, seconds));
  timeoutSetting.store(setting);
}
double Communicator::waitTimeout() { return timeoutSeconds.load(); }
const char* Communicator::waitTimeoutSetting() { return timeoutSetting.load(); }

void Communicator::abortAll(int code) {
  if (initialized()) MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

Communicator::Communicator(std::shared_ptr<HostBackend> host, std::shared_ptr<CommBackend> device)
    : host_(std::move(host)), device_(std::move(device)) {}

int Communicator::rank() const { return host_ ? host_->rank() : 0; }
int Communicator::size() const { return host_ ? host_->size() : 0; }

CommBackendKind Communicator::deviceBackend() const { return device_ ? device_->kind() : CommBackendKind::Mpi; }

CommBackend& Communicator::backendFor(const torch::Tensor& tensor) const {
  SLUICE_CHECK(host_ != nullptr, CommError, "communication on an empty Communicator");
  if (tensor.is_cuda() && device_) return *device_;
  return *host_;
}

Communicator Communicator::split(int color, int key) const {
  Communicator out(host_->split(color, key));
  if (device_) return out.withDeviceBackend(device_->kind(), deviceOf_, pointToPoint_);
  return out;
}

Communicator Communicator::withDeviceBackend(CommBackendKind kind, c10::Device device, bool pointToPoint) const {
  SLUICE_CHECK(host_ != nullptr, CommError, "withDeviceBackend on an empty Communicator");
  Communicator out(host_);
  out.deviceOf_ = device;
  out.pointToPoint_ = pointToPoint;
  if (kind == CommBackendKind::Mpi) return out;
  const auto factory = deviceBackendFactory(kind);
  SLUICE_CHECK(factory, CommError,
               "the " << commBackendName(kind) << " backend needs a CUDA build of Sluice (this one was built without "
                      << "the CUDA toolkit); use job.backend: mpi");
  out.device_ = factory(*host_, device, pointToPoint);
  return out;
}

std::string Communicator::peerName(int r) const { return host_->peerName(r); }

void Communicator::send(const torch::Tensor& tensor, int dst, int tag, bool requiresGrad) const {
  isend(tensor, dst, tag, requiresGrad).wait();
}

Work Communicator::isend(const torch::Tensor& tensor, int dst, int tag, bool requiresGrad) const {
  checkTensor(tensor, "send");
  checkTag(tag, "send");
  auto& backend = backendFor(tensor);
  sentBytes.fetch_add(static_cast<int64_t>(tensor.nbytes()));
  return Work(backend.isend(tensor, requiresGrad, dst, tag),
              "send to " + peerName(dst) + " (tag " + std::to_string(tag) + ")");
}

Received Communicator::recv(const TensorSpec& expected, int src, int tag) const {
  return irecv(expected, src, tag).wait();
}

RecvWork Communicator::irecv(const TensorSpec& expected, int src, int tag) const {
  checkTag(tag, "recv");
  auto tensor = torch::empty(expected.shape, torch::TensorOptions().dtype(expected.dtype).device(expected.device));
  auto& backend = backendFor(tensor);
  auto requiresGrad = std::make_shared<std::optional<bool>>();
  receivedBytes.fetch_add(static_cast<int64_t>(tensor.nbytes()));
  Work work(backend.irecv(tensor, requiresGrad, src, tag),
            "recv from " + peerName(src) + " (tag " + std::to_string(tag) + ")");
  return RecvWork(std::move(work), tensor, requiresGrad);
}

Received Communicator::recvAny(int src, int tag) const {
  checkTag(tag, "recv");
  auto header = std::make_shared<P2pHeader>();
  const std::string from = "recv from " + peerName(src) + " (tag " + std::to_string(tag) + ")";
  Work(host_->irecvHeader(header, src, tag), from).wait();
  const auto& h = header->words;
  Received r;
  r.tensor = torch::empty(std::vector<int64_t>(h.begin() + 5, h.begin() + 5 + h[4]),
                          torch::TensorOptions().dtype(static_cast<c10::ScalarType>(h[1])));
  r.requiresGrad = header->requiresGrad();
  receivedBytes.fetch_add(static_cast<int64_t>(r.tensor.nbytes()));
  Work(host_->irecvBytes(r.tensor, src, tag), from).wait();
  return r;
}

void Communicator::allReduce(torch::Tensor& tensor, ReduceOp op) const { iallReduce(tensor, op).wait(); }

Work Communicator::iallReduce(torch::Tensor& tensor, ReduceOp op) const {
  checkTensor(tensor, "allReduce");
  collectiveBytes.fetch_add(static_cast<int64_t>(tensor.nbytes()));
  return Work(backendFor(tensor).iallReduce(tensor, op), "allReduce over " + std::to_string(size()) + " ranks");
}

void Communicator::reduceScatter(const torch::Tensor& input, torch::Tensor& output, ReduceOp op) const {
  ireduceScatter(input, output, op).wait();
}

Work Communicator::ireduceScatter(const torch::Tensor& input, torch::Tensor& output, ReduceOp op) const {
  checkTensor(input, "reduceScatter");
  checkTensor(output, "reduceScatter");
  SLUICE_CHECK(input.numel() == output.numel() * size(), CommError,
               "reduceScatter: input has " << input.numel() << " elements but output has " << output.numel()
                                           << " x " << size() << " ranks = " << output.numel() * size());
  checkPair(input, output, "reduceScatter");
  collectiveBytes.fetch_add(static_cast<int64_t>(input.nbytes()));
  return Work(backendFor(input).ireduceScatter(input, output, op),
              "reduceScatter over " + std::to_string(size()) + " ranks");
}

void Communicator::allGather(const torch::Tensor& input, torch::Tensor& output) const {
  iallGather(input, output).wait();
}

Work Communicator::iallGather(const torch::Tensor& input, torch::Tensor& output) const {
  checkTensor(input, "allGather");
  checkTensor(output, "allGather");
  SLUICE_CHECK(output.numel() == input.numel() * size(), CommError,
               "allGather: output has " << output.numel() << " elements but input has " << input.numel() << " x "
                                        << size() << " ranks = " << input.numel() * size());
  checkPair(input, output, "allGather");
  collectiveBytes.fetch_add(static_cast<int64_t>(output.nbytes()));
  return Work(backendFor(input).iallGather(input, output), "allGather over " + std::to_string(size()) + " ranks");
}

void Communicator::broadcast(torch::Tensor& tensor, int root) const {
  checkTensor(tensor, "broadcast");
  Work(backendFor(tensor).ibroadcast(tensor, root),
       "broadcast from rank " + std::to_string(root) + " over " + std::to_string(size()) + " ranks")
      .wait();
}

void Communicator::barrier() const {
  SLUICE_CHECK(host_ != nullptr, CommError, "barrier on an empty Communicator");
  Work(host_->ibarrier(), "barrier over " + std::to_string(size()) + " ranks").wait();
}

}  // namespace sluice
