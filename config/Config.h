// config::Config: the job's YAML, typed and validated once at load.
//
// Public API (docs/architecture.md, "Public API"):
//   auto c = sluice::Config::load("configs/quickstart.yaml", {"training.steps=50"});
//   c.pipeline.stages;  c.toYaml();                     // every key with its value
//
// Precedence: --set overrides > YAML file > the defaults below. Unknown keys
// are errors naming their YAML path; degrees that must divide are checked with
// the arithmetic in the message; an empty file is an error (not a config of
// defaults). load() throws ConfigError and touches no file.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "config/ModelSpec.h"
#include "core/Choice.h"
#include "core/CommBackendKind.h"
#include "core/DeviceKind.h"
#include "core/ExecMode.h"
#include "core/TransferGuard.h"
#include "memory/MemoryPlan.h"
#include "optim/OptimizerChoices.h"
#include "partition/PartitionMethod.h"
#include "pipeline/ScheduleKinds.h"

namespace sluice {

// The choices below are parsed once, by name, into these types (STYLE rule
// 9); each table lists the names (Config.cpp).
enum class Precision { Fp32, Bf16, Fp16 };
enum class NanPolicy { Abort, Skip };
enum class BoundaryDtype { Graph, Compute };
const std::vector<Choice<Precision>>& precisionChoices();          // fp32 | bf16 | fp16
const std::vector<Choice<NanPolicy>>& nanPolicyChoices();          // abort | skip
const std::vector<Choice<BoundaryDtype>>& boundaryDtypeChoices();  // graph | compute
const std::vector<Choice<ExecMode>>& executionChoices();           // eager | compiled

// model.name: a row of the model table (config/ModelSpec.h), listed as a
// Choice table (gpt | llama | mlp | cnn | torchscript | exported, then rows
// added at run time, which README's table does not list).
std::vector<Choice<const ModelSpec*>> modelChoices();
// pipeline.schedule: a row of pipeline/ScheduleKinds.h's table (open: a test
// adds rows) or auto; ConfigError "config error: pipeline.schedule must be
// gpipe, 1f1b, ... or auto, got 'x'".
pipeline::ScheduleChoice parseScheduleSetting(const std::string& name);

// model.loss (torchscript): cross_entropy | mse | none (forward takes the targets last and returns the loss)
enum class LossKind { CrossEntropy, Mse, None };
const std::vector<Choice<LossKind>>& lossChoices();
// data.token_dtype (tokens): the ids of a file without llm.c's header
enum class TokenDtype { Uint16, Uint32 };
const std::vector<Choice<TokenDtype>>& tokenDtypeChoices();
// data.eval_split (fashion_mnist): the split evaluation reads
enum class EvalSplit { Test, Train };
const std::vector<Choice<EvalSplit>>& evalSplitChoices();
// cluster.launcher: auto (slurm inside an allocation, else mpirun) | mpirun | slurm
enum class LauncherKind { Auto, Mpirun, Slurm };
const std::vector<Choice<LauncherKind>>& launcherChoices();

// checkpoint.resume: auto (the latest complete checkpoint in
// checkpoint.dir, if any) | none | a checkpoint directory. auto and none are
// a Choice table's rows; any other text is the directory (the open case, as
// given: validation refuses "" and a path that is no directory).
enum class ResumeMode { Auto, None, Directory };
const std::vector<Choice<ResumeMode>>& resumeModeChoices();  // auto | none
struct ResumeSetting {
  ResumeMode mode = ResumeMode::Auto;
  std::string directory;  // ResumeMode::Directory: the checkpoint directory
};
ResumeSetting parseResumeSetting(const std::string& text);   // never throws
std::string resumeSettingName(const ResumeSetting& resume);  // auto | none | the directory, as the YAML gave it

// data.name: text (byte-level windows of files under data.path) | synthetic |
// fashion_mnist | tokens (a pre-tokenized file of ids, data/TokenFile.h)
enum class DataKind { Text, Synthetic, FashionMnist, Tokens };
const std::vector<Choice<DataKind>>& dataChoices();
const char* dataName(DataKind kind);

struct JobConfig {
  std::string name = "sluice";      // shown in logs
  std::string outputDir = "runs/sluice";  // metrics.jsonl, config.resolved.yaml, logs/ go here
  // job.overwrite: start afresh over an earlier run's metrics and checkpoints
  // in these directories (default: refused, launch/OutputLock.h)
  bool overwrite = false;
  int64_t seed = 1234;               // model init and data order
  int threadsPerRank = 0;            // LibTorch intra-op threads; 0 = cores / ranks on this node
  // job.device: cpu | cuda (one GPU per rank: LOCAL_RANK modulo the GPUs present)
  DeviceKind device = DeviceKind::Cpu;
  // job.backend: how CUDA tensors travel between ranks: nccl | mpi (host
  // staging) | auto (nullopt: nccl when every rank has a GPU of its own, else
  // mpi). CPU tensors always go over MPI.
  std::optional<CommBackendKind> backend;
};

// model.inputs[i].dtype and model.targets.dtype (torchscript): float32 | int64
enum class InputDtype { Float32, Int64 };
const std::vector<Choice<InputDtype>>& inputDtypeChoices();

// One forward argument (or the targets) of a TorchScript model: the shape of
// one sample (no batch dimension) and its dtype.
struct InputSpec {
  std::string name;
  std::vector<int64_t> shape;
  InputDtype dtype = InputDtype::Float32;
};

struct ModelConfig {
  const ModelSpec* spec = &defaultModelSpec();  // model.name: its row of the model table
  // gpt and llama
  int64_t vocabSize = 256;   // byte-level text: 256
  int64_t blockSize = 64;    // sequence length of training windows
  int64_t layers = 2;
  int64_t heads = 4;
  int64_t embd = 64;
  double dropout = 0.0;      // GPT-2 style dropout (embeddings, attention, residuals); 0 = off
  double attnDropout = 0.0;  // model.attn_dropout: on the attention weights (default: model.dropout)
  // model.fuse_attention: capture rewrites causal attention written op by op
  // into scaled_dot_product_attention (Note [attention fusion]); any model
  bool fuseAttention = true;
  // gpt and llama: the output projection reads the token embedding's weight
  // (default: true for llama, false for gpt)
  bool tieEmbeddings = false;
  // llama
  int64_t kvHeads = 0;    // model.kv_heads: key/value heads (grouped-query attention); 0 = model.heads
  int64_t ffnHidden = 0;  // model.ffn_hidden: SwiGLU width; 0 = 2/3 x 4 x embd rounded up to a multiple of 32
  // mlp
  int64_t inputDim = 784;
  int64_t hidden = 256;
  int64_t mlpLayers = 2;
  int64_t classes = 10;
  // cnn: conv-BN-ReLU-pool blocks of these widths, then a linear head to `classes`
  std::vector<int64_t> channels{32, 64};
  // torchscript: a module saved by torch.jit.trace / torch.jit.script (.save);
  // exported: a program saved by torch.export.save (.pt2; its input fixes
  // block_size, its output vocab_size: derived at load)
  std::string path;
  std::vector<InputSpec> inputs;     // forward's arguments, in order
  InputSpec targets;                 // what the loss compares the output with
  LossKind loss = LossKind::CrossEntropy;  // model.loss
  // model.weights: a safetensors file the training starts from (every
  // parameter by module path; `sluice export --format safetensors` writes
  // one); "" = the model's own initialisation. A checkpoint resumed wins.
  std::string weights;
};

struct DataConfig {
  DataKind kind = DataKind::Text;  // data.name
  // text: a file or folder (default /usr/share/games/fortunes); fashion_mnist:
  // the folder of the IDX files (default /usr/share/datasets/fashion-mnist)
  std::string path;
  EvalSplit evalSplit = EvalSplit::Test;  // data.eval_split (fashion_mnist)
  // tokens: the held-out token file evaluation reads (training.eval_interval)
  std::string evalPath;
  // tokens: the ids of a file without llm.c's header (one with it must agree)
  TokenDtype tokenDtype = TokenDtype::Uint16;
};

struct TrainingConfig {
  int64_t steps = 100;
  int64_t globalBatchSize = 8;  // = micro_batch_size x pipeline.microbatches x pipeline.data_parallel
  int64_t microBatchSize = 2;
  // training.nan_policy: abort (a non-finite loss stops the job, read at log
  // points) | skip (a step whose gradients are not finite anywhere is dropped
  // on every rank and counted in metrics; checked every step)
  NanPolicy nanPolicy = NanPolicy::Abort;
  // training.precision: fp32 | bf16 | fp16 (the forward captured under autocast:
  // matrix products in bfloat16, float32 weights, gradients, optimizer state,
  // loss; models/ModelSetup.h, Note [bf16 by capture])
  Precision precision = Precision::Fp32;
  // fp16 only (CUDA): dynamic loss scaling (optim/LossScaler.h, Note [fp16
  // loss scaling]). training.loss_scale: the first scale, a power of two;
  // training.loss_scale_window: applied steps in a row before it doubles.
  double lossScale = 65536;
  int64_t lossScaleWindow = 2000;
  // training.eval_interval: every this many steps (and after the last), a
  // forward-only pass over data.eval_split logs eval_loss / eval_accuracy; 0 = off
  int64_t evalInterval = 0;
  int64_t evalSamples = 0;  // training.eval_samples: the first N samples of the split; 0 = all
};

struct CheckpointConfig {
  std::string dir;          // checkpoint.dir; "" = <job.output_dir>/checkpoints
  int64_t interval = 0;     // steps between checkpoints; 0 = off
  int64_t keepLatestK = 2;  // checkpoint.keep_latest_k: older complete checkpoints are removed; 0 = keep all
  ResumeSetting resume;     // checkpoint.resume: auto (the default) | none | a checkpoint directory
};

struct ClusterConfig {
  double timeoutS = 600;       // cluster.timeout_s: a wait on a peer longer than this ends the job (0 = never)
  double initTimeoutS = 1800;  // cluster.init_timeout_s: the same during start-up (capture, profiling, planning)
  int maxRestarts = 0;         // cluster.max_restarts: restarts from the latest checkpoint after a failure
  // `sluice launch` (several machines; see launch/ClusterLaunch.h):
  std::string hostfile;                        // cluster.hostfile: "host slots=N" lines
  LauncherKind launcher = LauncherKind::Auto;  // cluster.launcher
  std::string interface;                       // network interface for MPI traffic ("" = Open MPI's choice)
  std::string rshAgent = "ssh";                // how mpirun reaches the other hosts (plm_rsh_agent)
  std::vector<std::string> extraMpirunArgs;    // appended to the mpirun command before the program
  std::map<std::string, std::string> env;      // variables set for every rank
  int nodes = 0;                               // Slurm nodes; 0 = the hostfile's hosts or the allocation's
  int masterPort = 29500;                      // MASTER_PORT exported to ranks
};

struct PipelineConfig {
  int stages = 1;
  // a row of pipeline/ScheduleKinds.h's table, or auto
  pipeline::ScheduleChoice schedule = pipeline::ScheduleChoice::of(pipeline::scheduleKind("1f1b"));
  int chunks = 0;                  // stages per rank under interleaved (0: 2 there, 1 otherwise)
  bool fitSchedule = true;         // zb-h1, interleaved-zb: fitted to the plan's stage times (false: unit costs)
  int microbatches = 0;            // 0 = global_batch_size / (micro_batch_size x data_parallel)
  int dataParallel = 1;            // replicas of each stage; world = stages x data_parallel
  std::vector<int> cuts;           // explicit node indices; empty = from plan or partition.method
  std::string plan;                // pipeline.plan: a plan file from `sluice partition` (wins over partition.method)
  // pipeline.profile: a profile from `sluice profile` the job plans from
  // instead of profiling itself (the same planning as without it; the file
  // must be of this model and batch shape); "" = profile at start-up
  std::string profile;
  // pipeline.partition.method: profile | uniform | parameters | layers
  partition::PartitionMethod partitionMethod = partition::PartitionMethod::Profile;
  // pipeline.partition.min_op_level_gain: the profile method cuts inside a
  // layer only when that is predicted at least this much faster (a share of
  // the step) than its best cuts on layer boundaries; 0: always op-level.
  double minOpLevelGain = 0.03;
  // eager (node by node, the default: on CPU it is as fast as the TorchScript
  // executor and saves exactly what the profiler measures; the executor's
  // autodiff saves ~20% more activations) | compiled (TorchScript executor)
  ExecMode execution = ExecMode::Eager;
  // graph (each boundary value travels in the dtype the graph gives it: layouts
  // stay exact) | compute (float32 activations and their gradients travel in
  // training.precision's bf16/fp16: half the bytes, rounded on the way)
  BoundaryDtype boundaryDtype = BoundaryDtype::Graph;
};

struct OptimizerConfig {
  optim::OptimizerKind name = optim::OptimizerKind::AdamW;  // adamw | dist_adam (sharded over pipeline.data_parallel)
  // optimizer.dist_adam.mode: hooks | after_backward | allreduce
  optim::DistAdamMode distAdamMode = optim::DistAdamMode::AfterBackward;
  double distAdamBucketMb = 25;  // optimizer.dist_adam.bucket_mb: gradient bytes per reduce-scatter bucket (DDP's 25)
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weightDecay = 0.01;
  // optimizer.clip_grad_norm: scale every gradient by min(1, c / (norm + 1e-6))
  // before the update, norm the global L2 norm over every parameter of every
  // stage and replica (each element once; optim/GradClip.h); 0 = off.
  double clipGradNorm = 0;
  optim::LrScheduleKind schedule = optim::LrScheduleKind::Constant;  // constant | cosine
  int64_t warmupSteps = 0;
  double minLr = 0.0;                 // floor of the cosine schedule
};

struct MemoryConfig {
  double budgetMb = 0;           // memory.budget_mb: per stage (MiB); 0 = no limit
  memory::MemoryPolicy policy = memory::MemoryPolicy::Plan;  // plan | none | full_recompute (memory/MemoryPlan.h)
  bool swap = true;              // memory.swap: the plan may swap (false: recompute only)
  std::string swapDir;           // memory.swap_dir: where swapped tensors go (on disk, not tmpfs); "" = system temp dir
  double swapWindowMb = 0;       // memory.swap_window_mb: bytes in flight to/from the swap tier; 0 = budget / 8 (64 without a budget)
  bool hardLimit = false;        // memory.hard_limit: allocations beyond the budget fail (as on a GPU)
};

struct LoggingConfig {
  int64_t interval = 10;        // steps between progress lines (and loss reads)
  bool measureMemory = false;   // logging.measure_memory: count saved-tensor bytes while training (rank logs)
  bool trace = false;           // logging.trace: a timeline of the traced steps in output_dir/trace.json
  std::vector<int> traceSteps;  // logging.trace_steps: steps to trace; empty = the two after warm-up
  bool traceOps = true;         // logging.trace_ops: the traced steps' ops (and CUDA kernels) too (core/DeviceTrace.h)
  bool tensorboard = false;     // logging.tensorboard: scalars per step in output_dir/tb (TensorBoard)
  // logging.transfer_guard: off | warn | error: host<->device round trips
  // inside a training step (core/TransferGuard.h; CUDA jobs)
  TransferGuardMode transferGuard = TransferGuardMode::Warn;
};

struct Config {
  JobConfig job;
  ModelConfig model;
  DataConfig data;
  TrainingConfig training;
  PipelineConfig pipeline;
  OptimizerConfig optimizer;
  MemoryConfig memory;
  LoggingConfig logging;
  CheckpointConfig checkpoint;
  ClusterConfig cluster;

  int worldSize() const { return pipeline.stages * pipeline.dataParallel; }
  std::string checkpointDir() const;  // checkpoint.dir or <job.output_dir>/checkpoints
  // The "section.key" names the YAML or --set gave (not defaults): a key
  // given for a model it does not apply to is refused (ConfigValidate.cpp).
  std::set<std::string> givenKeys;

  // Reads path, applies overrides ("a.b=value", value parsed as YAML), validates.
  static Config load(const std::string& path, const std::vector<std::string>& overrides = {});
  static Config fromYamlText(const std::string& text, const std::vector<std::string>& overrides = {},
                             const std::string& origin = "<string>");
  // The resolved config (every key, defaults filled in) as YAML.
  std::string toYaml() const;
};

// Every key a config may set, as "section.key" ("optimizer.dist_adam.mode"
// for nested ones), in the order the parser reads them: the README's key
// table is checked against it.
std::vector<std::string> configKeys();
// The keys typed by a Choice table, each with its table's names in order
// (README.md's key table is checked to name them all).
std::vector<std::pair<std::string, std::vector<std::string>>> configChoiceNames();

}  // namespace sluice
