// A host communication backend added the way docs/architecture.md's recipe
// "Add a communication backend" says: a class implementing HostBackend
// (core/CommBackend.h) and one row in the host backend table
// (core/CommBackends.h). Here both are in this file and the row is added with
// addHostBackendKind (test-only; the library's table holds "mpi"). The
// backend records every operation and hands it to the MPI backend, so the
// test below checks that a Communicator built on a row of the table
// (Communicator::world("recording")) runs its whole contract through that
// backend: p2p with the header check on receipt, every collective, a receive
// of any shape, the barrier and sub-communicators.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <mutex>
#include <set>
#include <string>

#include "core/CommBackends.h"
#include "core/Communicator.h"
#include "core/Error.h"
#include "tests/Ranks.h"

namespace sluice {
namespace {

SLUICE_TEST_RANKS("RecordingBackend", 2, 3);

// What the backends of this process were asked to do, by operation name.
std::set<std::string>& recorded() {
  static std::set<std::string> ops;
  return ops;
}

class RecordingBackend final : public HostBackend {
 public:
  explicit RecordingBackend(std::shared_ptr<HostBackend> inner) : inner_(std::move(inner)) {}

  CommBackendKind kind() const override { return inner_->kind(); }
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string peerName(int r) const override { return inner_->peerName(r); }

  std::unique_ptr<PendingOp> isend(const at::Tensor& t, bool requiresGrad, int dst, int tag) override {
    return record("isend", inner_->isend(t, requiresGrad, dst, tag));
  }
  std::unique_ptr<PendingOp> irecv(const at::Tensor& into, std::shared_ptr<std::optional<bool>> requiresGrad, int src,
                                   int tag) override {
    return record("irecv", inner_->irecv(into, std::move(requiresGrad), src, tag));
  }
  std::unique_ptr<PendingOp> iallReduce(const at::Tensor& t, ReduceOp op) override {
    return record("iallReduce", inner_->iallReduce(t, op));
  }
  std::unique_ptr<PendingOp> ireduceScatter(const at::Tensor& in, const at::Tensor& out, ReduceOp op) override {
    return record("ireduceScatter", inner_->ireduceScatter(in, out, op));
  }
  std::unique_ptr<PendingOp> iallGather(const at::Tensor& in, const at::Tensor& out) override {
    return record("iallGather", inner_->iallGather(in, out));
  }
  std::unique_ptr<PendingOp> ibroadcast(const at::Tensor& t, int root) override {
    return record("ibroadcast", inner_->ibroadcast(t, root));
  }
  std::unique_ptr<PendingOp> ibarrier() override { return record("ibarrier", inner_->ibarrier()); }
  std::unique_ptr<PendingOp> irecvHeader(std::shared_ptr<P2pHeader> header, int src, int tag) override {
    return record("irecvHeader", inner_->irecvHeader(std::move(header), src, tag));
  }
  std::unique_ptr<PendingOp> irecvBytes(const at::Tensor& into, int src, int tag) override {
    return record("irecvBytes", inner_->irecvBytes(into, src, tag));
  }
  std::shared_ptr<HostBackend> split(int color, int key) const override {
    recorded().insert("split");
    return std::make_shared<RecordingBackend>(inner_->split(color, key));
  }

 private:
  static std::unique_ptr<PendingOp> record(const std::string& op, std::unique_ptr<PendingOp> pending) {
    recorded().insert(op);
    return pending;
  }
  std::shared_ptr<HostBackend> inner_;
};

const bool kRecordingRegistered = addHostBackendKind(
    {"recording", "test only: records each operation and hands it to MPI",
     [] { return std::shared_ptr<HostBackend>(std::make_shared<RecordingBackend>(hostBackendKind("mpi").world())); },
     [] { return std::shared_ptr<HostBackend>(std::make_shared<RecordingBackend>(hostBackendKind("mpi").self())); }});

TEST(RecordingBackend, CarriesACommunicatorsWholeContract) {
  ASSERT_TRUE(kRecordingRegistered);
  const auto world = test::world();
  recorded().clear();
  auto comm = Communicator::world("recording");
  ASSERT_EQ(comm.size(), world.size());
  ASSERT_EQ(comm.rank(), world.rank());
  const int n = comm.size(), r = comm.rank(), next = (r + 1) % n, prev = (r + n - 1) % n;

  // p2p around a ring, the sender's requires_grad carried in the header.
  auto sending = comm.isend(torch::full({3}, static_cast<float>(r)), next, 7, /*requiresGrad=*/true);
  auto got = comm.recv({{3}, torch::kFloat}, prev, 7);
  sending.wait();
  EXPECT_TRUE(torch::equal(got.tensor, torch::full({3}, static_cast<float>(prev))));
  EXPECT_EQ(got.requiresGrad, std::optional<bool>(true));
  // A receive that expects another dtype fails on the header's check, as over MPI.
  if (r == 0) comm.send(torch::ones({2, 5}), 1, 8);
  if (r == 1) {
    EXPECT_THROW(comm.recv({{2, 5}, torch::kDouble}, 0, 8), CommError);
  }
  comm.barrier();

  // Every collective.
  auto sum = torch::ones({4});
  comm.allReduce(sum);
  EXPECT_TRUE(torch::equal(sum, torch::full({4}, static_cast<float>(n))));
  auto gathered = torch::empty({2 * n});
  comm.allGather(torch::full({2}, static_cast<float>(r)), gathered);
  for (int k = 0; k < n; ++k) EXPECT_EQ(gathered[2 * k].item<float>(), static_cast<float>(k));
  auto mine = torch::empty({1});
  comm.reduceScatter(torch::arange(n, torch::kFloat), mine);
  EXPECT_EQ(mine.item<float>(), static_cast<float>(r * n));
  auto root = torch::full({2}, static_cast<float>(r));
  comm.broadcast(root, 0);
  EXPECT_TRUE(torch::equal(root, torch::zeros({2})));

  // A receive of any shape: header, then bytes.
  if (r == 0) comm.send(torch::arange(6, torch::kLong).reshape({2, 3}), 1, 9);
  if (r == 1) {
    const auto any = comm.recvAny(0, 9);
    EXPECT_EQ(any.tensor.sizes(), (std::vector<int64_t>{2, 3}));
    EXPECT_EQ(any.tensor.scalar_type(), torch::kLong);
  }

  // A sub-communicator stays on the same backend.
  auto pair = comm.split(r == 0 ? 0 : 1);
  auto one = torch::ones({1});
  pair.allReduce(one);
  EXPECT_EQ(one.item<float>(), r == 0 ? 1.0f : static_cast<float>(n - 1));
  comm.barrier();

  std::set<std::string> want{"isend",      "irecv",    "iallReduce", "iallGather", "ireduceScatter",
                             "ibroadcast", "ibarrier", "split"};
  if (r == 1) want.insert({"irecvHeader", "irecvBytes"});
  for (const auto& op : want) EXPECT_TRUE(recorded().count(op)) << op << " did not go through the backend";
  EXPECT_THROW(Communicator::world("no-such-backend"), CommError);
}

}  // namespace
}  // namespace sluice
