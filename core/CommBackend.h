// core::CommBackend: what a communication library provides behind a Communicator.
//
// Contract (every backend)
// - Every operation is nonblocking: it returns a PendingOp at once, and
//   Work (core/Communicator.h) waits on it under the watchdog.
// - A backend moves the tensors it accepts(): the MPI backend CPU tensors
//   (and CUDA tensors through host staging), the NCCL backend the tensors of
//   its own CUDA device. The Communicator has already checked what every
//   backend needs (defined, contiguous, shapes and dtypes that agree, tags
//   in range) and picked the backend by the tensor's device.
// - Failures throw CommError naming the operation, this rank and, for p2p,
//   the peer and tag (and CommActivity::current()).
// - Thread use: one thread at a time per backend (the NCCL backend's own
//   watchdog thread touches only its in-flight list, under a lock).
//
// Two roles. A HostBackend (below) is what a Communicator is built on: it
// carries CPU tensors and the control plane (barrier, a receive of any
// shape, sub-communicators); MPI is one (core/MpiBackend.h). A device
// backend carries the CUDA tensors of a communicator it is attached to
// (NCCL, core/NcclBackend.h), built by its factory over the host backend.
// Adding a backend: its class in one file pair, and a row in its table
// (core/CommBackends.h: hostBackendKinds(), or the device factory seam).
// tests/core/RecordingBackendTest.cpp is the recipe for a host backend.
#pragma once

#include <ATen/core/Tensor.h>

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "core/CommBackendKind.h"

namespace sluice {

enum class ReduceOp { Sum, Average, Max, Min };


// A nonblocking operation in flight.
class PendingOp {
 public:
  PendingOp() = default;
  PendingOp(const PendingOp&) = delete;  // it owns live requests: one owner abandons them
  PendingOp& operator=(const PendingOp&) = delete;
  virtual ~PendingOp() = default;
  // Nonblocking. True once the caller may use the result: MPI: the operation
  // finished, its completion checks passed and its buffers may be reused;
  // NCCL: the caller's current CUDA stream has been made to wait for it (the
  // host never waits on the device). Throws CommError when it failed (after
  // abandoning itself: see Note [abandoned work] in Communicator.h).
  virtual bool test() = 0;
  // Gives up: whatever the operation may still touch stays alive for ever.
  virtual void abandon() = 0;
};

// Note [p2p header]
// Every p2p message is a fixed-size int64 header followed by the tensor's
// bytes, on the same (peer, tag). The header carries a magic word, the dtype,
// the sender's requires_grad, the tag and the shape, so a receiver checks
// what it got against what it expected (a wrong pairing of messages, on a
// library without tags, shows as a wrong tag).
struct P2pHeader {
  static constexpr int64_t kMagic = 0x5e1ce;
  static constexpr int kMaxDims = 12;
  static constexpr int kLength = 5 + kMaxDims;  // int64 words
  std::array<int64_t, kLength> words{};

  // Throws CommError for tensors of more than kMaxDims dimensions.
  static P2pHeader of(const at::Tensor& tensor, bool requiresGrad, int tag);
  bool requiresGrad() const { return words[2] != 0; }
  // "float[4,8]", or "a corrupt header".
  std::string describe() const;
  // True when magic, tag, dtype and shape are those of `expected` (a tensor of that shape and dtype).
  bool matches(const at::Tensor& expected, int tag) const;
};

class CommBackend {
 public:
  virtual ~CommBackend() = default;
  virtual CommBackendKind kind() const = 0;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // "rank r", plus its world rank where that differs.
  virtual std::string peerName(int r) const = 0;

  // Sends the tensor with its header (Note [p2p header]).
  virtual std::unique_ptr<PendingOp> isend(const at::Tensor& tensor, bool requiresGrad, int dst, int tag) = 0;
  // Receives into `into`, whose shape, dtype and device are what the sender
  // must send; a mismatch is a CommError naming both. The sender's
  // requires_grad is stored in *requiresGrad once the header has arrived
  // (MPI; NCCL leaves it empty: its host does not wait for the header).
  virtual std::unique_ptr<PendingOp> irecv(const at::Tensor& into, std::shared_ptr<std::optional<bool>> requiresGrad,
                                           int src, int tag) = 0;
  // In place. Average is a sum followed by a division by size(), on every backend.
  virtual std::unique_ptr<PendingOp> iallReduce(const at::Tensor& tensor, ReduceOp op) = 0;
  // input.numel() == size() * output.numel(); rank r gets the reduction of chunk r.
  virtual std::unique_ptr<PendingOp> ireduceScatter(const at::Tensor& input, const at::Tensor& output,
                                                    ReduceOp op) = 0;
  // output.numel() == size() * input.numel(); chunk r of output is rank r's input.
  virtual std::unique_ptr<PendingOp> iallGather(const at::Tensor& input, const at::Tensor& output) = 0;
  virtual std::unique_ptr<PendingOp> ibroadcast(const at::Tensor& tensor, int root) = 0;
};

// The backend a Communicator is built on: CPU tensors (and CUDA tensors when
// no device backend is attached, as the MPI backend's host staging does),
// plus the control plane every communicator needs.
class HostBackend : public CommBackend {
 public:
  virtual std::unique_ptr<PendingOp> ibarrier() = 0;
  // A receive of any shape in two halves: its header (Note [p2p header]),
  // then, into a tensor of the header's shape and dtype, its bytes.
  virtual std::unique_ptr<PendingOp> irecvHeader(std::shared_ptr<P2pHeader> header, int src, int tag) = 0;
  virtual std::unique_ptr<PendingOp> irecvBytes(const at::Tensor& into, int src, int tag) = 0;
  // Ranks with the same color form a sub-communicator, ordered by key (-1: rank). Collective.
  virtual std::shared_ptr<HostBackend> split(int color, int key) const = 0;
};

// Attaches a device backend to a communicator's host backend (collective
// over it): CommError when this build or machine cannot.
using DeviceBackendFactory = std::shared_ptr<CommBackend> (*)(HostBackend& host, c10::Device device,
                                                              bool pointToPoint);

}  // namespace sluice
