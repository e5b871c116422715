// train::ModelFromConfig: a config's model as a job runs it. Its spec
// (config/ModelSpec.h) builds the module, forward, loss and data; this adds
// what every model shares: the memory check, job.seed, model.weights,
// model.fuse_attention and training.precision (the capture's autocast
// dtype, the loss in float32).
#pragma once

#include "config/Config.h"
#include "models/ModelSetup.h"

namespace sluice {

// Builds the model (after checkModelFitsMemory), its forward, loss and data.
ModelSetup makeModelSetup(const Config& config);
// Estimates from the config alone what one rank holds before the model is
// split (its spec's memory parts: parameters with gradients and Adam state,
// buffers, one micro-batch of activations) and throws ConfigError naming the
// keys and the bytes when ranksHere such ranks exceed the machine's memory:
// before anything is allocated. makeModelSetup checks with Open MPI's local
// rank count.
void checkModelFitsMemory(const Config& config, int ranksHere = 1);

}  // namespace sluice
