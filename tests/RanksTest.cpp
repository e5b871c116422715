// tests/Ranks.h: which rank counts a test declares, and what happens to a
// test that takes the MPI world without declaring any.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include "tests/Ranks.h"

namespace sluice {
namespace {

SLUICE_TEST_RANKS("TestRanksSuite", 2, 3);
SLUICE_TEST_RANKS("TestRanksSuite.OnlyThree", 3);
SLUICE_TEST_RANKS("TestRanksFixture", 1, 2);
SLUICE_TEST_RANKS("TestRanks.DeclaredWorld", 1);

TEST(TestRanks, TheMostSpecificDeclarationWins) {
  EXPECT_EQ(test::ranksOf("TestRanksSuite", "Anything"), (std::vector<int>{2, 3}));
  EXPECT_EQ(test::ranksOf("TestRanksSuite", "OnlyThree"), (std::vector<int>{3}));
  // A TEST_P's suite is "Instance/Fixture" and its tests "Name/Param".
  EXPECT_EQ(test::ranksOf("All/TestRanksFixture", "Matches/hooks"), (std::vector<int>{1, 2}));
  bool declared = true;
  EXPECT_EQ(test::ranksOf("NotDeclaredAnywhere", "Test", &declared), (std::vector<int>{1}));
  EXPECT_FALSE(declared);
  test::ranksOf("TestRanksSuite", "Anything", &declared);
  EXPECT_TRUE(declared);
}

TEST(TestRanks, TheWorldWithoutADeclarationFailsTheTest) {
  EXPECT_NONFATAL_FAILURE(test::world(), "uses the MPI world but declares no rank counts");
}

TEST(TestRanks, DeclaredWorld) { EXPECT_EQ(test::world().size(), 1); }

}  // namespace
}  // namespace sluice
