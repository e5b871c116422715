#include "memory/PinnedHostSwapTier.h"

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "core/Bytes.h"
#include "core/Device.h"
#include "core/Error.h"
#include "core/TransferGuard.h"

namespace sluice::memory {

struct PinnedHostSwapTier::Impl {
  c10::cuda::CUDAStream side;
};

namespace {

torch::Tensor onDevice(const void* data, int64_t bytes, const c10::Device& device) {
  return torch::from_blob(const_cast<void*>(data), {bytes}, torch::TensorOptions().dtype(torch::kUInt8).device(device));
}

}  // namespace

PinnedHostSwapTier::PinnedHostSwapTier(c10::Device device) : device_(device) {
  SLUICE_CHECK(device.is_cuda() && device.has_index() && device.index() < cudaDevices(), MemoryError,
               "swap: the pinned-host tier needs a CUDA device present here, got " << device << " ("
                   << (cudaDevices() == 0 ? cudaAbsentReason() : std::to_string(cudaDevices()) + " device(s)") << ")");
  impl_ = std::make_unique<Impl>(Impl{c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device.index())});
}

PinnedHostSwapTier::~PinnedHostSwapTier() {
  // Nothing may be in flight when the blocks go back to the host allocator.
  if (impl_) impl_->side.synchronize();
}

std::string PinnedHostSwapTier::describe() const {
  return "pinned host memory (" + device_.str() + ", side stream)";
}

std::shared_ptr<void> PinnedHostSwapTier::orderAfterCompute() {
  auto event = std::make_shared<c10::cuda::CUDAEvent>();
  event->record(c10::cuda::getCurrentCUDAStream(device_.index()));
  return event;
}

int64_t PinnedHostSwapTier::write(const void* data, int64_t bytes, const std::shared_ptr<void>& after) {
  c10::cuda::CUDAGuard guard(device_.index());
  c10::cuda::CUDAStreamGuard onSide(impl_->side);
  if (after) static_cast<c10::cuda::CUDAEvent*>(after.get())->block(impl_->side);
  auto host = torch::empty({bytes}, torch::TensorOptions().dtype(torch::kUInt8).pinned_memory(true));
  {
    TransferScope scope(TransferScope::Kind::Swap);
    host.copy_(onDevice(data, bytes, device_), /*non_blocking=*/true);
  }
  const int64_t at = next_++;
  blocks_[at] = host;
  hostBytes_ += bytes;
  return at;
}

void PinnedHostSwapTier::sync() { impl_->side.synchronize(); }

c10::Storage PinnedHostSwapTier::emptyStorage(int64_t bytes) {
  c10::cuda::CUDAGuard guard(device_.index());
  c10::cuda::CUDAStreamGuard onSide(impl_->side);  // the block belongs to the side stream until handOver
  return torch::empty({bytes}, torch::TensorOptions().dtype(torch::kUInt8).device(device_)).storage();
}

void PinnedHostSwapTier::read(int64_t location, void* data, int64_t bytes) {
  auto it = blocks_.find(location);
  SLUICE_CHECK(it != blocks_.end(), MemoryError, "swap: no pinned block at location " << location << " (internal error)");
  c10::cuda::CUDAGuard guard(device_.index());
  c10::cuda::CUDAStreamGuard onSide(impl_->side);
  {
    TransferScope scope(TransferScope::Kind::Swap);
    onDevice(data, bytes, device_).copy_(it->second, /*non_blocking=*/true);
  }
  impl_->side.synchronize();
}

void PinnedHostSwapTier::release(int64_t location, int64_t bytes) {
  auto it = blocks_.find(location);
  if (it == blocks_.end()) return;
  hostBytes_ -= it->second.numel();
  blocks_.erase(it);
}

void PinnedHostSwapTier::handOver(const c10::Storage& storage) {
  c10::cuda::CUDACachingAllocator::recordStream(storage.data_ptr(), c10::cuda::getCurrentCUDAStream(device_.index()));
}

// memory/'s CUDA seam (memory/SwapTier.h) in a build with CUDA.
std::unique_ptr<SwapTier> makeDeviceSwapTier(const c10::Device& device) {
  return std::make_unique<PinnedHostSwapTier>(device);
}

}  // namespace sluice::memory
