#include "partition/PartitionMethod.h"

namespace sluice::partition {

const std::vector<Choice<PartitionMethod>>& partitionMethods() {
  static const std::vector<Choice<PartitionMethod>> methods = {
      {PartitionMethod::Profile, "profile", "the cost model's optimum over cuts and memory actions"},
      {PartitionMethod::Uniform, "uniform", "equal numbers of transformer blocks per stage"},
      {PartitionMethod::Parameters, "parameters", "equal parameter bytes per stage"},
      {PartitionMethod::Layers, "layers", "the cost model's best cuts on layer boundaries"}};
  return methods;
}

const char* partitionMethodName(PartitionMethod method) {
  return method == PartitionMethod::Cuts ? "cuts" : choiceName(partitionMethods(), method);
}

PartitionMethod parsePlanMethod(const std::string& name) {
  return name == "cuts" ? PartitionMethod::Cuts : parseChoice(partitionMethods(), name, "partition method");
}

}  // namespace sluice::partition
