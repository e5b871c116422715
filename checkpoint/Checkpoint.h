// checkpoint::Checkpoint: training state on disk, keyed by parameter name, so
// that a checkpoint loads into another stage split or data-parallel degree.
//
// A checkpoint is the directory <checkpoint.dir>/step_<N>/ (N = steps done):
//   rank_<r>.tensors  every rank: its random generator state; on data-parallel
//                     rank 0 of each stage also that stage's parameters and
//                     buffers and their full Adam state, by module path
//                     (core/TensorFile.h);
//   plan.pb           rank 0, when the job has a plan (partition/Plan.h): a
//                     resume with the same pipeline settings reuses it
//                     instead of profiling again (same cuts, same decisions);
//   manifest.yaml     rank 0: format, Sluice version, step, the learning rate
//                     and data position after it, graph hash, the model
//                     section of the config, the layout (stages,
//                     data_parallel, cuts), the plan's checksum, and per file
//                     its rank, stage, size, checksum and the tensors it holds.
// <checkpoint.dir>/latest names the newest complete checkpoint.
//
// Note [checkpoint commit]: every file is written to a temp name, fsynced and
// renamed; rank 0 writes the manifest only after every rank has committed its
// file, then moves `latest` to the new checkpoint. So a checkpoint is either
// complete or not there (a kill during a save leaves `latest` on the previous
// one), and only complete ones are removed to keep keep_latest_k.
//
// Loading checks the manifest and every file's size and checksum, and that
// the model is the same (naming the config key that differs otherwise).
// All calls that take a Communicator are collective over it.
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <string>
#include <vector>

#include "core/Communicator.h"
#include "config/Config.h"
#include "optim/OptimizerState.h"

namespace torch::nn {
class Module;
}  // namespace torch::nn

namespace sluice {

struct CheckpointLayout {
  int stages = 1, dataParallel = 1;
  std::vector<int> cuts;
  std::string graphHash;
  std::map<std::string, std::string> model;  // the model section, key -> value (resolved config)
  bool operator==(const CheckpointLayout& o) const {
    return stages == o.stages && dataParallel == o.dataParallel && cuts == o.cuts && graphHash == o.graphHash;
  }
};

// The model section of a resolved config as key -> value strings.
std::map<std::string, std::string> modelFields(const Config& config);

// One rank's part of a checkpoint.
struct RankState {
  std::map<std::string, at::Tensor> tensors;  // parameters and buffers (only the writer of its stage)
  std::map<std::string, optim::AdamState> adam;  // trainable parameters (the same)
  at::Tensor rng;                             // this rank's CPU generator state
};

struct CheckpointFile {
  std::string name;
  int rank = 0, stage = 0;
  int64_t bytes = 0;
  std::string checksum;
  std::vector<std::string> tensors;
};

struct Manifest {
  std::string path;  // the checkpoint directory
  int64_t step = 0;
  double lr = 0;              // the learning rate of the last step done (informative)
  int64_t samplesSeen = 0;    // the data position: samples consumed (informative; data is indexed by step)
  std::string planChecksum;   // of plan.pb; "" when the job had no plan
  double lossScale = 0;       // fp16's loss scale after the step (optim::LossScaler); 0: none
  int64_t lossScaleGoodSteps = 0;
  std::string version;
  CheckpointLayout layout;
  std::vector<CheckpointFile> files;
};

// What rank 0 records besides the tensors.
struct CheckpointInfo {
  int64_t step = 0;
  double lr = 0;
  int64_t samplesSeen = 0;
  std::string planBytes;  // the job's plan (Plan::toBytes), "" when none
  double lossScale = 0;   // fp16: the loss scaler's state (0: none)
  int64_t lossScaleGoodSteps = 0;
};

// Writes step_<step> under dir (collective over world; `state` is this rank's
// part, `stage` its stage index), moves `latest`, and removes complete
// checkpoints beyond keepLatestK (0: none). Returns the checkpoint's path.
std::string saveCheckpoint(const std::string& dir, const CheckpointInfo& info, const CheckpointLayout& layout,
                           const RankState& state, int stage, const Communicator& world, int64_t keepLatestK);

// The plan stored with a checkpoint (checksum checked), or "" when it has none.
std::string checkpointPlanBytes(const Manifest& manifest);

// The checkpoint directory checkpoint.resume asks for, or "" to start fresh:
// auto = the one `latest` names under the checkpoint dir, if any.
std::string resumeDirectory(const Config& config);

// Reads and checks a checkpoint (manifest, file sizes, the model: every key
// of current.model): CheckpointError naming the file or the key at fault.
Manifest openCheckpoint(const std::string& path, const CheckpointLayout& current);

// `names` less the buffers the checkpoint does not hold: those the model
// derives and recreates (GPT's causal mask, never read by a fused-attention
// graph, so never saved), whose value is the module's own. A missing
// parameter stays in the list (loadCheckpoint refuses it: another model).
std::vector<std::string> withoutDerivedBuffers(const Manifest& manifest, const std::vector<std::string>& names,
                                               const torch::nn::Module& module);

// This rank's part: the tensors named (parameters, buffers) and the Adam state
// of the trainable ones, from the files that hold them; the generator state of
// `rank` when the layout is the one the checkpoint was made with.
RankState loadCheckpoint(const Manifest& manifest, const std::vector<std::string>& names,
                         const std::vector<std::string>& trainable, int rank, bool sameLayout);

}  // namespace sluice
