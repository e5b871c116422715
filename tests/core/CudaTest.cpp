// CUDA paths on one process (CTest entry `cuda`): device placement and
// memory statistics, the transfer guard's dispatcher hook, the pinned-host
// swap tier, and NCCL at world size 1 (DistAdam over it against AdamW).
// Every test skips, naming why, where no GPU can be used; the multi-rank
// CUDA tests are in tests/pipeline (CudaEquivalence, CudaMemoryPlanExactness).
#include <gtest/gtest.h>

#include "core/Communicator.h"
#include "core/Device.h"
#include "core/TransferGuard.h"
#include "memory/DeviceMemory.h"
#include "optim/DistAdam.h"
#if SLUICE_CUDA
#include "memory/PinnedHostSwapTier.h"
#endif

namespace sluice {
namespace {

#define SKIP_WITHOUT_GPU()                                                                  \
  if (cudaDevices() == 0) GTEST_SKIP() << "no GPU can be used here: " << cudaAbsentReason()

c10::Device gpu() { return c10::Device(c10::kCUDA, 0); }

TEST(CudaDevice, RankDevicesWrapAroundTheGpusAndTensorsGoThere) {
  SKIP_WITHOUT_GPU();
  EXPECT_EQ(rankDevice(DeviceKind::Cuda, 0), gpu());
  EXPECT_EQ(rankDevice(DeviceKind::Cuda, cudaDevices()), gpu());  // LOCAL_RANK modulo the GPUs
  auto x = torch::ones({4}, torch::TensorOptions().device(rankDevice(DeviceKind::Cuda, 0)));
  EXPECT_TRUE(x.is_cuda());
}

TEST(CudaDevice, MemoryStatisticsAreTheCachingAllocators) {
  SKIP_WITHOUT_GPU();
  synchronize(gpu());
  const auto before = memory::deviceAllocatorStats(gpu());
  memory::resetDevicePeak(gpu());
  int64_t peak = 0;
  {
    auto big = torch::empty({1 << 20}, torch::TensorOptions().device(gpu()));  // 4 MiB
    const auto during = memory::deviceAllocatorStats(gpu());
    EXPECT_GE(during.currentBytes - before.currentBytes, 4 << 20);
    peak = during.peakBytes;
  }
  const auto after = memory::deviceAllocatorStats(gpu());
  EXPECT_EQ(after.currentBytes, before.currentBytes);
  EXPECT_GE(after.peakBytes, peak);
  // CPU allocations do not count on the GPU.
  auto host = torch::empty({1 << 20});
  EXPECT_EQ(memory::deviceAllocatorStats(gpu()).currentBytes, before.currentBytes);
}

TEST(CudaTransferGuard, TheDispatcherHookCountsCopiesAndFindsARoundTrip) {
  SKIP_WITHOUT_GPU();
  transfers::installHook();
  const auto before = transfers::counts();
  auto host = torch::arange(256, torch::kFloat);
  auto onGpu = host.to(gpu());               // host -> device, 1 KiB
  auto back = (onGpu * 2).cpu();             // device -> host, 1 KiB
  const float scalar = onGpu.sum().item<float>();  // a scalar read
  EXPECT_EQ(scalar, 255.0f * 256.0f / 2.0f);
  auto after = transfers::counts();
  EXPECT_EQ(after.copies[0] - before.copies[0], 1);
  EXPECT_EQ(after.copies[1] - before.copies[1], 2);
  EXPECT_EQ(after.bytes[0] - before.bytes[0], 1024);
  // The same inside a step: device -> host -> device is a round trip; under error, endStep throws.
  transfers::setMode(TransferGuardMode::Error);
  transfers::beginStep();
  auto y = (onGpu + 1).cpu();
  auto z = (y * 3).to(gpu());
  EXPECT_THROW(transfers::endStep(), TransferError);
  // The data feed (TransferScope Data) and staging are exempt.
  transfers::beginStep();
  {
    TransferScope data(TransferScope::Kind::Data);
    auto in = host.to(gpu());
  }
  auto out = (onGpu * 4).cpu();
  EXPECT_NO_THROW(transfers::endStep());
  transfers::setMode(TransferGuardMode::Warn);
}

#if SLUICE_CUDA
TEST(CudaSwap, PinnedHostTierRoundTripsBytesOnItsSideStream) {
  SKIP_WITHOUT_GPU();
  memory::PinnedHostSwapTier tier(gpu());
  EXPECT_EQ(tier.device(), gpu());
  auto src = torch::randn({1000, 33}, torch::TensorOptions().device(gpu()));
  auto expected = src.cpu();
  const int64_t bytes = static_cast<int64_t>(src.nbytes());
  auto after = tier.orderAfterCompute();
  const int64_t at = tier.write(src.data_ptr(), bytes, after);
  tier.sync();
  EXPECT_EQ(tier.hostBytes(), bytes);
  src.zero_();  // the device copy may go: the tier holds the bytes
  auto storage = tier.emptyStorage(bytes);
  tier.read(at, storage.mutable_data(), bytes);
  tier.handOver(storage);
  auto restored = torch::empty({0}, torch::TensorOptions().device(gpu())).set_(storage).view(torch::kFloat).view({1000, 33});
  EXPECT_TRUE(torch::equal(restored.cpu(), expected));
  tier.release(at, bytes);
  EXPECT_EQ(tier.hostBytes(), 0);
  EXPECT_THROW(memory::PinnedHostSwapTier(c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(cudaDevices()))),
               MemoryError);
}
#endif

TEST(CudaNccl, WorldOfOneCollectivesRunOnTheGpu) {
  SKIP_WITHOUT_GPU();
  auto self = Communicator::self().withDeviceBackend(CommBackendKind::Nccl, gpu(), /*pointToPoint=*/false);
  EXPECT_EQ(self.deviceBackend(), CommBackendKind::Nccl);
  auto t = torch::arange(8, torch::TensorOptions().dtype(torch::kFloat).device(gpu()));
  self.allReduce(t, ReduceOp::Average);  // one rank: the values themselves
  EXPECT_TRUE(torch::equal(t.cpu(), torch::arange(8, torch::kFloat)));
  auto gathered = torch::empty({8}, t.options());
  self.allGather(t, gathered);
  EXPECT_TRUE(torch::equal(gathered.cpu(), torch::arange(8, torch::kFloat)));
  // A CPU tensor on the same communicator still goes over MPI.
  auto c = torch::ones({2});
  self.allReduce(c);
  EXPECT_TRUE(torch::equal(c, torch::ones({2})));
}

TEST(CudaDistAdam, WorldOfOneOverNcclMatchesAdamW) {
  SKIP_WITHOUT_GPU();
  auto comm = Communicator::self().withDeviceBackend(CommBackendKind::Nccl, gpu(), /*pointToPoint=*/false);
  torch::manual_seed(3);
  auto w0 = torch::randn({33, 17}), b0 = torch::randn({17});
  auto make = [&] {
    return std::vector<torch::Tensor>{w0.to(gpu()).requires_grad_(true), b0.to(gpu()).requires_grad_(true)};
  };
  auto a = make(), b = make();
  auto options = torch::optim::AdamWOptions(1e-2).weight_decay(0.1);
  torch::optim::AdamW reference(a, options);
  optim::DistAdam dist(b, comm, options, optim::DistAdamMode::AfterBackward, 1);
  for (int step = 0; step < 5; ++step) {
    auto x = torch::randn({8, 33}).to(gpu());
    for (auto* ps : {&a, &b}) {
      auto loss = (torch::matmul(x, (*ps)[0]) + (*ps)[1]).pow(2).mean();
      loss.backward();
    }
    reference.step();
    dist.step();
    reference.zero_grad();
    dist.zero_grad();
  }
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(torch::allclose(a[i].cpu(), b[i].cpu(), 1e-5, 1e-6)) << "parameter " << i;
  }
}

}  // namespace
}  // namespace sluice
