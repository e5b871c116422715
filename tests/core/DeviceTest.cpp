// Backend-neutral parts of devices and communication backends, on any
// machine: the choice tables, backend selection, the p2p header, and the
// errors a CPU-only machine (or build) gives for CUDA requests. What needs a
// GPU is in tests/core/CudaTest.cpp.
#include <gtest/gtest.h>

#include "core/Communicator.h"
#include "core/Device.h"
#include "core/Error.h"

namespace sluice {
namespace {

TEST(Device, KindsParseFromTheTableAndBadNamesListTheChoices) {
  EXPECT_EQ(parseDeviceKind("cpu"), DeviceKind::Cpu);
  EXPECT_EQ(parseDeviceKind("cuda"), DeviceKind::Cuda);
  try {
    parseDeviceKind("gpu");
    ADD_FAILURE() << "device 'gpu' was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("expected cpu | cuda"), std::string::npos) << e.what();
  }
  for (auto& k : deviceKinds()) EXPECT_EQ(parseDeviceKind(k.name), k.kind);
  EXPECT_EQ(rankDevice(DeviceKind::Cpu, 3), c10::Device(c10::kCPU));
}

TEST(Device, CudaWithoutAGpuIsAConfigErrorNamingWhy) {
  if (cudaDevices() > 0) GTEST_SKIP() << "a GPU is present (" << cudaDevices() << "): the error path cannot be seen";
  EXPECT_FALSE(cudaAbsentReason().empty());
  try {
    rankDevice(DeviceKind::Cuda, 0);
    ADD_FAILURE() << "cuda was granted with no GPU";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("job.device is cuda but no GPU can be used here: " + cudaAbsentReason()),
              std::string::npos)
        << e.what();
  }
}

TEST(CommBackend, SelectionFollowsTheRequestAndTheGpus) {
  EXPECT_EQ(parseCommBackend("mpi"), CommBackendKind::Mpi);
  EXPECT_EQ(parseCommBackend("nccl"), CommBackendKind::Nccl);
  EXPECT_THROW(parseCommBackend("gloo"), ConfigError);
  // auto: NCCL when built and no GPU is shared, else MPI (host staging).
  EXPECT_EQ(chooseDeviceBackend(std::nullopt, /*gpusShared=*/true), CommBackendKind::Mpi);
  EXPECT_EQ(chooseDeviceBackend(std::nullopt, false),
            commBackendBuilt(CommBackendKind::Nccl) ? CommBackendKind::Nccl : CommBackendKind::Mpi);
  EXPECT_EQ(chooseDeviceBackend(CommBackendKind::Mpi, true), CommBackendKind::Mpi);
  // NCCL on shared GPUs is refused with the reason and what to do.
  try {
    chooseDeviceBackend(CommBackendKind::Nccl, true);
    ADD_FAILURE() << "nccl on shared GPUs was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("use job.backend: mpi"), std::string::npos) << e.what();
  }
}

TEST(CommBackend, NcclWithoutAGpuIsACommErrorNotAHang) {
  if (cudaDevices() > 0) GTEST_SKIP() << "a GPU is present: tests/core/CudaTest.cpp covers NCCL";
  auto self = Communicator::self();
  try {
    self.withDeviceBackend(CommBackendKind::Nccl, c10::Device(c10::kCUDA, 0));
    ADD_FAILURE() << "an NCCL communicator was made without a GPU";
  } catch (const CommError& e) {
    const std::string text = e.what();
    EXPECT_TRUE(text.find("CUDA device") != std::string::npos || text.find("without the CUDA toolkit") !=
                std::string::npos) << text;
  }
  // MPI needs nothing from a device: attaching it works anywhere, and CPU tensors still go over MPI.
  auto staged = self.withDeviceBackend(CommBackendKind::Mpi, c10::Device(c10::kCPU));
  EXPECT_EQ(staged.deviceBackend(), CommBackendKind::Mpi);
  auto t = torch::ones({3});
  staged.allReduce(t);
  EXPECT_TRUE(torch::equal(t, torch::ones({3})));
}

TEST(P2pHeader, CarriesDtypeShapeTagAndRequiresGradAndCatchesEveryMismatch) {
  auto t = torch::zeros({2, 3}, torch::kFloat);
  auto h = P2pHeader::of(t, /*requiresGrad=*/true, /*tag=*/7);
  EXPECT_TRUE(h.matches(t, 7));
  EXPECT_TRUE(h.requiresGrad());
  EXPECT_EQ(h.describe(), "Float[2,3]");
  EXPECT_FALSE(h.matches(t, 8));                                   // messages paired out of order
  EXPECT_FALSE(h.matches(torch::zeros({3, 2}), 7));                // shape
  EXPECT_FALSE(h.matches(torch::zeros({2, 3}, torch::kDouble), 7));  // dtype
  EXPECT_FALSE(h.matches(torch::zeros({2, 3, 1}), 7));             // rank
  P2pHeader garbage;
  EXPECT_FALSE(garbage.matches(t, 0));
  EXPECT_EQ(garbage.describe(), "with a corrupt header");
  EXPECT_THROW(P2pHeader::of(torch::zeros(std::vector<int64_t>(13, 1)), false, 0), CommError);
}

}  // namespace
}  // namespace sluice
