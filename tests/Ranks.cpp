#include "tests/Ranks.h"

#include <gtest/gtest.h>

#include <map>

namespace sluice::test {
namespace {

std::map<std::string, std::vector<int>>& registry() {
  static std::map<std::string, std::vector<int>> names;  // filled during static initialisation
  return names;
}

// "All/DistAdamModes" -> "DistAdamModes"; "Run/3" -> "Run": the part a TEST_P names.
std::string withoutInstance(const std::string& name, bool prefix) {
  const auto slash = prefix ? name.find('/') : name.rfind('/');
  if (slash == std::string::npos) return name;
  return prefix ? name.substr(slash + 1) : name.substr(0, slash);
}

}  // namespace

bool declareRanks(const char* name, std::vector<int> ranks) {
  registry()[name] = std::move(ranks);
  return true;
}

std::vector<int> ranksOf(const std::string& suite, const std::string& test, bool* declared) {
  const std::string fixture = withoutInstance(suite, true), base = withoutInstance(test, false);
  // The most specific name first: one test, one test of a TEST_P, the suite, the TEST_P fixture.
  for (const auto& key : {suite + "." + test, fixture + "." + base, suite, fixture}) {
    auto it = registry().find(key);
    if (it != registry().end()) {
      if (declared) *declared = true;
      return it->second;
    }
  }
  if (declared) *declared = false;
  return {1};
}

Communicator world() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  bool declared = false;
  if (info) ranksOf(info->test_suite_name(), info->name(), &declared);
  if (!declared) {
    ADD_FAILURE() << (info ? std::string(info->test_suite_name()) + "." + info->name() : std::string("this code"))
                  << " uses the MPI world but declares no rank counts: add SLUICE_TEST_RANKS(\""
                  << (info ? info->test_suite_name() : "Suite") << "\", N, ...) beside it (tests/Ranks.h), "
                  << "so that CTest runs it under mpirun -np N";
  }
  return Communicator::world();
}

}  // namespace sluice::test
