#include "core/NcclBackend.h"

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include "core/Communicator.h"
#include "core/Device.h"
#include "core/Error.h"
#include "core/Log.h"
#include "core/CommBackends.h"
#include "core/NcclChannel.h"
#include "core/TransferGuard.h"

namespace sluice {
namespace {

using Clock = std::chrono::steady_clock;

// A received header, copied to pinned host memory; checked by the watchdog.
struct HeaderCheck {
  torch::Tensor host;  // int64[kLength], pinned
  std::shared_ptr<c10::cuda::CUDAEvent> arrived;
  std::vector<int64_t> shape;
  c10::ScalarType dtype;
  int tag = 0;
  std::string from;
  bool checked = false;
};

struct InFlight {
  std::shared_ptr<c10::cuda::CUDAEvent> done;
  std::string what;
  Clock::time_point posted;
  std::shared_ptr<HeaderCheck> header;
};

// Tensors of abandoned operations (Note [abandoned work]): never freed.
std::mutex abandonedMutex;
std::vector<torch::Tensor>& abandonedTensors() {
  static auto* list = new std::vector<torch::Tensor>();
  return *list;
}

class NcclBackend;

class NcclOp final : public PendingOp {
 public:
  NcclOp(std::shared_ptr<NcclBackend> backend, std::shared_ptr<c10::cuda::CUDAEvent> done,
         std::vector<torch::Tensor> touched)
      : backend_(std::move(backend)), done_(std::move(done)), touched_(std::move(touched)) {}
  bool test() override;
  void abandon() override {
    std::lock_guard<std::mutex> lock(abandonedMutex);
    for (auto& t : touched_) abandonedTensors().push_back(t);
    touched_.clear();
  }

 private:
  std::shared_ptr<NcclBackend> backend_;
  std::shared_ptr<c10::cuda::CUDAEvent> done_;
  std::vector<torch::Tensor> touched_;
};

class NcclBackend final : public CommBackend, public std::enable_shared_from_this<NcclBackend> {
 public:
  NcclBackend(int rank, int size, c10::Device device, std::vector<std::string> peerNames)
      : rank_(rank), size_(size), device_(device), peerNames_(std::move(peerNames)) {}
  ~NcclBackend() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    if (watchdog_.joinable()) watchdog_.join();
  }

  CommBackendKind kind() const override { return CommBackendKind::Nccl; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string peerName(int r) const override {
    return r >= 0 && r < static_cast<int>(peerNames_.size()) ? peerNames_[r] : "rank " + std::to_string(r);
  }

  void init(HostBackend& mpi, bool pointToPoint);

  std::unique_ptr<PendingOp> isend(const torch::Tensor& tensor, bool requiresGrad, int dst, int tag) override {
    auto& ch = pairChannel(sendTo_, dst, "send");
    const P2pHeader header = P2pHeader::of(tensor, requiresGrad, tag);
    auto host = torch::empty({P2pHeader::kLength}, torch::TensorOptions().dtype(torch::kLong).pinned_memory(true));
    std::memcpy(host.data_ptr<int64_t>(), header.words.data(), sizeof(header.words));
    auto onDevice = torch::empty({P2pHeader::kLength}, torch::TensorOptions().dtype(torch::kLong).device(device_));
    const std::string what = "send to " + peerName(dst) + " (tag " + std::to_string(tag) + ")";
    return launch(ch, {tensor, onDevice, host}, what, [&](cudaStream_t s) {
      {
        TransferScope scope(TransferScope::Kind::Comm);
        c10::cuda::CUDAStreamGuard onStream(ch.stream());
        onDevice.copy_(host, /*non_blocking=*/true);
      }
      // Peer 1 of the (this rank -> dst) pair communicator is dst.
      ncclCheck(ncclSend(onDevice.data_ptr(), P2pHeader::kLength, ncclInt64, 1, ch.comm(), s), ch.comm(),
                "ncclSend(header) to " + peerName(dst), rank_);
      ncclCheck(ncclSend(tensor.data_ptr(), tensor.nbytes(), ncclUint8, 1, ch.comm(), s), ch.comm(),
                "ncclSend to " + peerName(dst), rank_);
    });
  }

  std::unique_ptr<PendingOp> irecv(const torch::Tensor& into, std::shared_ptr<std::optional<bool>>, int src,
                                   int tag) override {
    auto& ch = pairChannel(recvFrom_, src, "recv");
    auto check = std::make_shared<HeaderCheck>();
    check->host = torch::empty({P2pHeader::kLength}, torch::TensorOptions().dtype(torch::kLong).pinned_memory(true));
    check->arrived = std::make_shared<c10::cuda::CUDAEvent>();
    check->shape = into.sizes().vec();
    check->dtype = into.scalar_type();
    check->tag = tag;
    check->from = peerName(src);
    auto onDevice = torch::empty({P2pHeader::kLength}, torch::TensorOptions().dtype(torch::kLong).device(device_));
    const std::string what = "recv from " + peerName(src) + " (tag " + std::to_string(tag) + ")";
    return launch(ch, {into, onDevice, check->host}, what, [&](cudaStream_t s) {
      // Peer 0 of the (src -> this rank) pair communicator is src.
      ncclCheck(ncclRecv(onDevice.data_ptr(), P2pHeader::kLength, ncclInt64, 0, ch.comm(), s), ch.comm(),
                "ncclRecv(header) from " + peerName(src), rank_);
      {
        TransferScope scope(TransferScope::Kind::Comm);
        c10::cuda::CUDAStreamGuard onStream(ch.stream());
        check->host.copy_(onDevice, /*non_blocking=*/true);
      }
      check->arrived->record(ch.stream());
      ncclCheck(ncclRecv(into.data_ptr(), into.nbytes(), ncclUint8, 0, ch.comm(), s), ch.comm(),
                "ncclRecv from " + peerName(src), rank_);
    }, check);
  }

  std::unique_ptr<PendingOp> iallReduce(const torch::Tensor& t, ReduceOp op) override {
    const auto type = ncclType(t.scalar_type(), "allReduce");
    return launch(main_, {t}, "allReduce over " + std::to_string(size_) + " ranks", [&](cudaStream_t s) {
      ncclCheck(ncclAllReduce(t.data_ptr(), t.data_ptr(), t.numel(), type, ncclOp(op), main_.comm(), s), main_.comm(),
                "ncclAllReduce", rank_);
      average(t, op);
    });
  }

  std::unique_ptr<PendingOp> ireduceScatter(const torch::Tensor& in, const torch::Tensor& out, ReduceOp op) override {
    const auto type = ncclType(in.scalar_type(), "reduceScatter");
    return launch(main_, {in, out}, "reduceScatter over " + std::to_string(size_) + " ranks", [&](cudaStream_t s) {
      ncclCheck(ncclReduceScatter(in.data_ptr(), out.data_ptr(), out.numel(), type, ncclOp(op), main_.comm(), s),
                main_.comm(), "ncclReduceScatter", rank_);
      average(out, op);
    });
  }

  std::unique_ptr<PendingOp> iallGather(const torch::Tensor& in, const torch::Tensor& out) override {
    return launch(main_, {in, out}, "allGather over " + std::to_string(size_) + " ranks", [&](cudaStream_t s) {
      ncclCheck(ncclAllGather(in.data_ptr(), out.data_ptr(), in.nbytes(), ncclUint8, main_.comm(), s), main_.comm(),
                "ncclAllGather", rank_);
    });
  }

  std::unique_ptr<PendingOp> ibroadcast(const torch::Tensor& t, int root) override {
    return launch(main_, {t}, "broadcast from rank " + std::to_string(root) + " over " + std::to_string(size_) + " ranks",
                  [&](cudaStream_t s) {
                    ncclCheck(ncclBroadcast(t.data_ptr(), t.data_ptr(), t.nbytes(), ncclUint8, root, main_.comm(), s),
                              main_.comm(), "ncclBroadcast", rank_);
                  });
  }

  // For NcclOp: throws the watchdog's error once it has one.
  void throwIfFailed() {
    if (!failed_.load()) return;
    std::lock_guard<std::mutex> lock(mutex_);
    reported_ = true;
    throw CommError(failure_);
  }
  c10::Device device() const { return device_; }

 private:
  NcclChannel& pairChannel(std::vector<NcclChannel>& channels, int peer, const char* op) {
    SLUICE_CHECK(!channels.empty(), CommError,
                 op << " over NCCL on a communicator made without point-to-point channels (pointToPoint = false)");
    SLUICE_CHECK(peer >= 0 && peer < size_ && peer != rank_, CommError,
                 op << ": peer " << peer << " is not another rank of this " << size_ << "-rank communicator");
    return channels[peer];
  }

  // Average: the sum divided by size() on the communicator's stream, as on MPI.
  void average(const torch::Tensor& t, ReduceOp op) {
    if (op != ReduceOp::Average) return;
    c10::cuda::CUDAStreamGuard onStream(main_.stream());
    auto out = t;
    if (c10::isFloatingType(t.scalar_type())) {
      out.div_(size_);
    } else {
      out.div_(size_, "trunc");
    }
  }

  std::unique_ptr<PendingOp> launch(NcclChannel& ch, std::vector<torch::Tensor> touched, const std::string& what,
                                    const std::function<void(cudaStream_t)>& enqueue,
                                    std::shared_ptr<HeaderCheck> header = nullptr) {
    throwIfFailed();
    c10::cuda::CUDAGuard guard(device_.index());
    const auto current = c10::cuda::getCurrentCUDAStream(device_.index());
    const auto stream = ch.stream();
    {
      // The communicator's stream starts after what the caller has enqueued so far.
      c10::cuda::CUDAEvent ready;
      ready.record(current);
      ready.block(stream);
    }
    for (auto& t : touched) {
      if (t.is_cuda()) c10::cuda::CUDACachingAllocator::recordStream(t.storage().data_ptr(), stream);
    }
    enqueue(stream.stream());
    auto done = std::make_shared<c10::cuda::CUDAEvent>();
    done->record(stream);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      inFlight_.push_back({done, what + during(), Clock::now(), std::move(header)});
    }
    wake_.notify_all();
    return std::make_unique<NcclOp>(shared_from_this(), done, std::move(touched));
  }

  std::vector<NcclChannel*> channels() {
    std::vector<NcclChannel*> out{&main_};
    for (auto& c : sendTo_) out.push_back(&c);
    for (auto& c : recvFrom_) out.push_back(&c);
    return out;
  }

  // Watchdog thread: records the first failure and aborts every communicator.
  void failLocked(const std::string& message) {
    if (failed_.load()) return;
    failure_ = message;
    failedAt_ = Clock::now();
    failed_.store(true);
    for (auto* c : channels()) c->abort();
    log::error(message);
  }

  std::string headerMismatch(const HeaderCheck& h) const {
    P2pHeader got;
    std::memcpy(got.words.data(), h.host.data_ptr<int64_t>(), sizeof(got.words));
    auto expected = torch::empty(h.shape, torch::TensorOptions().dtype(h.dtype).device(torch::kMeta));
    if (got.matches(expected, h.tag)) return "";
    std::string gotTag = got.words[0] == P2pHeader::kMagic ? " with tag " + std::to_string(got.words[3]) : "";
    return "rank " + std::to_string(rank_) + " received from " + h.from + " (tag " + std::to_string(h.tag) +
           ") a tensor " + got.describe() + gotTag + " but expected " +
           P2pHeader::of(expected, false, h.tag).describe() + " (NCCL pairs messages in order: the two ranks posted "
           "them in different orders, or the shapes differ)";
  }

  void watch() {
    c10::cuda::CUDAGuard guard(device_.index());
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stop_) {
      wake_.wait_for(lock, std::chrono::milliseconds(inFlight_.empty() ? 100 : 1));
      if (stop_) break;
      if (!failed_.load()) {
        for (auto* c : channels()) {
          ncclResult_t async = ncclSuccess;
          if (c->comm() && ncclCommGetAsyncError(c->comm(), &async) == ncclSuccess && async != ncclSuccess &&
              async != ncclInProgress) {
            failLocked("NCCL failed on rank " + std::to_string(rank_) + ": " + ncclGetErrorString(async) + " (" +
                       ncclGetLastError(c->comm()) + "); in flight: " +
                       (inFlight_.empty() ? std::string("nothing") : inFlight_.front().what));
            break;
          }
        }
      }
      const double timeout = Communicator::waitTimeout();
      for (auto it = inFlight_.begin(); it != inFlight_.end() && !failed_.load();) {
        auto& h = it->header;
        if (h && !h->checked && h->arrived->query()) {
          h->checked = true;
          const std::string mismatch = headerMismatch(*h);
          if (!mismatch.empty()) {
            failLocked(mismatch);
            break;
          }
        }
        if (it->done->query()) {
          it = inFlight_.erase(it);
          continue;
        }
        const double waited = std::chrono::duration<double>(Clock::now() - it->posted).count();
        if (timeout > 0 && waited > timeout) {
          char buf[64];
          std::snprintf(buf, sizeof(buf), "%g", timeout);
          failLocked("timed out after " + std::string(buf) + " s waiting for " + it->what + " on rank " +
                     std::to_string(rank_) + " (NCCL): the peer did not answer (it may have failed, stopped or be "
                     "stuck); raise " + Communicator::waitTimeoutSetting() + " if such waits are expected");
          break;
        }
        ++it;
      }
      if (failed_.load()) {
        inFlight_.clear();
        if (!reported_ && Clock::now() - failedAt_ > std::chrono::seconds(60)) {
          log::error("no caller reported the NCCL failure within 60 s; ending the job: " + failure_);
          Communicator::abortAll(1);
        }
      }
    }
  }

  int rank_, size_;
  c10::Device device_;
  std::vector<std::string> peerNames_;
  NcclChannel main_;
  std::vector<NcclChannel> sendTo_, recvFrom_;  // by peer; the entry for this rank is unused
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<InFlight> inFlight_;
  bool stop_ = false, reported_ = false;
  std::atomic<bool> failed_{false};
  std::string failure_;
  Clock::time_point failedAt_;
  std::thread watchdog_;
};

bool NcclOp::test() {
  backend_->throwIfFailed();
  // The caller's stream waits; the host does not (Note in NcclBackend.h).
  done_->block(c10::cuda::getCurrentCUDAStream(backend_->device().index()));
  touched_.clear();
  return true;
}

// Unique ids as bytes, for MPI.
torch::Tensor idBytes(const std::vector<ncclUniqueId>& ids) {
  auto t = torch::empty({static_cast<int64_t>(ids.size() * sizeof(ncclUniqueId))}, torch::kUInt8);
  if (!ids.empty()) std::memcpy(t.data_ptr(), ids.data(), t.numel());
  return t;
}

}  // namespace

std::string ncclVersionText() {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return "unknown";
  // NCCL_VERSION(X,Y,Z) = X*10000 + Y*100 + Z since 2.9.
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
}

std::shared_ptr<CommBackend> createNcclBackend(HostBackend& mpi, c10::Device device, bool pointToPoint) {
  const int rank = mpi.rank(), size = mpi.size();
  SLUICE_CHECK(device.is_cuda() && device.has_index(), CommError,
               "the NCCL backend needs a CUDA device with an index, got " << device);
  const int present = cudaDevices();
  SLUICE_CHECK(device.index() < present, CommError,
               "rank " << rank << ": the NCCL backend was given " << device << " but this host has " << present
                       << " CUDA device(s)");
  // Two ranks on one GPU cannot form an NCCL communicator: say so on every rank alike.
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  auto mine = torch::tensor({static_cast<int64_t>(std::hash<std::string>()(host)), static_cast<int64_t>(device.index())});
  auto all = torch::empty({size, 2}, torch::kLong);
  Work(mpi.iallGather(mine, all), "allGather of devices").wait();
  for (int i = 0; i < size; ++i) {
    for (int j = i + 1; j < size; ++j) {
      SLUICE_CHECK(!torch::equal(all[i], all[j]), CommError,
                   "ranks " << i << " and " << j << " of this communicator use the same GPU (cuda:"
                            << all[i][1].item<int64_t>() << " on one host): NCCL needs one GPU per rank; with "
                            << "fewer GPUs than ranks use job.backend: mpi (host staging)");
    }
  }
  std::vector<std::string> names;
  for (int r = 0; r < size; ++r) names.push_back(mpi.peerName(r));
  auto backend = std::make_shared<NcclBackend>(rank, size, device, std::move(names));
  backend->init(mpi, pointToPoint);
  return backend;
}

void NcclBackend::init(HostBackend& mpi, bool pointToPoint) {
  c10::cuda::CUDAGuard guard(device_.index());
  // The main communicator's id from rank 0; each ordered pair's from its sender.
  std::vector<ncclUniqueId> mainId(1);
  if (rank_ == 0) ncclCheck(ncclGetUniqueId(&mainId[0]), nullptr, "ncclGetUniqueId", rank_);
  auto mainBytes = idBytes(mainId);
  Work(mpi.ibroadcast(mainBytes, 0), "broadcast of the NCCL id").wait();
  std::memcpy(&mainId[0], mainBytes.data_ptr(), sizeof(ncclUniqueId));
  torch::Tensor pairIds;
  if (pointToPoint && size_ > 1) {
    std::vector<ncclUniqueId> mine(size_);
    for (int j = 0; j < size_; ++j) {
      if (j != rank_) ncclCheck(ncclGetUniqueId(&mine[j]), nullptr, "ncclGetUniqueId", rank_);
    }
    auto bytes = idBytes(mine);
    pairIds = torch::empty({size_ * bytes.numel()}, torch::kUInt8);
    Work(mpi.iallGather(bytes, pairIds), "allGather of NCCL ids").wait();
  }
  auto pairId = [&](int from, int to) {
    ncclUniqueId id;
    std::memcpy(&id, pairIds.data_ptr<uint8_t>() + (static_cast<size_t>(from) * size_ + to) * sizeof(ncclUniqueId),
                sizeof(ncclUniqueId));
    return id;
  };
  // Nobody enters NCCL's initialization alone (it has no timeout of its own).
  Work(mpi.ibarrier(), "barrier before NCCL initialization").wait();
  main_ = NcclChannel(device_.index());
  if (pointToPoint && size_ > 1) {
    for (int j = 0; j < size_; ++j) {
      sendTo_.emplace_back(device_.index());
      recvFrom_.emplace_back(device_.index());
    }
  }
  ncclCheck(ncclGroupStart(), nullptr, "ncclGroupStart", rank_);
  ncclCheck(ncclCommInitRank(main_.commSlot(), size_, mainId[0], rank_), nullptr, "ncclCommInitRank", rank_);
  for (int j = 0; j < static_cast<int>(sendTo_.size()); ++j) {
    if (j == rank_) continue;
    ncclCheck(ncclCommInitRank(sendTo_[j].commSlot(), 2, pairId(rank_, j), 0), nullptr,
              "ncclCommInitRank(to " + peerName(j) + ")", rank_);
    ncclCheck(ncclCommInitRank(recvFrom_[j].commSlot(), 2, pairId(j, rank_), 1), nullptr,
              "ncclCommInitRank(from " + peerName(j) + ")", rank_);
  }
  ncclCheck(ncclGroupEnd(), nullptr, "ncclGroupEnd (initialization)", rank_);
  watchdog_ = std::thread([this] { watch(); });
}

// The device-backend seam in a CUDA build (core/CommBackends.h).
DeviceBackendFactory deviceBackendFactory(CommBackendKind kind) {
  return kind == CommBackendKind::Nccl ? createNcclBackend : nullptr;
}

}  // namespace sluice
