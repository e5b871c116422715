#include "core/MpiBackend.h"

#include <mutex>
#include <sstream>

#include "core/CommActivity.h"
#include "core/Error.h"
#include "core/TransferGuard.h"

namespace sluice {

int mpiWorldRank() {
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

namespace {

// Operations given up on (Note [abandoned work]): never freed.
std::mutex abandonedMutex;
std::vector<std::pair<std::vector<MPI_Request>, std::vector<torch::Tensor>>>& abandoned() {
  static auto* list = new std::vector<std::pair<std::vector<MPI_Request>, std::vector<torch::Tensor>>>();
  return *list;
}

// MPI_ERR_IN_STATUS says only that some request failed: the first real error.
int firstError(int rc, const std::vector<MPI_Status>& statuses) {
  if (rc != MPI_ERR_IN_STATUS) return rc;
  for (auto& st : statuses) {
    if (st.MPI_ERROR != MPI_SUCCESS && st.MPI_ERROR != MPI_ERR_PENDING) return st.MPI_ERROR;
  }
  return rc;
}

class MpiOp final : public PendingOp {
 public:
  MpiOp(std::vector<MPI_Request> requests, std::vector<torch::Tensor> keepAlive, std::function<void()> onComplete,
        std::string what)
      : requests_(std::move(requests)), keepAlive_(std::move(keepAlive)), onComplete_(std::move(onComplete)),
        what_(std::move(what)) {}
  ~MpiOp() override {
    if (!requests_.empty()) abandon();  // never free what MPI may still write into
  }

  bool test() override {
    if (requests_.empty()) return true;
    int done = 0;
    std::vector<MPI_Status> statuses(requests_.size());
    // Always MPI_Testall, never MPI_Waitall: Open MPI 4.1's Waitall can miss
    // the completion of a request that fails (a truncated receive whose
    // message arrived before it was posted) when ranks share cores.
    const int rc = MPI_Testall(static_cast<int>(requests_.size()), requests_.data(), &done, statuses.data());
    if (rc != MPI_SUCCESS) {
      const std::string what = what_;
      abandon();  // some requests may still be live in MPI
      mpiCheck(firstError(rc, statuses), what, mpiWorldRank());
    }
    if (!done) return false;
    requests_.clear();
    auto complete = std::move(onComplete_);
    onComplete_ = nullptr;
    try {
      if (complete) complete();
    } catch (...) {
      keepAlive_.clear();
      throw;
    }
    keepAlive_.clear();
    return true;
  }

  void abandon() override {
    std::lock_guard<std::mutex> lock(abandonedMutex);
    abandoned().emplace_back(std::move(requests_), std::move(keepAlive_));
    requests_.clear();
    keepAlive_.clear();
    onComplete_ = nullptr;
  }

 private:
  std::vector<MPI_Request> requests_;
  std::vector<torch::Tensor> keepAlive_;
  std::function<void()> onComplete_;
  std::string what_;
};

MPI_Datatype mpiType(c10::ScalarType dtype, const char* op) {
  switch (dtype) {
    case c10::kFloat: return MPI_FLOAT;
    case c10::kDouble: return MPI_DOUBLE;
    case c10::kInt: return MPI_INT32_T;
    case c10::kLong: return MPI_INT64_T;
    default:
      throw CommError(std::string(op) + ": dtype " + c10::toString(dtype) +
                      " is not supported for reductions over MPI (use float, double, int32 or int64)");
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

void finishReduce(torch::Tensor& t, ReduceOp op, int size) {
  if (op != ReduceOp::Average) return;
  if (c10::isFloatingType(t.scalar_type())) {
    t.div_(size);
  } else {
    t.div_(size, "trunc");
  }
}

int count(const torch::Tensor& t) { return static_cast<int>(t.numel()); }
int bytes(const torch::Tensor& t) { return static_cast<int>(t.nbytes()); }

// Note [host staging]: MPI moves host memory. A CUDA tensor is copied to a
// host buffer (pinned, so the copy back can be asynchronous) before MPI
// reads it, and what MPI wrote is copied back to the device on completion,
// on the caller's current stream. The copy out blocks the host until the
// device has produced the tensor. These copies are the communicator's, so
// the transfer guard counts them apart (TransferScope "comm").
torch::Tensor hostBuffer(const torch::Tensor& like) {
  auto options = like.options().device(c10::kCPU);
  if (like.is_cuda()) options = options.pinned_memory(true);
  return torch::empty(like.sizes(), options);
}

torch::Tensor stageOut(const torch::Tensor& t) {
  if (!t.is_cuda()) return t;
  TransferScope scope(TransferScope::Kind::Comm);
  auto host = hostBuffer(t);
  host.copy_(t);
  return host;
}

void stageIn(const torch::Tensor& device, const torch::Tensor& host) {
  if (!device.is_cuda()) return;
  TransferScope scope(TransferScope::Kind::Comm);
  device.copy_(host, /*non_blocking=*/true);
}

}  // namespace

MpiBackend::MpiBackend(std::shared_ptr<MPI_Comm> comm) : comm_(std::move(comm)) {
  mpiCheck(MPI_Comm_rank(*comm_, &rank_), "MPI_Comm_rank", -1);
  mpiCheck(MPI_Comm_size(*comm_, &size_), "MPI_Comm_size", rank_);
}

std::shared_ptr<MpiBackend> MpiBackend::world() {
  return std::make_shared<MpiBackend>(std::make_shared<MPI_Comm>(MPI_COMM_WORLD));
}

std::shared_ptr<MpiBackend> MpiBackend::self() {
  return std::make_shared<MpiBackend>(std::make_shared<MPI_Comm>(MPI_COMM_SELF));
}

std::shared_ptr<HostBackend> MpiBackend::split(int color, int key) const {
  // Owned before MPI fills it in; freed when the last holder goes (only
  // while MPI is still up, and not when the split failed).
  std::shared_ptr<MPI_Comm> owned(new MPI_Comm(MPI_COMM_NULL), [](MPI_Comm* c) {
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin && *c != MPI_COMM_NULL) MPI_Comm_free(c);
    delete c;
  });
  mpiCheck(MPI_Comm_split(*comm_, color, key < 0 ? rank_ : key, owned.get()), "MPI_Comm_split", rank_);
  return std::make_shared<MpiBackend>(owned);
}

std::string MpiBackend::peerName(int r) const {
  std::string name = "rank " + std::to_string(r);
  if (*comm_ == MPI_COMM_WORLD) return name;
  MPI_Group mine = MPI_GROUP_NULL, world = MPI_GROUP_NULL;
  int worldRank = MPI_UNDEFINED;
  if (MPI_Comm_group(*comm_, &mine) == MPI_SUCCESS && MPI_Comm_group(MPI_COMM_WORLD, &world) == MPI_SUCCESS) {
    MPI_Group_translate_ranks(mine, 1, &r, world, &worldRank);
  }
  if (mine != MPI_GROUP_NULL) MPI_Group_free(&mine);
  if (world != MPI_GROUP_NULL) MPI_Group_free(&world);
  if (worldRank != MPI_UNDEFINED && worldRank != r) name += " (world rank " + std::to_string(worldRank) + ")";
  return name;
}

// Note [p2p header]: on MPI the header goes on tag 2t and the bytes on 2t+1;
// MPI does not overtake messages with equal (source, tag, communicator), so
// the header always describes the bytes that follow.
std::unique_ptr<PendingOp> MpiBackend::isend(const torch::Tensor& tensor, bool requiresGrad, int dst, int tag) {
  auto header = std::make_shared<P2pHeader>(P2pHeader::of(tensor, requiresGrad, tag));
  auto host = stageOut(tensor);
  std::vector<MPI_Request> reqs(2);
  mpiCheck(MPI_Isend(header->words.data(), P2pHeader::kLength, MPI_INT64_T, dst, 2 * tag, *comm_, &reqs[0]),
           "MPI_Isend(header)", rank_);
  mpiCheck(MPI_Isend(host.data_ptr(), bytes(host), MPI_BYTE, dst, 2 * tag + 1, *comm_, &reqs[1]), "MPI_Isend", rank_);
  return std::make_unique<MpiOp>(std::move(reqs), std::vector<torch::Tensor>{host}, [header] {},
                                 "send to " + peerName(dst) + " (tag " + std::to_string(tag) + ")");
}

std::unique_ptr<PendingOp> MpiBackend::irecv(const torch::Tensor& into,
                                             std::shared_ptr<std::optional<bool>> requiresGrad, int src, int tag) {
  auto header = std::make_shared<P2pHeader>();
  auto host = into.is_cuda() ? hostBuffer(into) : into;
  std::vector<MPI_Request> reqs(2);
  mpiCheck(MPI_Irecv(header->words.data(), P2pHeader::kLength, MPI_INT64_T, src, 2 * tag, *comm_, &reqs[0]),
           "MPI_Irecv(header)", rank_);
  mpiCheck(MPI_Irecv(host.data_ptr(), bytes(host), MPI_BYTE, src, 2 * tag + 1, *comm_, &reqs[1]), "MPI_Irecv", rank_);
  const int me = rank_;
  auto check = [header, requiresGrad, into, host, src, tag, me] {
    SLUICE_CHECK(header->matches(into, tag), CommError,
                 "rank " << me << " received from rank " << src << " (tag " << tag << ") a tensor "
                         << header->describe() << " but expected " << P2pHeader::of(into, false, tag).describe());
    *requiresGrad = header->requiresGrad();
    stageIn(into, host);
  };
  return std::make_unique<MpiOp>(std::move(reqs), std::vector<torch::Tensor>{host}, check,
                                 "recv from " + peerName(src) + " (tag " + std::to_string(tag) + ")");
}

std::unique_ptr<PendingOp> MpiBackend::irecvHeader(std::shared_ptr<P2pHeader> header, int src, int tag) {
  MPI_Request req;
  mpiCheck(MPI_Irecv(header->words.data(), P2pHeader::kLength, MPI_INT64_T, src, 2 * tag, *comm_, &req),
           "MPI_Irecv(header)", rank_);
  const int me = rank_;
  return std::make_unique<MpiOp>(std::vector<MPI_Request>{req}, std::vector<torch::Tensor>{}, [header, src, me] {
    SLUICE_CHECK(header->words[0] == P2pHeader::kMagic, CommError,
                 "rank " << me << " received a corrupt header from rank " << src);
  }, "recv from " + peerName(src) + " (tag " + std::to_string(tag) + ")");
}

std::unique_ptr<PendingOp> MpiBackend::irecvBytes(const torch::Tensor& into, int src, int tag) {
  MPI_Request req;
  mpiCheck(MPI_Irecv(into.data_ptr(), bytes(into), MPI_BYTE, src, 2 * tag + 1, *comm_, &req), "MPI_Irecv", rank_);
  return std::make_unique<MpiOp>(std::vector<MPI_Request>{req}, std::vector<torch::Tensor>{into}, nullptr,
                                 "recv from " + peerName(src) + " (tag " + std::to_string(tag) + ")");
}

std::unique_ptr<PendingOp> MpiBackend::iallReduce(const torch::Tensor& tensor, ReduceOp op) {
  auto host = stageOut(tensor);
  MPI_Request req;
  mpiCheck(MPI_Iallreduce(MPI_IN_PLACE, host.data_ptr(), count(host), mpiType(host.scalar_type(), "allReduce"),
                          mpiOp(op), *comm_, &req),
           "MPI_Iallreduce", rank_);
  const int n = size_;
  torch::Tensor out = tensor;
  return std::make_unique<MpiOp>(std::vector<MPI_Request>{req}, std::vector<torch::Tensor>{host, tensor},
                                 [host, out, op, n]() mutable {
                                   finishReduce(host, op, n);
                                   stageIn(out, host);
                                 },
                                 "allReduce over " + std::to_string(size_) + " ranks");
}

std::unique_ptr<PendingOp> MpiBackend::ireduceScatter(const torch::Tensor& input, const torch::Tensor& output,
                                                      ReduceOp op) {
  auto in = stageOut(input);
  auto out = output.is_cuda() ? hostBuffer(output) : output;
  MPI_Request req;
  mpiCheck(MPI_Ireduce_scatter_block(in.data_ptr(), out.data_ptr(), count(out), mpiType(in.scalar_type(), "reduceScatter"),
                                     mpiOp(op), *comm_, &req),
           "MPI_Ireduce_scatter_block", rank_);
  const int n = size_;
  torch::Tensor device = output;
  return std::make_unique<MpiOp>(std::vector<MPI_Request>{req}, std::vector<torch::Tensor>{in, out, input, output},
                                 [out, device, op, n]() mutable {
                                   finishReduce(out, op, n);
                                   stageIn(device, out);
                                 },
                                 "reduceScatter over " + std::to_string(size_) + " ranks");
}

std::unique_ptr<PendingOp> MpiBackend::iallGather(const torch::Tensor& input, const torch::Tensor& output) {
  auto in = stageOut(input);
  auto out = output.is_cuda() ? hostBuffer(output) : output;
  MPI_Request req;
  mpiCheck(MPI_Iallgather(in.data_ptr(), bytes(in), MPI_BYTE, out.data_ptr(), bytes(in), MPI_BYTE, *comm_, &req),
           "MPI_Iallgather", rank_);
  torch::Tensor device = output;
  return std::make_unique<MpiOp>(std::vector<MPI_Request>{req}, std::vector<torch::Tensor>{in, out, input, output},
                                 [out, device] { stageIn(device, out); },
                                 "allGather over " + std::to_string(size_) + " ranks");
}

std::unique_ptr<PendingOp> MpiBackend::ibroadcast(const torch::Tensor& tensor, int root) {
  auto host = stageOut(tensor);
  MPI_Request req;
  mpiCheck(MPI_Ibcast(host.data_ptr(), bytes(host), MPI_BYTE, root, *comm_, &req), "MPI_Ibcast", rank_);
  torch::Tensor device = tensor;
  return std::make_unique<MpiOp>(std::vector<MPI_Request>{req}, std::vector<torch::Tensor>{host, tensor},
                                 [host, device] { stageIn(device, host); },
                                 "broadcast from rank " + std::to_string(root) + " over " + std::to_string(size_) +
                                     " ranks");
}

std::unique_ptr<PendingOp> MpiBackend::ibarrier() {
  MPI_Request req;
  mpiCheck(MPI_Ibarrier(*comm_, &req), "MPI_Ibarrier", rank_);
  return std::make_unique<MpiOp>(std::vector<MPI_Request>{req}, std::vector<torch::Tensor>{}, nullptr,
                                 "barrier over " + std::to_string(size_) + " ranks");
}

}  // namespace sluice
