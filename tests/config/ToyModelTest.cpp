// A toy model added the way docs/architecture.md's recipe "Add a model"
// says: its module, its spec (keys, checks, memory estimate, builder) and one
// row in the model table. Here all three are in this file and the row is
// added with addModelSpec (test-only, so the library's table and README's
// key table stay as they are: listed = false); a library model puts its
// module in models/, its spec in config/models/ and its row in
// config/ModelSpecs.cpp. Nothing else names it: the config parses
// model.name into its row, runs its checks and not another model's, and
// makeModelSetup builds it; the tests below check each on the real code,
// and that it trains on 2 stages as one process does.
//
// "toy_residual": an MLP with residual hidden layers (h + gelu(W h)) on the
// synthetic classification data, reading the MLP's keys (input_dim, hidden,
// mlp_layers, classes); its own check: a hidden width of at least 2.
#include <gtest/gtest.h>
#include <torch/nn/functional/activation.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/adamw.h>

#include <string>

#include "config/Config.h"
#include "config/ModelSpec.h"
#include "core/Error.h"
#include "core/GraphSplit.h"
#include "pipeline/ScheduleKinds.h"
#include "pipeline/StageWorker.h"
#include "tests/Ranks.h"
#include "tests/TestUtil.h"
#include "train/ModelFromConfig.h"

namespace sluice {
namespace {

SLUICE_TEST_RANKS("ToyModel", 1);
SLUICE_TEST_RANKS("ToyModel.TrainsOnTwoStagesAsOneProcessDoes", 2);

struct ToyResidualImpl : torch::nn::Module {
  ToyResidualImpl(int64_t in, int64_t hidden, int64_t layers, int64_t classes)
      : input(register_module("input", torch::nn::Linear(in, hidden))),
        blocks(register_module("blocks", torch::nn::ModuleList())),
        head(register_module("head", torch::nn::Linear(hidden, classes))) {
    for (int64_t i = 0; i < layers; ++i) blocks->push_back(torch::nn::Linear(hidden, hidden));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto h = input->forward(x);
    for (auto& block : *blocks) h = h + torch::gelu(block->as<torch::nn::Linear>()->forward(h));
    return head->forward(h);
  }
  torch::nn::Linear input;
  torch::nn::ModuleList blocks;
  torch::nn::Linear head;
};
TORCH_MODULE(ToyResidual);

void validateToy(Config& c) {
  const auto& m = c.model;
  if (m.hidden < 2) throw ConfigError("config error: model.hidden must be >= 2 for toy_residual, got " + std::to_string(m.hidden));
  if (c.data.kind != DataKind::Synthetic) throw ConfigError("config error: model.name=toy_residual needs data.name=synthetic");
}

std::vector<MemoryPart> toyMemory(const Config& c) {
  const auto& m = c.model;
  const double params = m.inputDim * m.hidden + m.mlpLayers * m.hidden * m.hidden + m.hidden * m.classes;
  return {{"the toy's parameters, gradients and Adam state (model.hidden, model.mlp_layers)", 16 * params}};
}

ModelSetup buildToy(const Config& c) {
  ModelSetup s;
  setModule(s, ToyResidual(c.model.inputDim, c.model.hidden, c.model.mlpLayers, c.model.classes));
  s.dataset = std::make_unique<data::SyntheticClassification>(c.model.inputDim, c.model.classes, c.job.seed);
  s.loss = [](const torch::Tensor& out, const torch::Tensor& target) { return torch::cross_entropy_loss(out, target); };
  return s;
}

ModelSpec toySpec() {
  ModelSpec s;
  s.name = "toy_residual";
  s.summary = "test only: an MLP with residual hidden layers";
  s.keys = {"input_dim", "hidden", "mlp_layers", "classes"};
  s.listed = false;
  s.validate = validateToy;
  s.memory = toyMemory;
  s.build = buildToy;
  return s;
}

const bool kToyModelRegistered = addModelSpec(toySpec());

const char* kToyConfig =
    "job: {output_dir: /tmp/sluice_toy_model}\n"
    "model: {name: toy_residual, input_dim: 12, hidden: 16, mlp_layers: 3, classes: 5}\n"
    "data: {name: synthetic}\n"
    "training: {steps: 4, global_batch_size: 8, micro_batch_size: 2}\n"
    "pipeline: {stages: 1}\n";

TEST(ToyModel, IsARowOfTheTableThatTheConfigParses) {
  ASSERT_TRUE(kToyModelRegistered);
  const auto c = Config::fromYamlText(kToyConfig);
  EXPECT_EQ(c.model.spec, &modelSpec("toy_residual"));
  // Its keys are written to config.resolved.yaml; another model's are not.
  const auto yaml = c.toYaml();
  EXPECT_NE(yaml.find("name: toy_residual"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("mlp_layers: 3"), std::string::npos) << yaml;
  EXPECT_EQ(yaml.find("vocab_size"), std::string::npos) << yaml;
  EXPECT_EQ(Config::fromYamlText(yaml).model.spec, c.model.spec);
  // An unknown name is refused with the listed names (README's), not the test-only row.
  try {
    Config::fromYamlText(kToyConfig, {"model.name=toy_nothing"});
    FAIL() << "an unknown model.name loads";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("(expected gpt | llama | mlp"), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find("toy_residual"), std::string::npos) << e.what();
  }
}

TEST(ToyModel, RunsItsOwnChecksAndNotAnotherModels) {
  try {
    Config::fromYamlText(kToyConfig, {"model.hidden=1"});
    FAIL() << "model.hidden 1 loads";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("model.hidden must be >= 2 for toy_residual"), std::string::npos) << e.what();
  }
  // The MLP refuses more pipeline pieces than its ops (3 x mlp_layers + 2 =
  // 5 here); the toy has no such check, so 6 stages of a 1-layer toy load:
  // no model falls through to the MLP's checks.
  EXPECT_NO_THROW(Config::fromYamlText(kToyConfig, {"model.mlp_layers=1", "pipeline.stages=6",
                                                   "training.global_batch_size=12", "pipeline.microbatches=6"}));
  EXPECT_THROW(Config::fromYamlText(kToyConfig, {"model.name=mlp", "model.mlp_layers=1", "pipeline.stages=6",
                                                 "training.global_batch_size=12", "pipeline.microbatches=6"}),
               ConfigError);
  // Its memory estimate is the one the memory check reads.
  auto c = Config::fromYamlText(kToyConfig);
  c.model.hidden = 1 << 20;
  try {
    checkModelFitsMemory(c);
    FAIL() << "a toy of hidden 2^20 fits";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("the toy's parameters"), std::string::npos) << e.what();
  }
}

// The toy's losses on 2 stages (1F1B, cut in the middle of its graph) equal
// one process training the same model on the same batches, as
// Equivalence.OneAndTwoStagesMatchSingleProcessAdamW checks for the GPT.
TEST(ToyModel, TrainsOnTwoStagesAsOneProcessDoes) {
  auto comm = test::world();
  const auto config = Config::fromYamlText(kToyConfig);
  const int64_t microBatch = config.training.microBatchSize, m = 4, steps = 4;
  auto batches = [&](const ModelSetup& s, int64_t step) {
    const auto b = s.dataset->batch(step, microBatch * m);
    std::vector<pipeline::MicroBatch> out;
    for (int64_t i = 0; i < m; ++i) {
      out.push_back({b.input.slice(0, i * microBatch, (i + 1) * microBatch),
                     b.target.slice(0, i * microBatch, (i + 1) * microBatch), RandomKey{1, step, static_cast<int>(i)}});
    }
    return out;
  };
  auto adamw = [](std::vector<torch::Tensor> params) {
    return torch::optim::AdamW(params, torch::optim::AdamWOptions(1e-2).weight_decay(0.1));
  };
  std::vector<double> reference;
  {
    auto s = makeModelSetup(config);
    auto opt = adamw(s.module->parameters());
    for (int64_t step = 0; step < steps; ++step) {
      opt.zero_grad();
      double total = 0;
      for (auto& mb : batches(s, step)) {
        auto loss = s.loss(s.forward({mb.input}), mb.target) / m;
        loss.backward();
        total += loss.item<double>();
      }
      opt.step();
      reference.push_back(total);
    }
  }
  auto s = makeModelSetup(config);
  const auto graph = s.capture(microBatch);
  const auto cuts = graph.validCuts();
  ASSERT_FALSE(cuts.empty());
  auto stages = splitGraph(graph, {cuts[cuts.size() / 2]});
  auto& stage = stages.at(comm.rank());
  pipeline::StageWorker worker(stage, s.tensorsByName(stage.paramInputs), comm,
                               pipeline::makeSchedule("1f1b", 2, static_cast<int>(m)), s.loss);
  auto opt = adamw(worker.trainableParameters());
  for (int64_t step = 0; step < steps; ++step) {
    opt.zero_grad();
    auto loss = worker.runMicroBatches(batches(s, step));
    opt.step();
    if (worker.isLast()) {
      EXPECT_NEAR(loss.item<double>(), reference[step], 1e-5 * std::abs(reference[step])) << "step " << step;
    }
  }
}

}  // namespace
}  // namespace sluice
