// partition::PartitionMethod: how makePlan (Plan.h) chooses the cuts, with
// its Choice table (core/Choice.h). No LibTorch here: config/Config.h
// parses pipeline.partition.method into it once.
//   profile     the exact optimum of the cost model (Partitioner.h);
//   uniform     equal numbers of transformer blocks per stage (Megatron's split);
//   parameters  equal parameter bytes per stage (DeepSpeed's partition_method=parameters);
//   layers      the cost model's best cuts on layer boundaries only;
//   cuts        the user's own cuts (pipeline.cuts): recorded in a plan, not
//               a choice a user names.
// Adding a method: a value here, a row in partitionMethods() and its branch
// in makePlan.
#pragma once

#include <string>
#include <vector>

#include "core/Choice.h"

namespace sluice::partition {

enum class PartitionMethod { Profile, Uniform, Parameters, Layers, Cuts };
const std::vector<Choice<PartitionMethod>>& partitionMethods();  // profile | uniform | parameters | layers
const char* partitionMethodName(PartitionMethod method);        // the above, or "cuts"
// A plan file's method: one of the table's, or "cuts". Throws ConfigError.
PartitionMethod parsePlanMethod(const std::string& name);

}  // namespace sluice::partition
