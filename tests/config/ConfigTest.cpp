// Config: defaults, overrides, and malformed configs with their messages.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "core/Error.h"
#include "config/Config.h"

namespace sluice {
namespace {

const char* kValid = R"(
job: {output_dir: /tmp/sluice-config-test, seed: 7}
model: {name: gpt, layers: 2, heads: 2, embd: 32, block_size: 16}
data: {name: synthetic}
training: {steps: 5, global_batch_size: 8, micro_batch_size: 2}
pipeline: {stages: 2, schedule: gpipe, microbatches: 4}
)";

// The same job with model.name: exported, whose program fixes the model's sizes.
const char* kExported = R"(
job: {output_dir: /tmp/sluice-config-test, seed: 7}
model: {name: exported}
data: {name: synthetic}
training: {steps: 5, global_batch_size: 8, micro_batch_size: 2}
pipeline: {stages: 2, schedule: gpipe, microbatches: 4}
)";

TEST(Config, ValidConfigAndDefaults) {
  auto c = Config::fromYamlText(kValid);
  EXPECT_EQ(c.job.seed, 7);
  EXPECT_EQ(c.pipeline.stages, 2);
  EXPECT_EQ(c.pipeline.schedule.name(), "gpipe");
  EXPECT_EQ(c.worldSize(), 2);
  EXPECT_EQ(c.optimizer.name, optim::OptimizerKind::AdamW);  // default
  EXPECT_EQ(c.logging.interval, 10);     // default
}

TEST(Config, MicroBatchesAreDerivedWhenOmitted) {
  auto c = Config::fromYamlText(kValid, {"pipeline.microbatches=0", "training.global_batch_size=12"});
  EXPECT_EQ(c.pipeline.microbatches, 6);
}

TEST(Config, OverridesTakePrecedence) {
  auto c = Config::fromYamlText(kValid, {"training.steps=100", "pipeline.schedule=1f1b", "pipeline.cuts=[40]",
                                         "optimizer.lr=0.5"});
  EXPECT_EQ(c.training.steps, 100);
  EXPECT_EQ(c.pipeline.schedule.name(), "1f1b");
  EXPECT_EQ(c.pipeline.cuts, std::vector<int>{40});
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 0.5);
  EXPECT_TRUE(c.pipeline.fitSchedule);  // default
  EXPECT_FALSE(Config::fromYamlText(kValid, {"pipeline.fit_schedule=false"}).pipeline.fitSchedule);
  EXPECT_DOUBLE_EQ(c.pipeline.minOpLevelGain, 0.03);  // default
  EXPECT_DOUBLE_EQ(Config::fromYamlText(kValid, {"pipeline.partition.min_op_level_gain=0"}).pipeline.minOpLevelGain, 0);
}

TEST(Config, DataParallelWithDistAdam) {
  auto c = Config::fromYamlText(kValid, {"pipeline.data_parallel=2", "training.global_batch_size=16",
                                         "optimizer.name=dist_adam", "optimizer.dist_adam.mode=after_backward"});
  EXPECT_EQ(c.worldSize(), 4);
  EXPECT_EQ(c.optimizer.distAdamMode, optim::DistAdamMode::AfterBackward);
}

TEST(Config, ResolvedYamlRoundTrips) {
  auto c = Config::fromYamlText(kValid, {"pipeline.cuts=[12]"});
  auto again = Config::fromYamlText(c.toYaml());
  EXPECT_EQ(again.toYaml(), c.toYaml());
  EXPECT_EQ(again.pipeline.cuts, std::vector<int>{12});
}

// config.resolved.yaml writes the data keys that apply to data.name.
TEST(Config, ResolvedYamlWritesTheDataKeysOfItsData) {
  const auto data = [](const std::string& yaml) {
    const auto text = Config::fromYamlText(yaml).toYaml();
    return text.substr(text.find("\ndata:"), text.find("\ntraining:") - text.find("\ndata:"));
  };
  const auto synthetic = data(kValid);
  EXPECT_EQ(synthetic.find("path"), std::string::npos) << synthetic;
  EXPECT_EQ(synthetic.find("eval_split"), std::string::npos) << synthetic;
  EXPECT_EQ(synthetic.find("token_dtype"), std::string::npos) << synthetic;
  const auto text = data(std::regex_replace(kValid, std::regex("name: synthetic"), "name: text"));
  EXPECT_NE(text.find("path: /usr/share/games/fortunes"), std::string::npos) << text;
  EXPECT_EQ(text.find("eval_split"), std::string::npos) << text;
  EXPECT_EQ(text.find("token_dtype"), std::string::npos) << text;
}

struct Malformed {
  const char* what;
  std::vector<std::string> overrides;
  const char* yaml;  // nullptr: kValid
  const char* message;
};

// Memory policies work under every schedule (Note [split backward memory],
// memory/StageMemory.h): full recompute with zero bubble and interleaving is
// accepted.
TEST(Config, FullRecomputeWorksWithEverySchedule) {
  for (const char* schedule : {"zb-h1", "interleaved", "interleaved-zb"}) {
    auto c = Config::fromYamlText(kValid, {std::string("pipeline.schedule=") + schedule, "pipeline.stages=2",
                                          "memory.policy=full_recompute"});
    EXPECT_EQ(c.memory.policy, memory::MemoryPolicy::FullRecompute) << schedule;
    EXPECT_EQ(c.pipeline.schedule.name(), schedule);
  }
}

class MalformedConfig : public ::testing::TestWithParam<Malformed> {};

TEST_P(MalformedConfig, IsRejectedWithItsMessage) {
  const auto& m = GetParam();
  try {
    Config::fromYamlText(m.yaml ? m.yaml : kValid, m.overrides);
    FAIL() << m.what << ": accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(m.message), std::string::npos)
        << m.what << "\n  got:      " << e.what() << "\n  expected: " << m.message;
  }
}

// (An array and ValuesIn: ::testing::Values over a hundred arguments is a
// variadic template that took this file 12 s to compile.)
const Malformed kMalformed[] = {
        Malformed{"unknown key", {"pipeline.stagez=2"}, nullptr, "unknown key 'pipeline.stagez'"},
        Malformed{"unknown section", {"trainer.steps=2"}, nullptr, "unknown section 'trainer'"},
        Malformed{"unknown precision", {"training.precision=fp8"}, nullptr,
                  "training.precision: unknown precision 'fp8' (expected fp32 | bf16 | fp16)"},
        Malformed{"fp16 on a CPU job", {"training.precision=fp16"}, nullptr,
                  "training.precision fp16 needs job.device: cuda"},
        Malformed{"loss scale not a power of two", {"training.loss_scale=3000"}, nullptr,
                  "training.loss_scale must be a power of two >= 1 (e.g. 65536 = 2^16), got 3000"},
        Malformed{"loss scale window 0", {"training.loss_scale_window=0"}, nullptr,
                  "training.loss_scale_window must be >= 1, got 0"},
        Malformed{"loss scale without fp16", {"training.loss_scale=1024"}, nullptr,
                  "training.loss_scale and training.loss_scale_window are for training.precision: fp16 (loss "
                  "scaling); precision is fp32: remove them"},
        Malformed{"unknown boundary dtype", {"pipeline.boundary_dtype=half"}, nullptr,
                  "pipeline.boundary_dtype: unknown boundary dtype 'half' (expected graph | compute)"},
        Malformed{"boundary dtype compute in fp32", {"pipeline.boundary_dtype=compute"}, nullptr,
                  "pipeline.boundary_dtype: compute sends boundary activations and gradients in training.precision's "
                  "dtype, but training.precision is fp32 (nothing to halve)"},
        Malformed{"negative clipping norm", {"optimizer.clip_grad_norm=-1"}, nullptr,
                  "optimizer.clip_grad_norm must be >= 0 (the largest global gradient norm; 0 = no clipping), got -1"},
        Malformed{"batch does not divide", {"training.global_batch_size=10"}, nullptr,
                  "training.global_batch_size (10) must equal training.micro_batch_size (2) x pipeline.microbatches "
                  "(4) x pipeline.data_parallel (1) = 8"},
        Malformed{"derived micro-batches do not divide", {"pipeline.microbatches=0", "training.global_batch_size=7"},
                  nullptr, "training.global_batch_size (7) must be divisible by training.micro_batch_size (2)"},
        // (the test binary's table also holds a toy schedule: tests/pipeline/ToySchedule.cpp)
        Malformed{"bad schedule", {"pipeline.schedule=zigzag"}, nullptr,
                  "pipeline.schedule must be gpipe, 1f1b, zb-h1, interleaved, interleaved-zb, "},
        Malformed{"fit_schedule not a bool", {"pipeline.fit_schedule=maybe"}, nullptr, "pipeline.fit_schedule"},
        Malformed{"empty DistAdam buckets", {"optimizer.dist_adam.bucket_mb=0"}, nullptr,
                  "optimizer.dist_adam.bucket_mb must be > 0"},
        Malformed{"negative op-level gain", {"pipeline.partition.min_op_level_gain=-0.1"}, nullptr,
                  "pipeline.partition.min_op_level_gain must be in [0, 1)"},
        Malformed{"op-level gain not a number", {"pipeline.partition.min_op_level_gain=lots"}, nullptr,
                  "pipeline.partition.min_op_level_gain"},
        Malformed{"chunks without interleaving", {"pipeline.chunks=2"}, nullptr,
                  "pipeline.chunks = 2 (stages per rank) needs pipeline.schedule: interleaved, interleaved-zb, zbv or auto"},
        Malformed{"zbv with 3 chunks", {"pipeline.schedule=zbv", "pipeline.chunks=3"}, nullptr,
                  "pipeline.schedule zbv places exactly 2 stages per rank (in a V), but pipeline.chunks is 3"},
        Malformed{"interleaved on one stage", {"pipeline.schedule=interleaved", "pipeline.stages=1"}, nullptr,
                  "pipeline.schedule interleaved needs pipeline.stages >= 2"},
        Malformed{"interleaved micro-batches", {"pipeline.schedule=interleaved", "pipeline.stages=3"}, nullptr,
                  "pipeline.microbatches (4) must be a multiple of pipeline.stages (3)"},
        Malformed{"interleaved-zb micro-batches", {"pipeline.schedule=interleaved-zb", "pipeline.stages=3"}, nullptr,
                  "pipeline.schedule interleaved-zb takes micro-batches pipeline.stages at a time: "
                  "pipeline.microbatches (4) must be a multiple of pipeline.stages (3)"},
        Malformed{"zero stages", {"pipeline.stages=0"}, nullptr, "pipeline.stages must be >= 1, got 0"},
        Malformed{"not an integer", {"training.steps=many"}, nullptr,
                  "training.steps: expected an integer, got 'many'"},
        Malformed{"heads do not divide embd", {"model.heads=3"}, nullptr,
                  "model.embd (32) must be divisible by model.heads (3)"},
        Malformed{"unknown model", {"model.name=resnet"}, nullptr, "model.name: unknown model 'resnet' (expected gpt | llama | mlp | cnn | torchscript | exported)"},
        Malformed{"unknown data", {"data.name=imagenet"}, nullptr,
                  "data.name: unknown data 'imagenet' (expected text | synthetic | fashion_mnist | tokens)"},
        Malformed{"unknown optimizer", {"optimizer.name=sgd"}, nullptr,
                  "optimizer.name: unknown optimizer 'sgd' (expected adamw | dist_adam)"},
        Malformed{"unknown lr schedule", {"optimizer.schedule=linear"}, nullptr,
                  "optimizer.schedule: unknown learning-rate schedule 'linear' (expected constant | cosine)"},
        Malformed{"cnn without blocks", {"model.name=cnn", "data.name=fashion_mnist", "model.channels=[]"}, nullptr,
                  "model.channels must list 1 to 4 block widths"},
        Malformed{"torchscript without a file", {"model.name=torchscript"}, nullptr,
                  "model.name=torchscript needs model.path"},
        Malformed{"torchscript file missing", {"model.name=torchscript", "model.path=/nonexistent/model.pt"}, nullptr,
                  "model.path '/nonexistent/model.pt' is not a file"},
        Malformed{"exported without a file", {}, kExported, "model.name=exported needs model.path"},
        Malformed{"exported: not an archive", {"model.path=/etc/hostname"}, kExported,
                  "model.path '/etc/hostname' is not a torch.export archive"},
        // Issue 53: sizes given for a program that fixes them would be dropped without a word.
        Malformed{"exported with the GPT's sizes", {"model.name=exported", "model.path=/etc/hostname"}, nullptr,
                  "model.block_size does not apply to model.name: exported (the program fixes its sizes and layers)"},
        Malformed{"exported with a vocabulary", {"model.vocab_size=50257", "model.path=/etc/hostname"}, kExported,
                  "model.vocab_size does not apply to model.name: exported"},
        Malformed{"torchscript inputs not a list", {"model.name=torchscript", "model.path=/etc/hostname", "model.inputs=3"},
                  nullptr, "model.inputs must be a list of {name, shape, dtype}"},
        Malformed{"torchscript input shape", {"model.name=torchscript", "model.path=/etc/hostname", "data.name=text",
                  "model.inputs=[{name: x, shape: [4, 4], dtype: float32}]"}, nullptr,
                  "data.name=text gives windows of byte tokens, so the input must be shape [block_size] with dtype int64"},
        Malformed{"torchscript loss unknown", {"model.name=torchscript", "model.path=/etc/hostname",
                  "model.inputs=[{name: x, shape: [8], dtype: int64}]", "model.targets={shape: [8], dtype: int64}",
                  "model.loss=hinge"}, nullptr, "model.loss must be cross_entropy, mse or none"},
        Malformed{"torchscript input dtype", {"model.name=torchscript", "model.path=/etc/hostname",
                  "model.inputs=[{name: x, shape: [8], dtype: float16}]"}, nullptr,
                  "config error: model.inputs[0].dtype must be float32 or int64, got 'float16'"},
        Malformed{"torchscript targets dtype", {"model.name=torchscript", "model.path=/etc/hostname",
                  "model.inputs=[{name: x, shape: [8], dtype: int64}]", "model.targets={shape: [8], dtype: int32}"},
                  nullptr, "config error: model.targets.dtype must be float32 or int64, got 'int32'"},
        Malformed{"cuts vs stages", {"pipeline.cuts=[10, 20]"}, nullptr,
                  "pipeline.cuts lists 2 cuts but pipeline.stages (2) needs 1"},
        Malformed{"decreasing cuts", {"pipeline.stages=3", "pipeline.cuts=[20, 10]"}, nullptr,
                  "pipeline.cuts must be increasing"},
        Malformed{"missing data path", {"data.name=text", "model.vocab_size=256", "data.path=/no/such/corpus"}, nullptr,
                  "data.path '/no/such/corpus' does not exist"},
        Malformed{"bad lr", {"optimizer.lr=-1"}, nullptr, "optimizer.lr must be > 0"},
        Malformed{"section is not a map", {}, "training: 5\n", "'training' must be a mapping"},
        Malformed{"invalid YAML", {}, "pipeline: {stages: 2\n", "is not valid YAML"},
        Malformed{"override without value", {"pipeline.stages"}, nullptr, "--set expects key=value"},
        Malformed{"data parallel needs dist_adam", {"pipeline.data_parallel=2", "training.global_batch_size=16"},
                  nullptr, "pipeline.data_parallel = 2 needs optimizer.name = dist_adam"},
        Malformed{"unknown dist_adam key", {"optimizer.name=dist_adam", "optimizer.dist_adam.mod=hooks"}, nullptr,
                  "unknown key 'optimizer.dist_adam.mod'"},
        Malformed{"bad dist_adam mode", {"optimizer.name=dist_adam", "optimizer.dist_adam.mode=ring"}, nullptr,
                  "optimizer.dist_adam.mode: unknown DistAdam mode 'ring' (expected hooks | after_backward | allreduce)"},
        Malformed{"byte text needs 256 tokens", {"data.name=text", "model.vocab_size=100"}, nullptr,
                  "model.vocab_size must be >= 256 for byte-level text"},
        Malformed{"empty file", {}, "", "is empty: give at least the model and training sections"},
        Malformed{"only a comment", {}, "# nothing here\n", "is empty"},
        Malformed{"bad nan policy", {"training.nan_policy=ignore"}, nullptr,
                  "training.nan_policy: unknown nan policy 'ignore' (expected abort | skip)"},
        Malformed{"negative checkpoint interval", {"checkpoint.interval=-1"}, nullptr,
                  "checkpoint.interval must be >= 0 (0 = off)"},
        Malformed{"resume from nowhere", {"checkpoint.resume=/no/such/checkpoint"}, nullptr,
                  "checkpoint.resume '/no/such/checkpoint' is neither auto, none nor an existing checkpoint directory"},
        Malformed{"resume from an empty path", {"checkpoint.resume=''"}, nullptr,
                  "checkpoint.resume must be auto, none or a checkpoint directory"},
        // pipeline.execution: graphs (pipeline/StageGraphs.h): CUDA only, and not with what needs autograd each step.
        Malformed{"graphs on cpu", {"pipeline.execution=graphs"}, nullptr,
                  "pipeline.execution: graphs captures CUDA graphs and needs job.device: cuda (this job runs on cpu); "
                  "use pipeline.execution: eager"},
        Malformed{"graphs with a memory budget", {"pipeline.execution=graphs", "memory.budget_mb=100"}, nullptr,
                  "pipeline.execution: graphs does not run memory plans (swap, recompute) yet"},
        Malformed{"graphs with DistAdam's hooks",
                  {"pipeline.execution=graphs", "optimizer.name=dist_adam", "optimizer.dist_adam.mode=hooks"}, nullptr,
                  "optimizer.dist_adam.mode hooks starts its reduce-scatters from autograd's gradient accumulation"},
        Malformed{"graphs measuring memory", {"pipeline.execution=graphs", "logging.measure_memory=true"}, nullptr,
                  "logging.measure_memory counts the tensors autograd saves as it saves them"},
        Malformed{"negative restarts", {"cluster.max_restarts=-2"}, nullptr, "cluster.max_restarts must be >= 0"},
        Malformed{"unknown cluster key", {"cluster.timeout=5"}, nullptr, "unknown key 'cluster.timeout'"},
        // Probes with bad input (once launches of the binary in tests/cli/bad_config.sh).
        Malformed{"duplicate key", {}, "job: {output_dir: /tmp/x}\ntraining:\n  steps: 5\n  steps: 7\n",
                  "'training.steps' is given twice (lines 3 and 4)"},
        Malformed{"duplicate section", {}, "job: {output_dir: /tmp/x}\ntraining: {steps: 5}\ntraining: {steps: 7}\n",
                  "'training' is given twice (lines 2 and 3)"},
        Malformed{"empty value", {"training.steps="}, nullptr, "training.steps has no value"},
        Malformed{"empty output dir", {"job.output_dir="}, nullptr, "job.output_dir has no value"},
        Malformed{"huge budget", {"memory.budget_mb=1e300"}, nullptr, "memory.budget_mb must be at most"},
        Malformed{"huge swap window", {"memory.swap_window_mb=1e300"}, nullptr, "memory.swap_window_mb must be at most"},
        Malformed{"huge DistAdam bucket", {"optimizer.dist_adam.bucket_mb=1e300"}, nullptr,
                  "optimizer.dist_adam.bucket_mb must be at most"},
        Malformed{"infinite lr", {"optimizer.lr=.inf"}, nullptr, "optimizer.lr: expected a finite number, got '.inf'"},
        Malformed{"too many threads", {"job.threads_per_rank=100000"}, nullptr,
                  "job.threads_per_rank is 100000, more than this host's"},
        Malformed{"more stages than ops", {},
                  "job: {output_dir: /tmp/x}\nmodel: {name: mlp, input_dim: 32, hidden: 64, mlp_layers: 1, classes: 4}\n"
                  "data: {name: synthetic}\ntraining: {steps: 2, global_batch_size: 48, micro_batch_size: 4}\n"
                  "pipeline: {stages: 12, microbatches: 12}\n",
                  "has 5 ops, so it splits into at most 5 pieces; pipeline.stages (12)"},
        Malformed{"profile missing", {"pipeline.profile=/no/such/profile.pb"}, nullptr,
                  "pipeline.profile '/no/such/profile.pb' does not exist (make one with `sluice profile CONFIG -o FILE`)"},
        Malformed{"plan and profile", {"pipeline.plan=/etc/hostname", "pipeline.profile=/etc/hostname"}, nullptr,
                  "pipeline.plan and pipeline.profile both set"}};
INSTANTIATE_TEST_SUITE_P(Cases, MalformedConfig, ::testing::ValuesIn(kMalformed));

// The config file itself: missing, or a directory (a FIFO is tests/cli/bad_config.sh's: it must not hang).
TEST(Config, AFileThatIsNoConfigIsNamed) {
  const std::string dir = testing::TempDir();
  for (const auto& [path, message] : std::map<std::string, std::string>{
           {dir + "nope.yaml", "config file '" + dir + "nope.yaml' does not exist"},
           {dir, "config file '" + dir + "' is a directory, not a file"}}) {
    try {
      Config::load(path);
      FAIL() << path << ": accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  }
}

// The README's key table ("| `section.key` | default | meaning |", or a row
// for several keys of a section: "| `model.layers, heads, embd` |") lists
// exactly the keys the parser accepts: a new key documented, a removed one
// gone. The README is found through SLUICE_SOURCE_DIR (CTest sets it), else
// beside the build folder this binary is in.
TEST(Config, TheReadmeTableListsEveryKeyAndNoOther) {
  namespace fs = std::filesystem;
  const char* env = std::getenv("SLUICE_SOURCE_DIR");
  const fs::path source = env ? fs::path(env) : fs::canonical("/proc/self/exe").parent_path().parent_path().parent_path();
  std::ifstream readme(source / "README.md");
  ASSERT_TRUE(readme) << "no README.md in " << source << ": set SLUICE_SOURCE_DIR to the source folder";
  std::set<std::string> documented;
  std::map<std::string, std::string> rows;  // key -> its row
  const std::regex row(R"(^\| `([a-z_]+)\.([a-z0-9_.]+(, [a-z0-9_.]+)*)` \|)");
  std::string line;
  std::smatch m;
  while (std::getline(readme, line)) {
    if (!std::regex_search(line, m, row)) continue;
    std::stringstream names(m[2].str());
    for (std::string name; std::getline(names, name, ',');) {
      documented.insert(m[1].str() + "." + name.substr(name.find_first_not_of(' ')));
      rows[m[1].str() + "." + name.substr(name.find_first_not_of(' '))] = line;
    }
  }
  const auto keys = configKeys();
  const std::set<std::string> accepted(keys.begin(), keys.end());
  EXPECT_EQ(accepted.size(), keys.size()) << "a key is read twice";
  EXPECT_GT(keys.size(), 50u);
  for (auto& k : accepted) EXPECT_TRUE(documented.count(k)) << k << " is accepted but not in README.md's key table";
  for (auto& k : documented) EXPECT_TRUE(accepted.count(k)) << k << " is in README.md's key table but not accepted";
  // A key typed by a Choice table: its row names every choice (in backticks).
  const auto choices = configChoiceNames();
  EXPECT_GE(choices.size(), 10u);
  for (auto& [key, names] : choices) {
    ASSERT_TRUE(rows.count(key)) << key;
    for (auto& name : names) {
      EXPECT_NE(rows.at(key).find("`" + name + "`"), std::string::npos)
          << "README.md's row for " << key << " does not name its choice " << name;
    }
  }
}

// pipeline.schedule parses into its row of the schedule table, or auto;
// every check that asks the row's traits also runs under auto.
TEST(Config, ScheduleParsesIntoItsRowOrAuto) {
  const auto autoConfig = Config::fromYamlText(kValid, {"pipeline.schedule=auto"});
  EXPECT_TRUE(autoConfig.pipeline.schedule.isAuto());
  EXPECT_EQ(autoConfig.pipeline.schedule.name(), "auto");
  EXPECT_THROW(autoConfig.pipeline.schedule.kind(), ScheduleError);
  const auto zbv = Config::fromYamlText(kValid, {"pipeline.schedule=zbv"});
  EXPECT_EQ(&zbv.pipeline.schedule.kind(), &pipeline::scheduleKind("zbv"));
  EXPECT_EQ(zbv.pipeline.chunks, 2);
  EXPECT_THROW(Config::fromYamlText(kValid, {"pipeline.schedule=zbv", "pipeline.chunks=3"}), ConfigError);
}

TEST(Config, CheckpointAndClusterDefaults) {
  auto c = Config::fromYamlText(kValid, {"job.output_dir=/tmp/run"});
  EXPECT_EQ(c.checkpoint.interval, 0);
  EXPECT_EQ(c.checkpoint.resume.mode, ResumeMode::Auto);
  EXPECT_EQ(c.checkpointDir(), "/tmp/run/checkpoints");
  EXPECT_EQ(c.cluster.timeoutS, 600);
  EXPECT_EQ(c.cluster.maxRestarts, 0);
  EXPECT_EQ(c.training.nanPolicy, NanPolicy::Abort);
  auto d = Config::fromYamlText(kValid, {"checkpoint.dir=/ckpt", "checkpoint.interval=5", "cluster.timeout_s=3"});
  EXPECT_EQ(d.checkpointDir(), "/ckpt");
  EXPECT_EQ(d.checkpoint.interval, 5);
  EXPECT_DOUBLE_EQ(d.cluster.timeoutS, 3);
  auto again = Config::fromYamlText(d.toYaml());
  EXPECT_EQ(again.checkpointDir(), "/ckpt");
  EXPECT_DOUBLE_EQ(again.cluster.timeoutS, 3);
}

// checkpoint.resume parses into its mode (auto and none by name, any other
// text a directory) and config.resolved.yaml writes it back as given.
TEST(Config, ResumeParsesIntoItsModeAndRoundTrips) {
  const std::string dir = testing::TempDir();
  for (const auto& [text, mode] : std::vector<std::pair<std::string, ResumeMode>>{
           {"auto", ResumeMode::Auto}, {"none", ResumeMode::None}, {dir, ResumeMode::Directory}}) {
    const auto c = Config::fromYamlText(kValid, {"checkpoint.resume=" + text});
    EXPECT_EQ(c.checkpoint.resume.mode, mode) << text;
    EXPECT_EQ(c.checkpoint.resume.directory, mode == ResumeMode::Directory ? dir : "") << text;
    const auto yaml = c.toYaml();
    EXPECT_NE(yaml.find("  resume: " + text + "\n"), std::string::npos) << yaml;
    const auto again = Config::fromYamlText(yaml);
    EXPECT_EQ(again.checkpoint.resume.mode, mode) << text;
    EXPECT_EQ(again.checkpoint.resume.directory, c.checkpoint.resume.directory) << text;
    EXPECT_EQ(again.toYaml(), yaml);
  }
}

// model.inputs[i].dtype and model.targets.dtype parse into InputDtype (default
// float32); config.resolved.yaml writes their names back.
TEST(Config, InputDtypesParseAndRoundTrip) {
  EXPECT_EQ(InputSpec{}.dtype, InputDtype::Float32);
  const auto c = Config::fromYamlText(kValid, {"model.name=torchscript", "model.path=/etc/hostname", "data.name=text",
                                               "data.path=/etc/hostname",
                                               "model.inputs=[{name: x, shape: [8], dtype: int64}]",
                                               "model.targets={shape: [8], dtype: int64}"});
  ASSERT_EQ(c.model.inputs.size(), 1u);
  EXPECT_EQ(c.model.inputs[0].dtype, InputDtype::Int64);
  EXPECT_EQ(c.model.targets.dtype, InputDtype::Int64);
  const auto yaml = c.toYaml();
  EXPECT_NE(yaml.find("dtype: int64"), std::string::npos) << yaml;
  EXPECT_EQ(yaml.find("dtype: float32"), std::string::npos) << yaml;
  const auto again = Config::fromYamlText(yaml);
  ASSERT_EQ(again.model.inputs.size(), 1u);
  EXPECT_EQ(again.model.inputs[0].dtype, InputDtype::Int64);
  EXPECT_EQ(again.model.targets.dtype, InputDtype::Int64);
  EXPECT_EQ(again.toYaml(), yaml);
}

}  // namespace
}  // namespace sluice
