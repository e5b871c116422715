// Model set-up: a model too large for this machine is refused from the config
// alone, before anything is allocated, naming the keys that drive its largest
// part (the worker's own check on real ranks: tests/cli/bad_config.sh).
#include <gtest/gtest.h>

#include <string>

#include "core/Error.h"
#include "config/Config.h"
#include "train/ModelFromConfig.h"

namespace sluice {
namespace {

TEST(ModelSetup, AModelTooLargeForTheMachineNamesItsLargestPart) {
  // The quickstart GPT at block_size 100000: attention maps and causal masks of block_size^2.
  auto config = Config::fromYamlText(
      "job: {output_dir: /tmp/x}\nmodel: {name: gpt, layers: 4, heads: 6, embd: 192, block_size: 100000}\n"
      "training: {steps: 1, global_batch_size: 16, micro_batch_size: 4}\npipeline: {stages: 2, microbatches: 4}\n");
  try {
    checkModelFitsMemory(config, 2);
    FAIL() << "a model of block_size 100000 fits";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("the largest part is one micro-batch's activations "
                                         "(training.micro_batch_size, model.block_size"),
              std::string::npos)
        << e.what();
  }
  config.model.blockSize = 128;
  EXPECT_NO_THROW(checkModelFitsMemory(config, 2));
}

}  // namespace
}  // namespace sluice
