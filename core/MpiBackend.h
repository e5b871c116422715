// core::MpiBackend: the Open MPI backend of a Communicator.
//
// Contract (beyond core/CommBackend.h)
// - CPU tensors go straight between the tensor's memory and MPI. CUDA
//   tensors are staged through host memory (Note [host staging]): the way
//   ranks that share one GPU, which cannot form an NCCL communicator,
//   exchange device tensors. Staging blocks the host for the device-to-host
//   copy of what is sent.
// - Every MPI error comes back as a return code (MPI_ERRORS_RETURN) and is
//   thrown as CommError naming the operation, the rank and, for p2p, the
//   peer and tag; nothing aborts inside MPI.
// - Reductions support float, double, int32 and int64 (staged: the same).
// - The MPI_Comm is freed when the last backend holding it goes, while MPI is
//   still initialized. Movable through shared_ptr only.
#pragma once

#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

#include "core/CommBackend.h"

namespace sluice {

class MpiBackend final : public HostBackend {
 public:
  explicit MpiBackend(std::shared_ptr<MPI_Comm> comm);
  static std::shared_ptr<MpiBackend> world();
  static std::shared_ptr<MpiBackend> self();

  CommBackendKind kind() const override { return CommBackendKind::Mpi; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string peerName(int r) const override;

  std::unique_ptr<PendingOp> isend(const torch::Tensor& tensor, bool requiresGrad, int dst, int tag) override;
  std::unique_ptr<PendingOp> irecv(const torch::Tensor& into, std::shared_ptr<std::optional<bool>> requiresGrad,
                                   int src, int tag) override;
  std::unique_ptr<PendingOp> iallReduce(const torch::Tensor& tensor, ReduceOp op) override;
  std::unique_ptr<PendingOp> ireduceScatter(const torch::Tensor& input, const torch::Tensor& output,
                                            ReduceOp op) override;
  std::unique_ptr<PendingOp> iallGather(const torch::Tensor& input, const torch::Tensor& output) override;
  std::unique_ptr<PendingOp> ibroadcast(const torch::Tensor& tensor, int root) override;

  // The control plane (CPU only; HostBackend).
  std::unique_ptr<PendingOp> ibarrier() override;
  std::unique_ptr<PendingOp> irecvHeader(std::shared_ptr<P2pHeader> header, int src, int tag) override;
  std::unique_ptr<PendingOp> irecvBytes(const torch::Tensor& into, int src, int tag) override;
  std::shared_ptr<HostBackend> split(int color, int key) const override;
  MPI_Comm handle() const { return *comm_; }

 private:
  std::shared_ptr<MPI_Comm> comm_;
  int rank_ = 0, size_ = 0;
};

// Throws CommError for a failed MPI call (rc != MPI_SUCCESS), naming op and rank.
void mpiCheck(int rc, const std::string& op, int rank);
// This process's rank in MPI_COMM_WORLD, or -1 before MPI_Init / after MPI_Finalize.
int mpiWorldRank();

}  // namespace sluice
