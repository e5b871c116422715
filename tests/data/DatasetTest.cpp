// Datasets read real files and are a pure function of (seed, step).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "core/Error.h"
#include "data/Dataset.h"
#include "data/TokenFile.h"
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

// Issue 53: a token file truncated or rewritten while a job reads it ends in
// a DataError naming the file at the next batch (a memory mapping made the
// rank die with SIGBUS); the batches before the change are the file's.
TEST(TokenFile, AFileThatChangesUnderneathIsADataErrorNotSIGBUS) {
  const std::string path = testing::TempDir() + "/shrinks.bin";
  std::vector<uint16_t> ids(4096);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<uint16_t>(i % 200);
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(ids.data()), 2 * ids.size());
  data::TokenFile file(path, "uint16", 32, 256, 1);
  const auto first = file.slice(0, 2);
  EXPECT_EQ(first.input[1][0].item<int64_t>(), 32);  // window 1 starts at token 32
  ASSERT_EQ(::truncate(path.c_str(), 100), 0);
  try {
    file.slice(100, 127);  // windows past byte 100
    ADD_FAILURE() << "a truncated file was read";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("token file '" + path + "' changed while the job read it"), std::string::npos)
        << e.what();
  }
  try {
    file.batch(0, 4);
    ADD_FAILURE() << "a truncated file was read";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("8192 bytes at load, 100 now"), std::string::npos) << e.what();
  }
  std::remove(path.c_str());
}

// Issue 53: uint32 ids read with the default uint16 are refused (every other
// id would be 0), naming the setting that fixes it; read as uint32 they load.
TEST(TokenFile, Uint32IdsReadAsUint16AreRefused) {
  const std::string path = testing::TempDir() + "/wide.bin";
  std::vector<uint32_t> ids(2048);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<uint32_t>(1 + i % 250);
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(ids.data()), 4 * ids.size());
  try {
    data::TokenFile(path, "uint16", 32, 256, 1);
    ADD_FAILURE() << "uint32 ids were read as uint16";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("set data.token_dtype: uint32"), std::string::npos) << e.what();
  }
  EXPECT_EQ(data::TokenFile(path, "uint32", 32, 256, 1).tokens(), 2048);
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
