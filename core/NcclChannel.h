// core::NcclChannel (CUDA builds only; for core/NcclBackend.cpp): one NCCL
// communicator and the stream its operations run on, and the checks that turn
// NCCL and CUDA failures into CommErrors.
#pragma once

#include <c10/core/ScalarType.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <string>
#include <utility>

#include "core/CommBackend.h"

namespace sluice {

// " (what this thread is doing)" (core/CommActivity.h), or "" when nothing.
std::string during();

// Throws CommError naming `op`, this rank and NCCL's last error on `comm` (may be null) unless rc is ncclSuccess.
void ncclCheck(ncclResult_t rc, ncclComm_t comm, const std::string& op, int rank);

// Throws CommError naming `op` unless rc is cudaSuccess.
void cudaCheck(cudaError_t rc, const std::string& op);

// The NCCL type of a reduction's dtype; throws CommError, naming `op`, for one NCCL cannot reduce.
ncclDataType_t ncclType(c10::ScalarType dtype, const char* op);

// The NCCL reduction of `op` (Average: a sum, which the caller then divides).
ncclRedOp_t ncclOp(ReduceOp op);

// One NCCL communicator and the stream its operations run on. Move-only;
// destroys both (a communicator the watchdog aborted is already gone).
class NcclChannel {
 public:
  NcclChannel() = default;
  NcclChannel(c10::DeviceIndex device) : device_(device) {
    c10::cuda::CUDAGuard guard(device);
    cudaCheck(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  }
  NcclChannel(NcclChannel&& o) noexcept { *this = std::move(o); }
  NcclChannel& operator=(NcclChannel&& o) noexcept {
    std::swap(comm_, o.comm_);
    std::swap(stream_, o.stream_);
    std::swap(device_, o.device_);
    return *this;
  }
  NcclChannel(const NcclChannel&) = delete;
  NcclChannel& operator=(const NcclChannel&) = delete;
  ~NcclChannel() {
    if (comm_) ncclCommDestroy(comm_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  ncclComm_t* commSlot() { return &comm_; }
  ncclComm_t comm() const { return comm_; }
  bool valid() const { return stream_ != nullptr; }
  c10::cuda::CUDAStream stream() const { return c10::cuda::getStreamFromExternal(stream_, device_); }
  // From the watchdog: releases kernels and threads blocked in this communicator.
  void abort() {
    if (comm_) ncclCommAbort(comm_);
    comm_ = nullptr;
  }

 private:
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  c10::DeviceIndex device_ = 0;
};

}  // namespace sluice
