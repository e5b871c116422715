// `sluice graph CONFIG [-o FILE]`: the captured op graph, its cut points and hash.
#include "cli/Commands.h"

#include <iostream>

#include "config/Config.h"
#include "train/ModelFromConfig.h"

namespace sluice::cli {

int graphCommand(const CommandLine& a, int, char**) {
  auto config = sluice::Config::load(a.config, a.overrides);
  auto setup = sluice::makeModelSetup(config);
  auto graph = setup.capture(config.training.microBatchSize);
  std::cout << graph.toString();
  if (graph.fusedAttentions() > 0)
    std::cout << graph.fusedAttentions() << " causal attentions fused into scaled_dot_product_attention "
              << "(model.fuse_attention: false keeps them as written)\n";
  std::cout << graph.numNodes() << " nodes, hash " << graph.hash() << ", " << graph.validCuts().size()
            << " valid cut points\n";
  if (!a.output.empty()) {
    graph.save(a.output);
    std::cout << "saved " << a.output << "\n";
  }
  return 0;
}

}  // namespace sluice::cli
