// The rank counts each gtest runs on, declared beside the test.
//
//   SLUICE_TEST_RANKS("Communicator", 2, 3);                     // every Communicator.* test, on 2 and on 3 ranks
//   SLUICE_TEST_RANKS("Communicator.PeerNamesGiveTheWorldRank", 3);  // one test: wins over its suite's line
//   SLUICE_TEST_RANKS("DistAdamModes", 1, 2, 3);                 // a TEST_P fixture: every instantiation of it
//
// A test without a declaration runs on 1 rank. CTest's entries come from
// these declarations (tests/Discover.cmake lists the binary's tests with
// `--sluice_list_tests`: one entry per suite and rank count, run under
// `mpirun -np N`, labelled npN), so no filter string has to be kept in step.
//
// Two rules make a wrong rank count impossible to miss:
// - the binary refuses to start (exit 1, naming the tests) when a selected
//   test is not declared for the world it finds (tests/TestMain.cpp);
// - tests take the MPI world from test::world(), which fails the test when
//   it has no declaration: a multi-rank test whose line was forgotten fails
//   on 1 rank instead of passing alone. (tests/layout/check_layout.py
//   refuses the Communicator's own world accessor in tests/.)
#pragma once

#include <string>
#include <vector>

#include "core/Communicator.h"

namespace sluice::test {

// Registers `name` (a suite, a TEST_P fixture, or Suite.Test) for these rank
// counts; the macro calls it at static initialisation. Returns true.
bool declareRanks(const char* name, std::vector<int> ranks);

// The rank counts of a test (its suite's name as gtest prints it, e.g.
// "All/DistAdamModes", and its name): the most specific declaration; {1}
// when there is none. `declared` tells whether one was found.
std::vector<int> ranksOf(const std::string& suite, const std::string& test, bool* declared = nullptr);

// The MPI world, for a test that declared its rank counts; fails the current
// test (and returns the world anyway) when it did not.
Communicator world();

}  // namespace sluice::test

#define SLUICE_TEST_RANKS_CAT2(a, b) a##b
#define SLUICE_TEST_RANKS_CAT(a, b) SLUICE_TEST_RANKS_CAT2(a, b)
#define SLUICE_TEST_RANKS(name, ...)                                                   \
  [[maybe_unused]] static const bool SLUICE_TEST_RANKS_CAT(sluiceTestRanks_, __LINE__) = \
      ::sluice::test::declareRanks(name, {__VA_ARGS__})
