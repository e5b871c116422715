// safetensors: what saveSafeTensors writes, loadSafeTensors reads back
// bitwise (Python's reader is checked against it in tests/cli/torchscript.sh);
// the layout the format fixes; damaged files are DataErrors.
#include <gtest/gtest.h>
#include <torch/nn/modules/linear.h>

#include <cstdio>
#include <fstream>

#include "core/Error.h"
#include "checkpoint/SafeTensors.h"

namespace sluice {
namespace {

std::string readAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

TEST(SafeTensors, RoundTripsEveryDtypeBitwise) {
  torch::manual_seed(3);
  const std::string path = testing::TempDir() + "/t.safetensors";
  std::map<std::string, torch::Tensor> in = {
      {"a.weight", torch::randn({3, 5})},
      {"b.bf16", torch::randn({7}).to(torch::kBFloat16)},
      {"c.ids", torch::arange(6, torch::kLong).view({2, 3})},
      {"d.scalar", torch::tensor(2.5, torch::kDouble)},
      {"e.strided", torch::randn({4, 6}).t()}};  // written contiguous
  saveSafeTensors(path, in);
  const auto bytes = readAll(path);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
  EXPECT_EQ((8 + n) % 8, 0u) << "the data must start 8-byte aligned";
  EXPECT_EQ(bytes.compare(8, 1, "{"), 0) << "the header is a JSON object";
  const auto out = loadSafeTensors(path);
  ASSERT_EQ(out.size(), in.size());
  for (auto& [name, t] : in) {
    ASSERT_TRUE(out.count(name)) << name;
    EXPECT_EQ(out.at(name).scalar_type(), t.scalar_type()) << name;
    EXPECT_TRUE(torch::equal(out.at(name), t.contiguous())) << name;
  }
  std::remove(path.c_str());
}

TEST(SafeTensors, DamagedFilesAreDataErrors) {
  const std::string path = testing::TempDir() + "/bad.safetensors";
  saveSafeTensors(path, {{"w", torch::ones({64})}});
  const auto whole = readAll(path);
  auto write = [&](const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; };
  write(whole.substr(0, whole.size() - 4));  // truncated data
  EXPECT_THROW(loadSafeTensors(path), DataError);
  write(whole.substr(0, 5));  // shorter than the length field
  EXPECT_THROW(loadSafeTensors(path), DataError);
  write(std::string("\x04\0\0\0\0\0\0\0oops", 12));  // a header that is not JSON
  EXPECT_THROW(loadSafeTensors(path), DataError);
  EXPECT_THROW(loadSafeTensors(testing::TempDir() + "/none.safetensors"), DataError);
  std::remove(path.c_str());
}

// Issue 53: crafted headers end in a DataError that names the file and the
// reason: no crash (a value nested 100,000 levels deep used to overflow the
// stack while the message was built), no 4 TiB allocation for a huge shape,
// and what Python's reader refuses (a duplicated name, overlapping tensors,
// a gap, trailing bytes) is refused here too.
TEST(SafeTensors, CraftedHeadersAreRefusedWithTheirReason) {
  const std::string path = testing::TempDir() + "/crafted.safetensors";
  auto refusal = [&](const std::string& header, size_t dataBytes) -> std::string {
    std::string bytes(8, '\0');
    for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
    bytes += header + std::string(dataBytes, '\1');
    std::ofstream(path, std::ios::binary) << bytes;
    try {
      loadSafeTensors(path);
    } catch (const DataError& e) {
      return e.what();
    }
    return "accepted";
  };
  auto expectRefused = [&](const std::string& header, size_t dataBytes, const std::string& reason) {
    const auto message = refusal(header, dataBytes);
    EXPECT_NE(message.find(path), std::string::npos) << message;
    EXPECT_NE(message.find(reason), std::string::npos) << "expected '" << reason << "' in: " << message;
    EXPECT_LT(message.size(), 600u) << message;
  };
  const std::string f32 = R"("dtype":"F32","shape":[2],"data_offsets":)";
  EXPECT_EQ(refusal("{\"a\":{" + f32 + "[0,8]},\"b\":{" + f32 + "[8,16]}}", 16), "accepted");
  const int deep = 100000;
  expectRefused("{\"a\":" + std::string(deep, '[') + std::string(deep, ']') + "}", 0, "more than 64 levels deep");
  expectRefused("{\"a\":{\"dtype\":" + std::string(deep, '[') + std::string(deep, ']') + "}}", 0, "levels deep");
  expectRefused("{\"a\":{" + f32 + "[0,8]},\"a\":{" + f32 + "[8,16]}}", 16, "names the key \"a\" twice");
  expectRefused("{\"a\":{" + f32 + "[0,8]},\"b\":{" + f32 + "[4,12]}}", 16, "they overlap");
  expectRefused("{\"a\":{" + f32 + "[0,8]},\"b\":{" + f32 + "[12,20]}}", 20, "a gap");
  expectRefused("{\"a\":{" + f32 + "[0,8]}}", 12, "4 bytes after its last tensor");
  expectRefused(R"({"a":{"dtype":"F32","shape":[1048576,1048576],"data_offsets":[0,8]}})", 8,
                "larger than the file's whole data section");
  expectRefused(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8, "sizes are whole numbers");
  expectRefused(R"({"a":{"dtype":)" + std::string("\"") + std::string(5000, 'x') + R"(","shape":[2],"data_offsets":[0,8]}})", 8,
                "has dtype \"xxxx");
  expectRefused(R"({"__metadata__":{"format":7}})", 0, "__metadata__ is an object with 1 keys, not an object of strings");
  std::remove(path.c_str());
}

TEST(SafeTensors, WeightsAreCheckedAgainstTheModule) {
  torch::manual_seed(4);
  torch::nn::Linear model(3, 2), other(3, 2);
  const std::string path = testing::TempDir() + "/w.safetensors";
  saveSafeTensors(path, {{"weight", other->weight}, {"bias", other->bias}});
  EXPECT_EQ(loadWeights(*model, path), 2);
  EXPECT_TRUE(torch::equal(model->weight, other->weight));
  saveSafeTensors(path, {{"weight", other->weight}});  // no bias
  EXPECT_THROW(loadWeights(*model, path), ConfigError);
  saveSafeTensors(path, {{"weight", other->weight.t()}, {"bias", other->bias}});
  EXPECT_THROW(loadWeights(*model, path), ConfigError);
  saveSafeTensors(path, {{"weight", other->weight}, {"bias", other->bias}, {"extra", other->bias}});
  EXPECT_THROW(loadWeights(*model, path), ConfigError);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace sluice
