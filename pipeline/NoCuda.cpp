// pipeline/'s CUDA seam without CUDA (pipeline/StageGraphs.h): no CUDA
// graphs in this build.
#include "pipeline/StageGraphs.h"

#include "core/Error.h"

namespace sluice::pipeline {

std::unique_ptr<StageGraphs> makeStageGraphs(const c10::Device&, const std::string& stageName, std::vector<int>,
                                             std::vector<bool>) {
  throw GraphError(stageName + ": pipeline.execution: graphs captures CUDA graphs, and this build of Sluice has no "
                   "CUDA; use pipeline.execution: eager");
}

}  // namespace sluice::pipeline
