// Datasets read real files and are a pure function of (seed, step).
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "core/Error.h"
#include "launcher/data/Dataset.h"
#include "launcher/data/TokenFile.h"
#include "optim/LrSchedule.h"

namespace sluice {
namespace {

const char* kFortunes = "/usr/share/games/fortunes";

TEST(TextDataset, ReadsFortunesAndSkipsBinaryIndexes) {
  data::TextDataset d(kFortunes, 32, 5);
  EXPECT_GT(d.numBytes(), 1000000);  // the package ships a few MB of text
  for (auto& f : d.files()) EXPECT_EQ(f.find(".dat"), std::string::npos) << f << " is a binary index";
}

TEST(TextDataset, BatchesAreDeterministicShiftedWindows) {
  data::TextDataset a(kFortunes, 32, 5), b(kFortunes, 32, 5);
  auto x = a.batch(3, 4), y = b.batch(3, 4);
  EXPECT_TRUE(torch::equal(x.input, y.input));
  EXPECT_FALSE(torch::equal(x.input, a.batch(4, 4).input));
  EXPECT_EQ(x.input.sizes(), (std::vector<int64_t>{4, 32}));
  // The target is the input shifted by one byte.
  EXPECT_TRUE(torch::equal(x.input.slice(1, 1, 32), x.target.slice(1, 0, 31)));
  EXPECT_LT(x.input.max().item<int64_t>(), 256);
}

// The vocabulary check reads a file's largest id once per process; a file
// rewritten in place (another size) is read again, not answered from memory.
TEST(TokenFile, ARewrittenFileIsCheckedAgain) {
  const std::string path = testing::TempDir() + "/ids.bin";
  const auto write = [&](std::vector<uint16_t> ids) {
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(ids.data()), 2 * ids.size());
  };
  write(std::vector<uint16_t>(40, 7));
  EXPECT_EQ(data::TokenFile(path, "uint16", 8, 16, 1).windows(), 4);
  EXPECT_EQ(data::TokenFile(path, "uint16", 8, 16, 1).windows(), 4);  // the second open: remembered
  std::vector<uint16_t> larger(48, 7);
  larger[45] = 20;
  write(larger);
  EXPECT_THROW(data::TokenFile(path, "uint16", 8, 16, 1), DataError);  // id 20 >= vocabulary 16
  std::remove(path.c_str());
}

TEST(TextDataset, TooSmallOrMissingIsADataError) {
  std::string path = testing::TempDir() + "/tiny.txt";
  std::ofstream(path) << "short";
  EXPECT_THROW(data::TextDataset(path, 32, 1), DataError);
  EXPECT_THROW(data::TextDataset("/no/such/file", 32, 1), DataError);
  std::remove(path.c_str());
}

TEST(LrSchedule, WarmupThenCosineToMinimum) {
  optim::LrSchedule s{optim::LrScheduleKind::Cosine, 1.0, 0.1, 10, 110};
  EXPECT_DOUBLE_EQ(s.at(0), 0.1);
  EXPECT_DOUBLE_EQ(s.at(9), 1.0);
  EXPECT_DOUBLE_EQ(s.at(10), 1.0);
  EXPECT_NEAR(s.at(60), 0.55, 1e-12);  // halfway: mean of lr and min_lr
  EXPECT_NEAR(s.at(110), 0.1, 1e-12);
  optim::LrSchedule c{optim::LrScheduleKind::Constant, 0.5, 0.0, 0, 100};
  EXPECT_DOUBLE_EQ(c.at(99), 0.5);
}

}  // namespace
}  // namespace sluice
