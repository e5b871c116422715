// GoogleTest main for Sluice: initializes MPI (a singleton when not started
// by mpirun) so that single-process and multi-rank tests share one binary.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdlib>
#include <iostream>

#include "core/Communicator.h"

namespace {

// On ranks other than 0: the failures only, with their rank.
class FailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (!r.failed()) return;
    std::cerr << "[rank " << rank_ << "] " << (r.file_name() ? r.file_name() : "?") << ":" << r.line_number()
              << ": Failure\n" << r.summary() << std::endl;
  }

 private:
  int rank_;
};

// Multi-rank runs: a failed test ends every rank at once (MPI_Abort), so
// that its peers, which may be waiting for messages the failed rank will
// never send, do not hang the job; the failure is printed first.
class AbortOnFailure : public ::testing::EmptyTestEventListener {
 public:
  explicit AbortOnFailure(int rank) : rank_(rank) {}
  void OnTestEnd(const ::testing::TestInfo& info) override {
    if (!info.result()->Failed()) return;
    std::cerr << "[rank " << rank_ << "] " << info.test_suite_name() << "." << info.name()
              << " failed: ending every rank (its peers could wait for it forever)" << std::endl;
    MPI_Abort(MPI_COMM_WORLD, 1);
  }

 private:
  int rank_;
};

}  // namespace

int main(int argc, char** argv) {
  sluice::Communicator::initialize(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  // Only rank 0 prints the per-test progress; failures still print everywhere.
  const int rank = sluice::Communicator::world().rank();
  if (rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new FailurePrinter(rank));
  }
  if (sluice::Communicator::world().size() > 1) {
    ::testing::UnitTest::GetInstance()->listeners().Append(new AbortOnFailure(rank));
  }
  int rc = RUN_ALL_TESTS();
  // Make a failure on any rank fail the whole mpirun.
  int failed = rc != 0 ? 1 : 0, anyFailed = 0;
  MPI_Allreduce(&failed, &anyFailed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  sluice::Communicator::finalize();
  if (anyFailed) return 1;
  // Every selected test skipped (CUDA tests without a GPU): the code CTest
  // counts as skipped (SKIP_RETURN_CODE), when it asks for one.
  const auto* unit = ::testing::UnitTest::GetInstance();
  const char* skippedRc = std::getenv("SLUICE_SKIPPED_RC");
  if (skippedRc && unit->test_to_run_count() > 0 && unit->skipped_test_count() == unit->test_to_run_count()) {
    return std::atoi(skippedRc);
  }
  return 0;
}
