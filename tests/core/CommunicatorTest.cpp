// Communicator on real MPI ranks (run under mpirun -np 2 and -np 3).
#include <gtest/gtest.h>

#include "core/Communicator.h"
#include "core/Error.h"
#include "tests/Ranks.h"

namespace sluice {
namespace {

SLUICE_TEST_RANKS("Communicator", 2, 3);
SLUICE_TEST_RANKS("Communicator.PeerNamesGiveTheWorldRank", 3);

Communicator world() { return test::world(); }

TEST(Communicator, P2PRingWithShapeCheck) {
  auto c = world();
  int next = (c.rank() + 1) % c.size(), prev = (c.rank() + c.size() - 1) % c.size();
  auto mine = torch::arange(12, torch::kFloat).view({3, 4}) + 100 * c.rank();
  auto recv = c.irecv({{3, 4}, c10::kFloat}, prev, 7);
  auto send = c.isend(mine, next, 7, /*requiresGrad=*/true);
  auto got = recv.wait();
  send.wait();
  EXPECT_TRUE(torch::equal(got.tensor, torch::arange(12, torch::kFloat).view({3, 4}) + 100 * prev));
  EXPECT_EQ(got.requiresGrad, std::optional<bool>(true));

  // Blocking variants and recvAny with an int64 tensor.
  if (c.rank() == 0) {
    c.send(torch::arange(5, torch::kLong), 1, 3);
  } else if (c.rank() == 1) {
    auto any = c.recvAny(0, 3);
    EXPECT_TRUE(torch::equal(any.tensor, torch::arange(5, torch::kLong)));
    EXPECT_EQ(any.requiresGrad, std::optional<bool>(false));
  }
}

TEST(Communicator, MismatchedShapeIsACommError) {
  auto c = world();
  if (c.rank() == 0) c.send(torch::ones({2, 5}), 1, 9);
  if (c.rank() == 1) {
    try {
      c.recv({{2, 5}, c10::kDouble}, 0, 9);
      ADD_FAILURE() << "dtype mismatch accepted";
    } catch (const CommError& e) {
      EXPECT_NE(std::string(e.what()).find("expected Double[2,5]"), std::string::npos) << e.what();
    }
  }
  c.barrier();
}

TEST(Communicator, AllReduceSumAverageMax) {
  auto c = world();
  const int n = c.size();
  auto t = torch::full({4}, static_cast<float>(c.rank() + 1));
  c.allReduce(t);
  EXPECT_TRUE(torch::equal(t, torch::full({4}, n * (n + 1) / 2.0f)));
  auto a = torch::full({3}, static_cast<double>(c.rank()), torch::kDouble);
  auto w = c.iallReduce(a, ReduceOp::Average);
  w.wait();
  EXPECT_TRUE(torch::allclose(a, torch::full({3}, (n - 1) / 2.0, torch::kDouble)));
  auto m = torch::tensor({static_cast<int64_t>(c.rank())});
  c.allReduce(m, ReduceOp::Max);
  EXPECT_EQ(m.item<int64_t>(), n - 1);
}

TEST(Communicator, ReduceScatterAndAllGather) {
  auto c = world();
  const int n = c.size();
  // Rank r contributes [r, r, ...] + position; rank r receives chunk r summed.
  auto input = torch::arange(2 * n, torch::kFloat) + c.rank();
  auto out = torch::empty({2});
  c.reduceScatter(input, out);
  float base = 0;
  for (int r = 0; r < n; ++r) base += r;
  auto expect = (torch::arange(2, torch::kFloat) + 2 * c.rank()) * n + base;
  EXPECT_TRUE(torch::equal(out, expect));
  auto avg = torch::empty({2});
  c.ireduceScatter(input, avg, ReduceOp::Average).wait();
  EXPECT_TRUE(torch::allclose(avg, expect / n));

  auto gathered = torch::empty({n, 3});
  c.iallGather(torch::full({3}, static_cast<float>(c.rank())), gathered).wait();
  for (int r = 0; r < n; ++r) EXPECT_TRUE(torch::equal(gathered[r], torch::full({3}, static_cast<float>(r))));

  auto bad = torch::empty({3});
  EXPECT_THROW(c.reduceScatter(torch::ones({2 * n}), bad), CommError);
}

TEST(Communicator, BroadcastBarrierAndSplit) {
  auto c = world();
  auto t = c.rank() == 0 ? torch::arange(6, torch::kFloat) : torch::zeros({6});
  c.broadcast(t, 0);
  EXPECT_TRUE(torch::equal(t, torch::arange(6, torch::kFloat)));
  c.barrier();
  // Even and odd ranks form two groups.
  auto group = c.split(c.rank() % 2);
  EXPECT_EQ(group.size(), (c.size() + 1 - c.rank() % 2) / 2);
  EXPECT_EQ(group.rank(), c.rank() / 2);
  auto s = torch::ones({1});
  group.allReduce(s);
  EXPECT_EQ(s.item<float>(), group.size());
}

// The watchdog: a receive whose sender never sends gives up after the
// timeout with a CommError naming the op, the peer, the tag and the activity.
TEST(Communicator, WaitTimesOutNamingThePeer) {
  auto c = world();
  if (c.rank() == 0) {
    Communicator::setWaitTimeout(0.5);
    CommActivity activity("step 4, micro-batch 1");
    try {
      c.recv({{3}, c10::kFloat}, 1, 123);
      ADD_FAILURE() << "a receive that nobody sends returned";
    } catch (const CommError& e) {
      EXPECT_NE(std::string(e.what()).find("timed out after 0.5 s waiting for recv from rank 1 (tag 123) (step 4, "
                                           "micro-batch 1) on rank 0"),
                std::string::npos)
          << e.what();
    }
    Communicator::setWaitTimeout(0);
  }
  c.barrier();
}

// A send larger than the posted receive is an MPI error (truncation): with
// MPI_ERRORS_RETURN it is a CommError naming the op and the peer, not an abort.
TEST(Communicator, MpiErrorIsACommErrorNotAnAbort) {
  auto c = world();
  if (c.rank() == 0) c.send(torch::ones({4, 5}), 1, 10);
  if (c.rank() == 1) {
    try {
      c.recv({{2, 5}, c10::kFloat}, 0, 10);
      ADD_FAILURE() << "a truncated message was accepted";
    } catch (const CommError& e) {
      EXPECT_NE(std::string(e.what()).find("recv from rank 0 (tag 10)"), std::string::npos) << e.what();
    }
  }
  c.barrier();
}

// On a sub-communicator, peers are also named by their world rank.
TEST(Communicator, PeerNamesGiveTheWorldRank) {
  auto c = world();
  auto odd = c.split(c.rank() % 2);  // ranks 1, 3, ... and 0, 2, ...
  if (c.rank() % 2 == 0 && odd.size() > 1) {
    EXPECT_EQ(odd.peerName(1), "rank 1 (world rank 2)");
  }
  EXPECT_EQ(c.peerName(1), "rank 1");
  c.barrier();
}

}  // namespace
}  // namespace sluice
