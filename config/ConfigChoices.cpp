// The config's closed choices, one table each (core/Choice.h; STYLE rule
// 9), and the open choices' parsers (model.name, pipeline.schedule,
// checkpoint.resume).
// Torch-free, as Config.cpp.
#include "config/Config.h"

#include "core/Error.h"

namespace sluice {

const std::vector<Choice<Precision>>& precisionChoices() {
  static const std::vector<Choice<Precision>> t = {
      {Precision::Fp32, "fp32", "float32 throughout"},
      {Precision::Bf16, "bf16", "the forward captured under autocast into bfloat16"},
      {Precision::Fp16, "fp16", "float16 with dynamic loss scaling (CUDA)"}};
  return t;
}

const std::vector<Choice<NanPolicy>>& nanPolicyChoices() {
  static const std::vector<Choice<NanPolicy>> t = {
      {NanPolicy::Abort, "abort", "a non-finite gradient stops the job"},
      {NanPolicy::Skip, "skip", "a step with a non-finite gradient is dropped on every rank"}};
  return t;
}

const std::vector<Choice<BoundaryDtype>>& boundaryDtypeChoices() {
  static const std::vector<Choice<BoundaryDtype>> t = {
      {BoundaryDtype::Graph, "graph", "boundary values travel in the graph's dtype (exact)"},
      {BoundaryDtype::Compute, "compute", "float32 boundary values travel in the compute dtype"}};
  return t;
}

const std::vector<Choice<ExecMode>>& executionChoices() {
  static const std::vector<Choice<ExecMode>> t = {
      {ExecMode::Eager, "eager", "node by node through the TorchScript interpreter"},
      {ExecMode::Compiled, "compiled", "TorchScript's optimizing executor"},
      {ExecMode::Graphs, "graphs", "each micro-batch slot's forward and backward captured into CUDA graphs, then replayed (job.device: cuda)"}};
  return t;
}

pipeline::ScheduleChoice parseScheduleSetting(const std::string& name) {
  if (name == "auto") return pipeline::ScheduleChoice::automatic();
  if (const auto* kind = pipeline::findScheduleKind(name)) return pipeline::ScheduleChoice::of(*kind);
  std::vector<std::string> names;
  for (const auto& k : pipeline::scheduleKinds()) names.push_back(k.name);
  names.push_back("auto");
  throw ConfigError("config error: pipeline.schedule must be " + joinedWithOr(names) + ", got '" + name + "'");
}

const std::vector<Choice<LossKind>>& lossChoices() {
  static const std::vector<Choice<LossKind>> t = {
      {LossKind::CrossEntropy, "cross_entropy", "mean cross-entropy of the output's last dimension"},
      {LossKind::Mse, "mse", "mean squared error"},
      {LossKind::None, "none", "forward takes the targets last and returns the loss"}};
  return t;
}

const std::vector<Choice<TokenDtype>>& tokenDtypeChoices() {
  static const std::vector<Choice<TokenDtype>> t = {{TokenDtype::Uint16, "uint16", "2 bytes per id"},
                                                    {TokenDtype::Uint32, "uint32", "4 bytes per id"}};
  return t;
}

const std::vector<Choice<EvalSplit>>& evalSplitChoices() {
  static const std::vector<Choice<EvalSplit>> t = {{EvalSplit::Test, "test", "the held-out images"},
                                                   {EvalSplit::Train, "train", "the training images"}};
  return t;
}

const std::vector<Choice<LauncherKind>>& launcherChoices() {
  static const std::vector<Choice<LauncherKind>> t = {
      {LauncherKind::Auto, "auto", "slurm inside an allocation, else mpirun"},
      {LauncherKind::Mpirun, "mpirun", "Open MPI's mpirun over cluster.hostfile"},
      {LauncherKind::Slurm, "slurm", "srun inside a Slurm allocation"}};
  return t;
}

const std::vector<Choice<InputDtype>>& inputDtypeChoices() {
  static const std::vector<Choice<InputDtype>> t = {{InputDtype::Float32, "float32", "32-bit floats (e.g. images)"},
                                                    {InputDtype::Int64, "int64", "64-bit integers (e.g. token ids)"}};
  return t;
}

const std::vector<Choice<ResumeMode>>& resumeModeChoices() {
  static const std::vector<Choice<ResumeMode>> t = {
      {ResumeMode::Auto, "auto", "the latest complete checkpoint in checkpoint.dir, if any"},
      {ResumeMode::None, "none", "start fresh"}};
  return t;
}

ResumeSetting parseResumeSetting(const std::string& text) {
  for (const auto& row : resumeModeChoices()) {
    if (text == row.name) return {row.kind, ""};
  }
  return {ResumeMode::Directory, text};
}

std::string resumeSettingName(const ResumeSetting& resume) {
  return resume.mode == ResumeMode::Directory ? resume.directory : choiceName(resumeModeChoices(), resume.mode);
}

std::vector<Choice<const ModelSpec*>> modelChoices() {
  std::vector<Choice<const ModelSpec*>> t;
  for (const auto& row : modelSpecs()) t.push_back({&row, row.name.c_str(), row.summary.c_str(), row.listed});
  return t;
}

const std::vector<Choice<DataKind>>& dataChoices() {
  static const std::vector<Choice<DataKind>> t = {
      {DataKind::Text, "text", "byte-level windows of the files under data.path"},
      {DataKind::Synthetic, "synthetic", "random vectors and labels (model.name mlp)"},
      {DataKind::FashionMnist, "fashion_mnist", "Fashion-MNIST images and labels"},
      {DataKind::Tokens, "tokens", "windows of a pre-tokenized file of ids"}};
  return t;
}

const char* dataName(DataKind kind) { return choiceName(dataChoices(), kind); }

}  // namespace sluice
