// Issue 53: every reader of a foreign file, fed 10,000 seeded mutations of
// a valid file, either reads it or refuses it with Sluice's own error (a
// sluice::Error naming what is wrong): never a crash (a crash ends this
// test), never another exception type (raw library text such as
// "unordered_map::at"). The mutations (a deterministic mt19937_64 stream,
// so a failure reproduces): bit flips, bytes set to values that matter to
// the formats (0, 0xff, '{', '[', '"', '-', '9'), ranges deleted,
// duplicated or shuffled, truncation, and, for the text formats, JSON or
// YAML tokens spliced in. Readers:
//   safetensors       loadSafeTensors (checkpoint/SafeTensors.h)
//   untrusted JSON    parseUntrustedJson on a torch.export program record
//   .pt2 programs     models::ExportedModel::load on tests/fixtures/tiny.pt2
//                     with its model record mutated inside a valid archive
//   token files       data::TokenFile (llm.c header and ids)
//   checkpoints       openCheckpoint + loadCheckpoint (manifest.yaml mutated)
//   plans             partition::Plan::fromBytes
//   profiles, graphs  OpGraph::fromProtoBytes
#include <gtest/gtest.h>

#include <caffe2/serialize/inline_container.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <random>

#include "core/Communicator.h"
#include "core/Error.h"
#include "core/Files.h"
#include "core/OpGraph.h"
#include "core/UntrustedJson.h"
#include "checkpoint/Checkpoint.h"
#include "checkpoint/SafeTensors.h"
#include "data/TokenFile.h"
#include "models/Exported.h"
#include "partition/Plan.h"
#include "tests/TestUtil.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;
constexpr int kInputs = 10000;

class Mutator {
 public:
  explicit Mutator(uint64_t seed) : rng_(seed) {}
  std::string operator()(std::string s, bool text) {
    const int n = 1 + static_cast<int>(pick(4));
    for (int k = 0; k < n; ++k) mutateOnce(s, text);
    return s;
  }

 private:
  uint64_t pick(uint64_t n) { return n == 0 ? 0 : rng_() % n; }
  void mutateOnce(std::string& s, bool text) {
    static const char kBytes[] = {'\0', '\xff', '{', '[', '"', '-', '9', ':', ','};
    static const char* kTokens[] = {"[",  "]",  "{", "}", "\"", ",", ":", "-1", "1e308", "99999999999999999999",
                                    "null", "true", "\"x\"", "- ", "\n", "  ", "{\"a\":1}", "[[[[", "!!", "&a *a"};
    const size_t len = s.size();
    switch (pick(text ? 8 : 6)) {
      case 0:
        if (len) s[pick(len)] ^= static_cast<char>(1u << pick(8));
        break;
      case 1:
        if (len) s[pick(len)] = kBytes[pick(sizeof(kBytes))];
        break;
      case 2:
        if (len) {
          const size_t at = pick(len), n = pick(std::min<size_t>(len - at, 64)) + 1;
          s.erase(at, n);
        }
        break;
      case 3:
        if (len) {
          const size_t at = pick(len), n = pick(std::min<size_t>(len - at, 64)) + 1;
          s.insert(pick(len), s.substr(at, n));
        }
        break;
      case 4:
        s.resize(pick(len + 1));
        break;
      case 5:
        if (len > 1) std::swap(s[pick(len)], s[pick(len)]);
        break;
      default: {
        const char* t = kTokens[pick(sizeof(kTokens) / sizeof(kTokens[0]))];
        s.insert(pick(len + 1), t);
      }
    }
  }
  std::mt19937_64 rng_;
};

// Runs `read` on kInputs mutations of `seed`; counts reads and refusals, and
// fails on any exception that is not Sluice's own.
void fuzz(const std::string& name, const std::string& seed, bool text, const std::function<void(const std::string&)>& read,
          uint64_t rngSeed) {
  Mutator mutate(rngSeed);
  int accepted = 0, refused = 0, foreign = 0;
  std::string firstForeign;
  ASSERT_NO_THROW(read(seed)) << name << ": the seed itself is refused";
  for (int i = 0; i < kInputs; ++i) {
    const std::string input = mutate(seed, text);
    try {
      read(input);
      ++accepted;
    } catch (const Error&) {
      ++refused;
    } catch (const std::exception& e) {
      if (foreign++ == 0) firstForeign = "input " + std::to_string(i) + ": " + std::string(e.what()).substr(0, 300);
    }
  }
  std::cout << name << ": " << kInputs << " mutated inputs: " << accepted << " read, " << refused
            << " refused with a Sluice error, " << foreign << " other exceptions" << std::endl;
  EXPECT_EQ(accepted + refused + foreign, kInputs);
  EXPECT_EQ(foreign, 0) << name << ": not refused with Sluice's own error, first: " << firstForeign;
}

struct Scratch {
  fs::path dir;
  explicit Scratch(const std::string& name) : dir(fs::path(testing::TempDir()) / ("fuzz_" + name)) {
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  ~Scratch() { fs::remove_all(dir); }
  std::string write(const std::string& file, const std::string& bytes) const {
    const auto p = (dir / file).string();
    std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes;
    return p;
  }
};

TEST(FuzzReaders, SafeTensors) {
  Scratch s("safetensors");
  const auto seedPath = (s.dir / "seed.safetensors").string();
  saveSafeTensors(seedPath, {{"a.weight", torch::randn({3, 4})}, {"b", torch::arange(5)}, {"c", torch::ones({2}, torch::kBFloat16)}},
                  {{"format", "pt"}});
  fuzz("safetensors", readFile(seedPath), false, [&](const std::string& in) { loadSafeTensors(s.write("in.safetensors", in)); },
       1);
}

// The torch.export program record of the fixture (valid JSON), and the whole program with it mutated.
std::string fixture() {
  const char* root = std::getenv("SLUICE_SOURCE_DIR");  // set by CTest and scripts/gtest.sh
  return std::string(root ? root : ".") + "/tests/fixtures/tiny.pt2";
}

std::string programRecord(std::string* name) {
  caffe2::serialize::PyTorchStreamReader zip(fixture());
  for (const auto& r : zip.getAllRecords()) {
    if (r.find("models/") == 0 && r.size() > 5 && r.substr(r.size() - 5) == ".json") {
      *name = r;
      auto [data, size] = zip.getRecord(r);
      return std::string(static_cast<const char*>(data.get()), size);
    }
  }
  return "";
}

TEST(FuzzReaders, UntrustedJson) {
  std::string record;
  const auto text = programRecord(&record);
  ASSERT_FALSE(text.empty()) << fixture() << " has no models/*.json";
  fuzz("untrusted JSON", text, true, [](const std::string& in) { parseUntrustedJson(in, "model.json"); }, 2);
}

TEST(FuzzReaders, ExportedProgram) {
  Scratch s("pt2");
  std::string record;
  const auto text = programRecord(&record);
  ASSERT_FALSE(text.empty());
  caffe2::serialize::PyTorchStreamReader zip(fixture());
  std::vector<std::pair<std::string, std::string>> others;
  for (const auto& r : zip.getAllRecords()) {
    if (r == record) continue;
    auto [data, size] = zip.getRecord(r);
    others.emplace_back(r, std::string(static_cast<const char*>(data.get()), size));
  }
  const auto path = (s.dir / "tiny.pt2").string();  // the fixture's archive name
  auto write = [&](const std::string& program) {
    caffe2::serialize::PyTorchStreamWriter out(path);
    for (const auto& [name, bytes] : others) out.writeRecord(name, bytes.data(), bytes.size());
    out.writeRecord(record, program.data(), program.size());
    out.writeEndOfFile();
  };
  fuzz("exported program", text, true, [&](const std::string& in) {
    write(in);
    models::ExportedModel::load(path);
  }, 3);
}

TEST(FuzzReaders, TokenFile) {
  Scratch s("tokens");
  std::string seed(data::TokenFile::kHeaderInts * 4, '\0');
  const int32_t header[3] = {data::TokenFile::kHeaderMagic, 1, 300};
  std::memcpy(seed.data(), header, sizeof(header));
  for (int i = 0; i < 300; ++i) {
    const uint16_t id = static_cast<uint16_t>((i * 37) % 250);
    seed.append(reinterpret_cast<const char*>(&id), 2);
  }
  fuzz("token file", seed, false, [&](const std::string& in) {
    data::TokenFile f(s.write("ids.bin", in), "uint16", 16, 256, 1);
    f.batch(0, 4);
  }, 4);
}

TEST(FuzzReaders, CheckpointManifest) {
  Scratch s("checkpoint");
  CheckpointInfo info;
  info.step = 2;
  CheckpointLayout layout;
  layout.graphHash = "abc";
  layout.model = {{"name", "gpt"}};
  RankState state;
  state.tensors["w"] = torch::ones({4});
  optim::AdamState adam;
  adam.expAvg = torch::zeros({4});
  adam.expAvgSq = torch::zeros({4});
  adam.step = 2;
  state.adam["w"] = adam;
  state.rng = torch::zeros({8}, torch::kUInt8);
  const auto dir = saveCheckpoint((s.dir / "ck").string(), info, layout, state, 0, Communicator::self(), 0);
  const auto manifest = (fs::path(dir) / "manifest.yaml").string();
  const std::string seed = readFile(manifest);
  fuzz("checkpoint manifest", seed, true, [&](const std::string& in) {
    s.write(fs::path(manifest).lexically_relative(s.dir).string(), in);
    const auto m = openCheckpoint(dir, layout);
    loadCheckpoint(m, {"w"}, {"w"}, 0, true);
  }, 5);
}

TEST(FuzzReaders, Plan) {
  partition::Plan plan;
  plan.graphHash = "abc";
  plan.schedule = &pipeline::scheduleKind("1f1b");
  plan.stages.resize(2);
  plan.stages[0].endNode = 3;
  plan.stages[1].index = 1;
  plan.stages[1].firstNode = 3;
  plan.stages[1].endNode = 7;
  plan.stages[0].params = {"w"};
  fuzz("plan", plan.toBytes(), false, [](const std::string& in) { partition::Plan::fromBytes(in, "fuzz"); }, 6);
}

TEST(FuzzReaders, ProfileGraph) {
  torch::manual_seed(0);
  models::Gpt gpt(test::tinyGpt(1));
  const auto graph = test::captureGpt(gpt, 1, 4);
  fuzz("profile graph", graph.toProtoBytes(), false, [](const std::string& in) { OpGraph::fromProtoBytes(in); }, 7);
}

}  // namespace
}  // namespace sluice
