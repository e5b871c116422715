// GoogleTest main for Sluice: initializes MPI (a singleton when not started
// by mpirun) so that single-process and multi-rank tests share one binary.
// `--sluice_list_tests` prints every test with its rank counts (tests/Ranks.h)
// for CTest (tests/Discover.cmake), without starting MPI.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <cstring>
#include <iostream>
#include <sstream>

#include "core/Communicator.h"
#include "tests/Ranks.h"

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

// This process's temporary folder (main), removed at its end.
std::string ownTemp;
void removeOwnTemp() {
  std::error_code ignored;
  if (!ownTemp.empty()) std::filesystem::remove_all(ownTemp, ignored);
}

// Calls f(suite, test, info) for every test the binary has but disabled ones.
template <class F>
void forEachTest(F f) {
  const auto* unit = ::testing::UnitTest::GetInstance();
  for (int i = 0; i < unit->total_test_suite_count(); ++i) {
    const auto* suite = unit->GetTestSuite(i);
    for (int j = 0; j < suite->total_test_count(); ++j) {
      const auto* info = suite->GetTestInfo(j);
      if (std::strncmp(info->name(), "DISABLED_", 9) == 0 || std::strncmp(suite->name(), "DISABLED_", 9) == 0) continue;
      f(std::string(suite->name()), std::string(info->name()), *info);
    }
  }
}

std::string joined(const std::vector<int>& v, const char* sep) {
  std::ostringstream out;
  for (size_t i = 0; i < v.size(); ++i) out << (i ? sep : "") << v[i];
  return out.str();
}

// One line per test: SUITE TEST RANKS (comma-separated).
int listTests() {
  forEachTest([](const std::string& suite, const std::string& test, const ::testing::TestInfo&) {
    std::cout << suite << " " << test << " " << joined(sluice::test::ranksOf(suite, test), ",") << "\n";
  });
  return 0;
}

// Before the first test (gtest has applied the filter): every selected test
// must be declared for this world's size, else no test runs (Note in tests/Ranks.h).
class RankCountCheck : public ::testing::EmptyTestEventListener {
 public:
  RankCountCheck(int rank, int size) : rank_(rank), size_(size) {}
  void OnTestProgramStart(const ::testing::UnitTest&) override {
    std::ostringstream wrong;
    int count = 0;
    forEachTest([&](const std::string& suite, const std::string& test, const ::testing::TestInfo& info) {
      if (!info.should_run()) return;
      const auto ranks = sluice::test::ranksOf(suite, test);
      if (std::find(ranks.begin(), ranks.end(), size_) != ranks.end()) return;
      if (count++ < 10) wrong << "  " << suite << "." << test << " runs on " << joined(ranks, " or ") << " rank(s)\n";
    });
    if (count == 0) return;
    if (rank_ == 0) {
      std::cerr << "sluice_tests: " << count << " selected test(s) do not run on a world of " << size_
                << " (tests/Ranks.h):\n" << wrong.str()
                << "Run them as CTest does (`ctest -R NAME`, `ctest -L np2`) or with scripts/gtest.sh NAME, which "
                   "starts mpirun with the declared rank counts." << std::endl;
    }
    sluice::Communicator::finalize();
    removeOwnTemp();
    std::exit(1);
  }

 private:
  int rank_, size_;
};

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--sluice_list_tests") == 0) {
      ::testing::InitGoogleTest(&argc, argv);
      return listTests();
    }
  }
  sluice::Communicator::initialize(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  // testing::TempDir() is this process's own (gtest reads TEST_TMPDIR), so
  // that tests running side by side (ctest -j, two checkouts) never share a file.
  if (!std::getenv("TEST_TMPDIR")) {
    char tmpl[] = "/tmp/sluice_tests_XXXXXX";
    if (::mkdtemp(tmpl)) {
      ownTemp = tmpl;
      ::setenv("TEST_TMPDIR", (ownTemp + "/").c_str(), 1);
    }
  }
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
  ::testing::UnitTest::GetInstance()->listeners().Append(
      new RankCountCheck(rank, sluice::Communicator::world().size()));
  int rc = RUN_ALL_TESTS();
  // Make a failure on any rank fail the whole mpirun.
  int failed = rc != 0 ? 1 : 0, anyFailed = 0;
  MPI_Allreduce(&failed, &anyFailed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  sluice::Communicator::finalize();
  removeOwnTemp();
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
