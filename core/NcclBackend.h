// core::NcclBackend (CUDA builds only): NCCL between the GPUs of a
// communicator's ranks, one GPU per rank.
//
// Contract (beyond core/CommBackend.h and core/Communicator.h)
// - Made collectively over an MPI communicator (createNcclBackend): rank 0's
//   ncclUniqueId is broadcast over MPI, after an MPI barrier (under MPI's
//   watchdog) so that no rank enters NCCL's initialization alone. Two ranks
//   on the same GPU are refused first, naming both (NCCL would fail or hang).
// - Streams. Every NCCL communicator runs on a stream of its own (created
//   here, not taken from LibTorch's pool, which hands the same stream to
//   several users). An operation first makes that stream wait for the
//   caller's current stream (an event), so it reads inputs the caller has
//   produced; tensors it touches are recordStream'ed there, so the caching
//   allocator does not reuse their memory early; its completion is an event
//   that Work::wait makes the caller's current stream wait for: the host
//   never waits on the device.
// - Point to point (pointToPoint): NCCL has no tags and matches a pair's
//   sends and receives in order, and an NCCL operation holds its stream until
//   the peer's matching operation runs. A receive posted early (the pipeline
//   does) must not hold up sends, so every ordered pair of ranks (i -> j) has
//   its own 2-rank communicator and stream: messages of one direction between
//   two ranks, in the same order on both. The header (Note [p2p header])
//   travels before the bytes; the receiver copies it to pinned host memory
//   and the watchdog checks it.
// - Watchdog: a thread per backend polls every communicator's
//   ncclCommGetAsyncError, the completion of every operation in flight
//   against Communicator::waitTimeout() (counted from when it was posted),
//   and the received headers. On an error, a timeout or a header mismatch it
//   aborts every communicator of the backend (ncclCommAbort, which releases
//   kernels and host threads blocked in NCCL) and keeps the message: every
//   later call on the backend throws it as a CommError. If no call has
//   reported it 60 s later, the watchdog logs it and ends the job
//   (Communicator::abortAll): nothing waits forever on a failed peer.
// - Received::requiresGrad is unknown over NCCL (the host does not wait for
//   the header).
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>

#include "core/CommBackend.h"

namespace sluice {

// "2.28.9": the NCCL this process loaded.
std::string ncclVersionText();

// Collective over `mpi`. Throws CommError when `device` is not a CUDA device
// present here, when two ranks use the same GPU, or when NCCL fails.
std::shared_ptr<CommBackend> createNcclBackend(HostBackend& host, c10::Device device, bool pointToPoint);

}  // namespace sluice
