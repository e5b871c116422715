// GoogleTest main for Sluice: initializes MPI (a singleton when not started
// by mpirun) so that single-process and multi-rank tests share one binary.
#include <gtest/gtest.h>

#include "core/Communicator.h"

int main(int argc, char** argv) {
  sluice::Communicator::initialize(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  // Only rank 0 prints the per-test progress; failures still print everywhere.
  if (sluice::Communicator::world().rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  int rc = RUN_ALL_TESTS();
  // Make a failure on any rank fail the whole mpirun.
  int failed = rc != 0 ? 1 : 0, anyFailed = 0;
  MPI_Allreduce(&failed, &anyFailed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  sluice::Communicator::finalize();
  return anyFailed ? 1 : 0;
}
