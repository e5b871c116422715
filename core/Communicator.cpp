#include "core/Communicator.h"

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <thread>
#include <sstream>

#include "core/Error.h"
#include "core/SystemInfo.h"
#include "core/Log.h"

namespace sluice {
namespace {

// Seconds a wait polls back to back (yielding) before it sleeps (Note
// [waiting]): 200 ms, or 0.5 ms when this machine runs more ranks than it has
// cores (Open MPI's OMPI_COMM_WORLD_LOCAL_SIZE), where a polling rank would
// take CPU time from the ranks it waits for.
double busyPollSeconds() {
  static const double seconds = hostOversubscribed() ? 0.0005 : 0.2;
  return seconds;
}

// Note [p2p header]
// Every p2p message is two MPI messages on the same (peer, tag): a fixed-size
// int64 header {magic, dtype, requiresGrad, ndim, dims...} on tag 2t and the
// raw bytes on tag 2t+1. MPI does not overtake messages with equal
// (source, tag, communicator), so the header always describes the data.
constexpr int64_t kMagic = 0x5e1ce;
constexpr int kMaxDims = 12;
constexpr int kHeaderLen = 4 + kMaxDims;

std::atomic<double> timeoutSeconds{0};
thread_local std::vector<std::string> activities;

// Pending operations given up on (Note [abandoned work]): never freed.
std::mutex abandonedMutex;
std::vector<std::pair<std::vector<MPI_Request>, std::vector<torch::Tensor>>>& abandoned() {
  static auto* list = new std::vector<std::pair<std::vector<MPI_Request>, std::vector<torch::Tensor>>>();
  return *list;
}

int worldRank() {
  int init = 0, fin = 0, rank = -1;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (init && !fin) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

void mpiCheck(int rc, const std::string& op, int rank) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  const std::string during = CommActivity::current();
  throw CommError("MPI " + op + " failed on rank " + std::to_string(rank) + (during.empty() ? "" : " (" + during + ")") +
                  ": " + std::string(text, len));
}

MPI_Datatype mpiType(c10::ScalarType dtype, const char* op) {
  switch (dtype) {
    case c10::kFloat: return MPI_FLOAT;
    case c10::kDouble: return MPI_DOUBLE;
    case c10::kInt: return MPI_INT32_T;
    case c10::kLong: return MPI_INT64_T;
    default:
      throw CommError(std::string(op) + ": dtype " + c10::toString(dtype) +
                      " is not supported for reductions (use float, double, int32 or int64)");
  }
}

MPI_Op mpiOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Average: return MPI_SUM;
    case ReduceOp::Max: return MPI_MAX;
    case ReduceOp::Min: return MPI_MIN;
  }
  return MPI_SUM;
}

void checkTensor(const torch::Tensor& t, const char* op) {
  SLUICE_CHECK(t.defined(), CommError, op << ": tensor is undefined");
  SLUICE_CHECK(t.device().is_cpu(), CommError, op << ": expected a CPU tensor, got " << t.device());
  SLUICE_CHECK(t.is_contiguous(), CommError, op << ": tensor must be contiguous");
  SLUICE_CHECK(t.nbytes() <= static_cast<size_t>(INT32_MAX), CommError,
               op << ": tensor of " << t.nbytes() << " bytes exceeds the 2 GiB per-message limit");
}

std::string describeHeader(const int64_t* h) {
  std::ostringstream os;
  os << c10::toString(static_cast<c10::ScalarType>(h[1])) << "[";
  for (int64_t i = 0; i < h[3]; ++i) os << (i ? "," : "") << h[4 + i];
  os << "]";
  return os.str();
}

std::shared_ptr<int64_t> makeHeader(const torch::Tensor& t, bool requiresGrad) {
  SLUICE_CHECK(t.dim() <= kMaxDims, CommError, "send: tensors above " << kMaxDims << " dims are not supported");
  std::shared_ptr<int64_t> h(new int64_t[kHeaderLen](), std::default_delete<int64_t[]>());
  h.get()[0] = kMagic;
  h.get()[1] = static_cast<int64_t>(t.scalar_type());
  h.get()[2] = requiresGrad ? 1 : 0;
  h.get()[3] = t.dim();
  for (int64_t i = 0; i < t.dim(); ++i) h.get()[4 + i] = t.size(i);
  return h;
}

void finishReduce(torch::Tensor& t, ReduceOp op, int size) {
  if (op == ReduceOp::Average) {
    if (c10::isFloatingType(t.scalar_type())) {
      t.div_(size);
    } else {
      t.div_(size, "trunc");
    }
  }
}

}  // namespace

std::string TensorSpec::describe() const {
  std::ostringstream os;
  os << c10::toString(dtype) << "[";
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? "," : "") << shape[i];
  os << "]";
  return os.str();
}

// ---------------- CommActivity ----------------

CommActivity::CommActivity(std::string what) { activities.push_back(std::move(what)); }
CommActivity::~CommActivity() { activities.pop_back(); }

std::string CommActivity::current() {
  std::string out;
  for (auto& a : activities) out += (out.empty() ? "" : ", ") + a;
  return out;
}

// ---------------- Work ----------------

Work::Work(std::vector<MPI_Request> requests, std::vector<torch::Tensor> keepAlive,
           std::function<void()> onComplete, std::string what)
    : requests_(std::move(requests)), keepAlive_(std::move(keepAlive)), onComplete_(std::move(onComplete)),
      what_(std::move(what)) {}

void Work::abandon() {
  std::lock_guard<std::mutex> lock(abandonedMutex);
  abandoned().emplace_back(std::move(requests_), std::move(keepAlive_));
  requests_.clear();
  keepAlive_.clear();
  onComplete_ = nullptr;
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
    requests_ = std::move(other.requests_);
    keepAlive_ = std::move(other.keepAlive_);
    onComplete_ = std::move(other.onComplete_);
    what_ = std::move(other.what_);
    other.requests_.clear();
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

namespace {

// MPI_ERR_IN_STATUS says only that some request failed: the first real error.
int firstError(int rc, const std::vector<MPI_Status>& statuses) {
  if (rc != MPI_ERR_IN_STATUS) return rc;
  for (auto& st : statuses) {
    if (st.MPI_ERROR != MPI_SUCCESS && st.MPI_ERROR != MPI_ERR_PENDING) return st.MPI_ERROR;
  }
  return rc;
}

}  // namespace

void Work::fail(int rc) {
  // Some requests may still be live in MPI after an error: never free their buffers.
  const std::string what = what_;
  abandon();
  mpiCheck(rc, what, worldRank());
  throw CommError("MPI " + what + " failed on rank " + std::to_string(worldRank()));
}

void Work::finish() {
  requests_.clear();
  auto done = std::move(onComplete_);
  onComplete_ = nullptr;
  keepAlive_.clear();
  if (done) done();
}

namespace {
std::atomic<int64_t> waitNanos{0}, sentBytes{0}, receivedBytes{0}, collectiveBytes{0};

// Adds the time from construction to destruction to waitNanos.
struct WaitTimer {
  std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
  ~WaitTimer() {
    waitNanos.fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count());
  }
};
}  // namespace

Communicator::Traffic Communicator::traffic() {
  return {static_cast<double>(waitNanos.load()) * 1e-9, sentBytes.load(), receivedBytes.load(), collectiveBytes.load()};
}

void Work::wait() {
  if (requests_.empty()) return;
  WaitTimer timer;
  const double timeout = timeoutSeconds.load();
  const int n = static_cast<int>(requests_.size());
  std::vector<MPI_Status> statuses(requests_.size());
  int rc = MPI_SUCCESS;
  // Always polled, with or without a deadline: MPI_Waitall in Open MPI 4.1
  // can miss the completion of a request that fails (a truncated receive
  // whose message arrived before it was posted) when ranks share cores, and
  // then never returns; MPI_Testall sees it.
  {
    // Poll, so that a peer that never answers is noticed. Note [waiting]:
    // for the first 200 ms (busyPollSeconds) poll back to back, yielding the
    // core between polls (a rank that waits has nothing else to run; when
    // ranks share cores, the yield lets the peer we wait for run). Pipeline
    // waits are a peer's forward or backward, up to tens of ms where stages
    // are unequal, and a message is taken within microseconds of its
    // arrival. Longer waits (collectives behind a slow rank, a stopped peer)
    // sleep, 50 us doubling up to 1 ms, so an idle rank costs no CPU.
    // (Sleeping from the first 0.5 ms on added up to 1 ms to every wait: the
    // profile measured a 0.94 ms one-way latency for 64 bytes, and each
    // pipeline hop paid it. Sleeping after 10 ms made a light stage that
    // waits ~35 ms per action compute ~11% slower than polling through the
    // wait: on a VM an idle core is halted and its caches go to other work.)
    const auto t0 = std::chrono::steady_clock::now();
    int done = 0;
    int64_t nap = 50;
    while (!done) {
      rc = MPI_Testall(n, requests_.data(), &done, statuses.data());
      if (rc != MPI_SUCCESS || done) break;
      const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (timeout > 0 && waited > timeout) {
        const std::string what = what_, during = CommActivity::current();
        abandon();
        char buf[64];
        std::snprintf(buf, sizeof(buf), "%g", timeout);
        throw CommError("timed out after " + std::string(buf) + " s waiting for " + what +
                        (during.empty() ? "" : " (" + during + ")") + " on rank " + std::to_string(worldRank()) +
                        ": the peer did not answer (it may have failed, stopped or be stuck); raise cluster.timeout_s "
                        "if such waits are expected");
      }
      if (waited < busyPollSeconds()) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(nap));
        nap = std::min<int64_t>(1000, nap * 2);
      }
    }
  }
  if (rc != MPI_SUCCESS) fail(firstError(rc, statuses));
  finish();
}

bool Work::test() {
  if (requests_.empty()) return true;
  int done = 0;
  std::vector<MPI_Status> statuses(requests_.size());
  int rc = MPI_Testall(static_cast<int>(requests_.size()), requests_.data(), &done, statuses.data());
  if (rc != MPI_SUCCESS) fail(firstError(rc, statuses));
  if (!done) return false;
  finish();
  return true;
}

Received RecvWork::wait() {
  SLUICE_CHECK(result_ != nullptr, CommError, "RecvWork::wait on an empty handle");
  work_.wait();
  Received r = *result_;
  result_.reset();
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

Communicator Communicator::world() {
  SLUICE_CHECK(initialized(), CommError, "Communicator::world() called before Communicator::initialize()");
  return Communicator(std::shared_ptr<MPI_Comm>(new MPI_Comm(MPI_COMM_WORLD)));
}

Communicator Communicator::self() {
  SLUICE_CHECK(initialized(), CommError, "Communicator::self() called before Communicator::initialize()");
  return Communicator(std::shared_ptr<MPI_Comm>(new MPI_Comm(MPI_COMM_SELF)));
}

void Communicator::setWaitTimeout(double seconds) { timeoutSeconds.store(std::max(0.0, seconds)); }
double Communicator::waitTimeout() { return timeoutSeconds.load(); }

void Communicator::abortAll(int code) {
  if (initialized()) MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

Communicator::Communicator(std::shared_ptr<MPI_Comm> comm) : comm_(std::move(comm)) {
  mpiCheck(MPI_Comm_rank(*comm_, &rank_), "MPI_Comm_rank", -1);
  mpiCheck(MPI_Comm_size(*comm_, &size_), "MPI_Comm_size", rank_);
}

Communicator Communicator::split(int color, int key) const {
  MPI_Comm* out = new MPI_Comm(MPI_COMM_NULL);
  int rc = MPI_Comm_split(handle(), color, key < 0 ? rank_ : key, out);
  if (rc != MPI_SUCCESS) delete out;
  mpiCheck(rc, "MPI_Comm_split", rank_);
  // Freed when the last copy goes (only while MPI is still up).
  std::shared_ptr<MPI_Comm> owned(out, [](MPI_Comm* c) {
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin && *c != MPI_COMM_NULL) MPI_Comm_free(c);
    delete c;
  });
  return Communicator(owned);
}

std::string Communicator::peerName(int r) const {
  std::string name = "rank " + std::to_string(r);
  if (!comm_ || *comm_ == MPI_COMM_WORLD) return name;
  MPI_Group mine = MPI_GROUP_NULL, world = MPI_GROUP_NULL;
  int worldRank = MPI_UNDEFINED;
  if (MPI_Comm_group(handle(), &mine) == MPI_SUCCESS && MPI_Comm_group(MPI_COMM_WORLD, &world) == MPI_SUCCESS) {
    MPI_Group_translate_ranks(mine, 1, &r, world, &worldRank);
  }
  if (mine != MPI_GROUP_NULL) MPI_Group_free(&mine);
  if (world != MPI_GROUP_NULL) MPI_Group_free(&world);
  if (worldRank != MPI_UNDEFINED && worldRank != r) name += " (world rank " + std::to_string(worldRank) + ")";
  return name;
}

void Communicator::send(const torch::Tensor& tensor, int dst, int tag, bool requiresGrad) const {
  isend(tensor, dst, tag, requiresGrad).wait();
}

Work Communicator::isend(const torch::Tensor& tensor, int dst, int tag, bool requiresGrad) const {
  checkTensor(tensor, "send");
  SLUICE_CHECK(tag >= 0 && tag <= kMaxTag, CommError, "send: tag " << tag << " outside [0, " << kMaxTag << "]");
  auto header = makeHeader(tensor, requiresGrad);
  std::vector<MPI_Request> reqs(2);
  mpiCheck(MPI_Isend(header.get(), kHeaderLen, MPI_INT64_T, dst, 2 * tag, handle(), &reqs[0]), "MPI_Isend(header)", rank_);
  mpiCheck(MPI_Isend(tensor.data_ptr(), static_cast<int>(tensor.nbytes()), MPI_BYTE, dst, 2 * tag + 1, handle(), &reqs[1]),
           "MPI_Isend", rank_);
  sentBytes.fetch_add(static_cast<int64_t>(tensor.nbytes()));
  return Work(std::move(reqs), {tensor}, [header] {},
              "send to " + peerName(dst) + " (tag " + std::to_string(tag) + ")");
}

Received Communicator::recv(const TensorSpec& expected, int src, int tag) const {
  return irecv(expected, src, tag).wait();
}

RecvWork Communicator::irecv(const TensorSpec& expected, int src, int tag) const {
  SLUICE_CHECK(tag >= 0 && tag <= kMaxTag, CommError, "recv: tag " << tag << " outside [0, " << kMaxTag << "]");
  auto result = std::make_shared<Received>();
  result->tensor = torch::empty(expected.shape, torch::TensorOptions().dtype(expected.dtype));
  std::shared_ptr<int64_t> header(new int64_t[kHeaderLen](), std::default_delete<int64_t[]>());
  std::vector<MPI_Request> reqs(2);
  mpiCheck(MPI_Irecv(header.get(), kHeaderLen, MPI_INT64_T, src, 2 * tag, handle(), &reqs[0]), "MPI_Irecv(header)", rank_);
  receivedBytes.fetch_add(static_cast<int64_t>(result->tensor.nbytes()));
  mpiCheck(MPI_Irecv(result->tensor.data_ptr(), static_cast<int>(result->tensor.nbytes()), MPI_BYTE, src, 2 * tag + 1,
                     handle(), &reqs[1]),
           "MPI_Irecv", rank_);
  int myRank = rank_;
  std::string want = expected.describe();
  auto check = [header, result, expected, src, tag, myRank, want] {
    const int64_t* h = header.get();
    bool same = h[0] == kMagic && h[1] == static_cast<int64_t>(expected.dtype) &&
                h[3] == static_cast<int64_t>(expected.shape.size());
    for (size_t i = 0; same && i < expected.shape.size(); ++i) same = h[4 + i] == expected.shape[i];
    SLUICE_CHECK(same, CommError,
                 "rank " << myRank << " received from rank " << src << " (tag " << tag << ") a tensor "
                         << (h[0] == kMagic ? describeHeader(h) : std::string("with a corrupt header"))
                         << " but expected " << want);
    result->requiresGrad = h[2] != 0;
  };
  Work work(std::move(reqs), {result->tensor}, check,
            "recv from " + peerName(src) + " (tag " + std::to_string(tag) + ")");
  return RecvWork(std::move(work), result);
}

Received Communicator::recvAny(int src, int tag) const {
  auto header = torch::empty({kHeaderLen}, torch::kInt64);
  const std::string from = "recv from " + peerName(src) + " (tag " + std::to_string(tag) + ")";
  MPI_Request req;
  mpiCheck(MPI_Irecv(header.data_ptr(), kHeaderLen, MPI_INT64_T, src, 2 * tag, handle(), &req), "MPI_Irecv(header)",
           rank_);
  Work({req}, {header}, nullptr, from).wait();
  const int64_t* h = header.data_ptr<int64_t>();
  SLUICE_CHECK(h[0] == kMagic, CommError, "rank " << rank_ << " received a corrupt header from rank " << src);
  std::vector<int64_t> shape(h + 4, h + 4 + h[3]);
  Received r;
  r.tensor = torch::empty(shape, torch::TensorOptions().dtype(static_cast<c10::ScalarType>(h[1])));
  r.requiresGrad = h[2] != 0;
  receivedBytes.fetch_add(static_cast<int64_t>(r.tensor.nbytes()));
  mpiCheck(MPI_Irecv(r.tensor.data_ptr(), static_cast<int>(r.tensor.nbytes()), MPI_BYTE, src, 2 * tag + 1, handle(),
                     &req),
           "MPI_Irecv", rank_);
  Work({req}, {r.tensor}, nullptr, from).wait();
  return r;
}

void Communicator::allReduce(torch::Tensor& tensor, ReduceOp op) const { iallReduce(tensor, op).wait(); }

Work Communicator::iallReduce(torch::Tensor& tensor, ReduceOp op) const {
  checkTensor(tensor, "allReduce");
  collectiveBytes.fetch_add(static_cast<int64_t>(tensor.nbytes()));
  MPI_Request req;
  mpiCheck(MPI_Iallreduce(MPI_IN_PLACE, tensor.data_ptr(), static_cast<int>(tensor.numel()),
                          mpiType(tensor.scalar_type(), "allReduce"), mpiOp(op), handle(), &req),
           "MPI_Iallreduce", rank_);
  torch::Tensor t = tensor;
  int n = size_;
  return Work({req}, {tensor}, [t, op, n]() mutable { finishReduce(t, op, n); },
              "allReduce over " + std::to_string(size_) + " ranks");
}

void Communicator::reduceScatter(const torch::Tensor& input, torch::Tensor& output, ReduceOp op) const {
  ireduceScatter(input, output, op).wait();
}

Work Communicator::ireduceScatter(const torch::Tensor& input, torch::Tensor& output, ReduceOp op) const {
  checkTensor(input, "reduceScatter");
  checkTensor(output, "reduceScatter");
  SLUICE_CHECK(input.numel() == output.numel() * size_, CommError,
               "reduceScatter: input has " << input.numel() << " elements but output has " << output.numel()
                                           << " x " << size_ << " ranks = " << output.numel() * size_);
  SLUICE_CHECK(input.scalar_type() == output.scalar_type(), CommError, "reduceScatter: input and output dtypes differ");
  collectiveBytes.fetch_add(static_cast<int64_t>(input.nbytes()));
  MPI_Request req;
  mpiCheck(MPI_Ireduce_scatter_block(input.data_ptr(), output.data_ptr(), static_cast<int>(output.numel()),
                                     mpiType(input.scalar_type(), "reduceScatter"), mpiOp(op), handle(), &req),
           "MPI_Ireduce_scatter_block", rank_);
  torch::Tensor out = output;
  int n = size_;
  return Work({req}, {input, output}, [out, op, n]() mutable { finishReduce(out, op, n); },
              "reduceScatter over " + std::to_string(size_) + " ranks");
}

void Communicator::allGather(const torch::Tensor& input, torch::Tensor& output) const {
  iallGather(input, output).wait();
}

Work Communicator::iallGather(const torch::Tensor& input, torch::Tensor& output) const {
  checkTensor(input, "allGather");
  checkTensor(output, "allGather");
  SLUICE_CHECK(output.numel() == input.numel() * size_, CommError,
               "allGather: output has " << output.numel() << " elements but input has " << input.numel() << " x "
                                        << size_ << " ranks = " << input.numel() * size_);
  SLUICE_CHECK(input.scalar_type() == output.scalar_type(), CommError, "allGather: input and output dtypes differ");
  collectiveBytes.fetch_add(static_cast<int64_t>(output.nbytes()));
  MPI_Request req;
  mpiCheck(MPI_Iallgather(input.data_ptr(), static_cast<int>(input.nbytes()), MPI_BYTE, output.data_ptr(),
                          static_cast<int>(input.nbytes()), MPI_BYTE, handle(), &req),
           "MPI_Iallgather", rank_);
  return Work({req}, {input, output}, nullptr, "allGather over " + std::to_string(size_) + " ranks");
}

void Communicator::broadcast(torch::Tensor& tensor, int root) const {
  checkTensor(tensor, "broadcast");
  MPI_Request req;
  mpiCheck(MPI_Ibcast(tensor.data_ptr(), static_cast<int>(tensor.nbytes()), MPI_BYTE, root, handle(), &req), "MPI_Ibcast",
           rank_);
  Work({req}, {tensor}, nullptr, "broadcast from rank " + std::to_string(root) + " over " + std::to_string(size_) +
                                     " ranks").wait();
}

void Communicator::barrier() const {
  MPI_Request req;
  mpiCheck(MPI_Ibarrier(handle(), &req), "MPI_Ibarrier", rank_);
  Work({req}, {}, nullptr, "barrier over " + std::to_string(size_) + " ranks").wait();
}

}  // namespace sluice
