// config/ConfigKeys.h's validateConfig: every value checked once at load,
// with the arithmetic in the message, and the derived defaults filled in
// (data.path, pipeline.microbatches, pipeline.chunks). One function per
// section, called in order: a later section reads what an earlier one derived.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <sstream>

#include "core/Device.h"
#include "core/Error.h"
#include "core/SystemInfo.h"
#include "config/ConfigKeys.h"
#include "data/FashionMnist.h"
#include "data/TokenFile.h"
#include "optim/LossScaler.h"
#include "pipeline/Schedule.h"
#include "pipeline/ScheduleKinds.h"

namespace sluice {
namespace {

// Sizes in MiB past this (1 PiB) are typos; beyond ~8.8e12 MiB the bytes overflow int64.
constexpr int64_t kMaxMib = int64_t{1} << 30;

std::string shortNumber(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

void require(bool ok, const std::string& message) {
  if (!ok) throw ConfigError("config error: " + message);
}

// data.name: tokens. The files are opened now (every id read once), so a
// wrong dtype, header or vocabulary fails before any rank starts.
void validateTokens(const Config& c) {
  require(c.model.spec->tokenWindows,
          "data.name=tokens gives windows of token ids for a language model: use model.name " +
              modelNamesWhere(&ModelSpec::tokenWindows) + ", got " + c.model.spec->name);
  require(c.training.evalInterval == 0 || !c.data.evalPath.empty(),
          "training.eval_interval with data.name=tokens needs data.eval_path: a second token file held out from "
          "training (scripts/tokenize.py writes one)");
  for (const auto& [key, path] : {std::pair<std::string, std::string>{"data.path", c.data.path},
                                  {"data.eval_path", c.data.evalPath}}) {
    if (path.empty()) continue;
    require(std::filesystem::is_regular_file(path), key + " '" + path + "' is not a file (scripts/tokenize.py writes "
                                                    "token files)");
    try {
      data::TokenFile(path, choiceName(tokenDtypeChoices(), c.data.tokenDtype), c.model.blockSize, c.model.vocabSize, c.job.seed);
    } catch (const DataError& e) {
      throw ConfigError(std::string("config error: ") + key + ": " + e.what());
    }
  }
}

void validateJob(Config& c) {
  require(!c.job.outputDir.empty(), "job.output_dir must not be empty");
  require(c.job.threadsPerRank >= 0, "job.threads_per_rank must be >= 0 (0 = cores / ranks on the node), got " +
                                         std::to_string(c.job.threadsPerRank));
  // More threads than cores only take turns on them (each rank's matrix
  // products slow down), and tens of thousands exhaust the process table
  // before anything is printed: bounded by this host's cores.
  const int cores = hardwareCores();
  require(c.job.threadsPerRank <= cores,
          "job.threads_per_rank is " + std::to_string(c.job.threadsPerRank) + ", more than this host's " +
              std::to_string(cores) + " cores: threads beyond the cores only take turns on them; use at most " +
              std::to_string(cores) + " (0 = cores / ranks on the host)");
  require(c.job.device == DeviceKind::Cpu || cudaBuilt(),
          "job.device is cuda but this build of Sluice has no CUDA (the CUDA toolkit was not found when it was "
          "configured); set job.device: cpu or rebuild where the toolkit is installed");
  require(!(c.job.backend == CommBackendKind::Nccl && c.job.device == DeviceKind::Cpu),
          "job.backend is nccl but job.device is cpu: NCCL moves GPU tensors; set job.device: cuda or job.backend: "
          "auto (CPU tensors always go over MPI)");
}

// The keys every model shares, then the model's own checks (its spec's validate).
void validateModel(Config& c) {
  auto& m = c.model;
  const ModelSpec& spec = *m.spec;
  require(spec.reads("tie_embeddings") || !m.tieEmbeddings,
          "model.tie_embeddings is for model.name " + modelNamesReading("tie_embeddings") +
              " (a TorchScript model ties its own weights)");
  require(m.weights.empty() || std::filesystem::is_regular_file(m.weights),
          "model.weights '" + m.weights + "' is not a file (a safetensors file: `sluice export --format safetensors` "
          "writes one from a checkpoint)");
  require((spec.reads("kv_heads") || m.kvHeads == 0) && (spec.reads("ffn_hidden") || m.ffnHidden == 0),
          "model.kv_heads and model.ffn_hidden are for model.name " + modelNamesReading("kv_heads") +
              ", got model.name " + spec.name);
  require(c.data.kind != DataKind::Tokens || !c.data.path.empty(),
          "data.name=tokens needs data.path: a file of token ids (scripts/tokenize.py writes one)");
  if (c.data.path.empty()) {
    c.data.path = c.data.kind == DataKind::FashionMnist ? "/usr/share/datasets/fashion-mnist" : "/usr/share/games/fortunes";
  }
  spec.validate(c);
}

void validateData(Config& c) {
  auto& m = c.model;
  if (c.data.kind == DataKind::FashionMnist) {
    require(m.spec->images,
            "data.name=fashion_mnist gives [1, 28, 28] images: use model.name " + modelNamesWhere(&ModelSpec::images));
    // The evaluation split only when evaluation is on (training.eval_interval > 0).
    std::vector<std::string> splits{"train"};
    if (c.training.evalInterval > 0 && c.data.evalSplit != EvalSplit::Train) {
      splits.push_back(choiceName(evalSplitChoices(), c.data.evalSplit));
    }
    for (const std::string& split : splits) {
      for (const auto& file : {data::FashionMnist::imagesFile(split), data::FashionMnist::labelsFile(split)}) {
        require(!data::FashionMnist::idxPath(c.data.path, file).empty(),
                "data.path '" + c.data.path + "' has no " + file + " (nor " + file + ".gz): " +
                    data::FashionMnist::kInstallHint);
      }
    }
  }
  require(c.training.evalInterval >= 0, "training.eval_interval must be >= 0 (0 = no evaluation)");
  require(c.training.evalSamples >= 0, "training.eval_samples must be >= 0 (0 = the whole split)");
  const std::string data = dataName(c.data.kind);
  require(c.training.evalInterval == 0 || c.data.kind == DataKind::FashionMnist || c.data.kind == DataKind::Tokens,
          "training.eval_interval needs a dataset with a held-out split (data.name=fashion_mnist, or tokens with "
          "data.eval_path); data.name=" + data + " has none");
  if (c.data.kind == DataKind::Tokens) validateTokens(c);
  require(c.data.evalPath.empty() || c.data.kind == DataKind::Tokens,
          "data.eval_path is for data.name=tokens (a second token file); data.name=" + data +
              " evaluates on data.eval_split");
  if (c.data.kind == DataKind::Text) {
    require(std::filesystem::exists(c.data.path),
            "data.path '" + c.data.path + "' does not exist (install the 'fortunes' package or name a text file or folder)");
  }
}

void validatePrecision(Config& c) {
  require(c.training.precision != Precision::Fp16 || c.job.device == DeviceKind::Cuda,
          "training.precision fp16 needs job.device: cuda (float16 training needs loss scaling and fast float16 "
          "kernels, which Sluice uses on GPUs only); on this device use bf16 (the same memory, no loss scaling)");
  require(optim::isLossScale(c.training.lossScale),
          "training.loss_scale must be a power of two >= 1 (e.g. 65536 = 2^16), got " + shortNumber(c.training.lossScale));
  require(c.training.lossScaleWindow >= 1,
          "training.loss_scale_window must be >= 1, got " + std::to_string(c.training.lossScaleWindow));
  require(c.training.precision == Precision::Fp16 || (c.training.lossScale == TrainingConfig{}.lossScale &&
                                              c.training.lossScaleWindow == TrainingConfig{}.lossScaleWindow),
          "training.loss_scale and training.loss_scale_window are for training.precision: fp16 (loss scaling); "
          "precision is " + std::string(choiceName(precisionChoices(), c.training.precision)) + ": remove them");
}

void validateBatches(Config& c) {
  auto& t = c.training;
  require(t.steps >= 1, "training.steps must be >= 1, got " + std::to_string(t.steps));
  require(t.globalBatchSize >= 1, "training.global_batch_size must be >= 1, got " + std::to_string(t.globalBatchSize));
  require(t.microBatchSize >= 1, "training.micro_batch_size must be >= 1, got " + std::to_string(t.microBatchSize));
  auto& p = c.pipeline;
  require(p.stages >= 1, "pipeline.stages must be >= 1, got " + std::to_string(p.stages));
  require(p.dataParallel >= 1, "pipeline.data_parallel must be >= 1, got " + std::to_string(p.dataParallel));
  require(p.boundaryDtype != BoundaryDtype::Compute || c.training.precision != Precision::Fp32,
          "pipeline.boundary_dtype: compute sends boundary activations and gradients in training.precision's dtype, "
          "but training.precision is fp32 (nothing to halve): set training.precision: bf16 (or fp16 on GPUs), or "
          "pipeline.boundary_dtype: graph");
  require(p.microbatches >= 0, "pipeline.microbatches must be >= 1 (or 0 to derive it), got " +
                                   std::to_string(p.microbatches));
  const int64_t perMicro = t.microBatchSize * p.dataParallel;
  if (p.microbatches == 0) {
    require(t.globalBatchSize % perMicro == 0,
            "training.global_batch_size (" + std::to_string(t.globalBatchSize) +
                ") must be divisible by training.micro_batch_size (" + std::to_string(t.microBatchSize) +
                ") x pipeline.data_parallel (" + std::to_string(p.dataParallel) + ") = " + std::to_string(perMicro));
    p.microbatches = static_cast<int>(t.globalBatchSize / perMicro);
  } else {
    const int64_t product = perMicro * p.microbatches;
    require(t.globalBatchSize == product,
            "training.global_batch_size (" + std::to_string(t.globalBatchSize) +
                ") must equal training.micro_batch_size (" + std::to_string(t.microBatchSize) +
                ") x pipeline.microbatches (" + std::to_string(p.microbatches) + ") x pipeline.data_parallel (" +
                std::to_string(p.dataParallel) + ") = " + std::to_string(product));
  }
}

// The schedules that put several stages on a rank, or auto: "interleaved, interleaved-zb, zbv or auto".
std::string interleavingSchedulesOrAuto() {
  std::vector<std::string> names;
  for (const auto& k : pipeline::scheduleKinds()) {
    if (k.interleaves) names.push_back(k.name);
  }
  names.push_back("auto");
  return joinedWithOr(names);
}

void validateChunksAndCuts(Config& c) {
  auto& p = c.pipeline;
  // pipeline.chunks: stages per rank under interleaved, interleaved-zb and
  // zbv (default 2; zbv: exactly 2). Under auto it is what they would use,
  // where they can run (2 by default there, else 1: not candidates).
  const bool autoSchedule = p.schedule.isAuto();
  const bool interleaved = !autoSchedule && p.schedule.kind().interleaves;
  const int fixedChunks = autoSchedule ? 0 : p.schedule.kind().fixedChunks;
  const bool vShape = !autoSchedule && p.schedule.kind().vShape;
  // Under auto, chunks > 1 is for the interleaved candidates, which take micro-batches in rank groups.
  const bool inRankGroups = autoSchedule || p.schedule.kind().microBatchesInRankGroups;
  require(p.chunks >= 0, "pipeline.chunks must be >= 1 (or 0 for the default), got " + std::to_string(p.chunks));
  require(p.chunks <= 1 || interleaved || autoSchedule,
          "pipeline.chunks = " + std::to_string(p.chunks) +
              " (stages per rank) needs pipeline.schedule: " + interleavingSchedulesOrAuto() + ", got '" +
              p.schedule.name() + "'");
  require(fixedChunks == 0 || p.chunks == 0 || p.chunks == fixedChunks,
          "pipeline.schedule " + p.schedule.name() + " places exactly " + std::to_string(fixedChunks) +
              " stages per rank" + (vShape ? " (in a V)" : "") + ", but pipeline.chunks is " +
              std::to_string(p.chunks) + ": set pipeline.chunks: " + std::to_string(fixedChunks) + " or leave it out");
  if (p.chunks == 0) {
    const bool canInterleave =
        p.stages >= 2 && p.microbatches % p.stages == 0;
    p.chunks = interleaved || (autoSchedule && canInterleave) ? 2 : 1;
  }
  if (p.chunks > 1) {
    const std::string who =
        interleaved ? "pipeline.schedule " + p.schedule.name() : "pipeline.chunks > 1 (interleaved under auto)";
    require(p.stages >= 2, who + " needs pipeline.stages >= 2 (it spreads each rank's work over pipeline.chunks "
                                 "stages); got " + std::to_string(p.stages));
    require(!inRankGroups || p.microbatches % p.stages == 0,
            who + " takes micro-batches pipeline.stages at a time: pipeline.microbatches (" +
                std::to_string(p.microbatches) + ") must be a multiple of pipeline.stages (" +
                std::to_string(p.stages) + ")");
  }
  if (!p.cuts.empty()) {
    const int pieces = p.stages * (interleaved ? p.chunks : 1);
    require(static_cast<int>(p.cuts.size()) == pieces - 1,
            "pipeline.cuts lists " + std::to_string(p.cuts.size()) + " cuts but pipeline.stages (" +
                std::to_string(p.stages) + ")" + (pieces > p.stages ? " x pipeline.chunks (" + std::to_string(p.chunks) + ")" : "") +
                " needs " + std::to_string(pieces - 1));
    for (size_t i = 0; i < p.cuts.size(); ++i) {
      require(p.cuts[i] >= 1 && (i == 0 || p.cuts[i] > p.cuts[i - 1]),
              "pipeline.cuts must be increasing node indices >= 1, got " + std::to_string(p.cuts[i]) + " at position " +
                  std::to_string(i));
    }
  }
}

void validateOptimizer(Config& c) {
  auto& p = c.pipeline;
  auto& o = c.optimizer;
  require(o.distAdamBucketMb <= kMaxMib, "optimizer.dist_adam.bucket_mb must be at most " + std::to_string(kMaxMib) +
                                            " (MiB), got " + shortNumber(o.distAdamBucketMb));
  require(o.distAdamBucketMb * 1048576.0 >= 4, "optimizer.dist_adam.bucket_mb must be > 0 (MiB of gradients per "
          "reduce-scatter), got " + std::to_string(o.distAdamBucketMb));
  require(p.dataParallel == 1 || o.name == optim::OptimizerKind::DistAdam,
          "pipeline.data_parallel = " + std::to_string(p.dataParallel) +
              " needs optimizer.name = dist_adam (its mode allreduce gives plain data-parallel AdamW); got '" +
              choiceName(optim::optimizerKinds(), o.name) + "'");
  require(o.lr > 0, "optimizer.lr must be > 0, got " + std::to_string(o.lr));
  require(o.beta1 >= 0 && o.beta1 < 1, "optimizer.beta1 must be in [0, 1), got " + std::to_string(o.beta1));
  require(o.beta2 >= 0 && o.beta2 < 1, "optimizer.beta2 must be in [0, 1), got " + std::to_string(o.beta2));
  require(o.eps > 0, "optimizer.eps must be > 0, got " + std::to_string(o.eps));
  require(o.weightDecay >= 0, "optimizer.weight_decay must be >= 0, got " + std::to_string(o.weightDecay));
  require(o.clipGradNorm >= 0 && std::isfinite(o.clipGradNorm),
          "optimizer.clip_grad_norm must be >= 0 (the largest global gradient norm; 0 = no clipping), got " +
              shortNumber(o.clipGradNorm));
  require(o.warmupSteps >= 0, "optimizer.warmup_steps must be >= 0, got " + std::to_string(o.warmupSteps));
  require(o.minLr >= 0 && o.minLr <= o.lr, "optimizer.min_lr must be in [0, optimizer.lr], got " + std::to_string(o.minLr));
}

void validatePlanAndMemory(Config& c) {
  auto& p = c.pipeline;
  require(p.minOpLevelGain >= 0 && p.minOpLevelGain < 1,
          "pipeline.partition.min_op_level_gain must be in [0, 1) (a share of the step time; 0: always cut between "
          "ops), got " + std::to_string(p.minOpLevelGain));
  require(p.plan.empty() || p.cuts.empty(), "pipeline.plan and pipeline.cuts both set: give one of them");
  require(p.plan.empty() || std::filesystem::exists(p.plan),
          "pipeline.plan '" + p.plan + "' does not exist (make one with `sluice partition CONFIG --profile FILE -o FILE`)");
  require(p.plan.empty() || p.profile.empty(),
          "pipeline.plan and pipeline.profile both set: a plan is already made (give the profile to `sluice partition`)");
  require(p.profile.empty() || std::filesystem::exists(p.profile),
          "pipeline.profile '" + p.profile + "' does not exist (make one with `sluice profile CONFIG -o FILE`)");
  auto& mem = c.memory;
  require(mem.budgetMb >= 0, "memory.budget_mb must be >= 0 (0 = no limit), got " + std::to_string(mem.budgetMb));
  require(mem.budgetMb <= kMaxMib, "memory.budget_mb must be at most " + std::to_string(kMaxMib) + " (MiB), got " +
                                       shortNumber(mem.budgetMb));
  require(mem.swapWindowMb >= 0, "memory.swap_window_mb must be >= 0, got " + std::to_string(mem.swapWindowMb));
  require(mem.swapWindowMb <= kMaxMib, "memory.swap_window_mb must be at most " + std::to_string(kMaxMib) +
                                           " (MiB), got " + shortNumber(mem.swapWindowMb));
  require(!mem.hardLimit || mem.budgetMb > 0, "memory.hard_limit needs memory.budget_mb > 0 (the limit to enforce)");
  require(mem.policy != memory::MemoryPolicy::FullRecompute || p.execution == ExecMode::Eager,
          "memory.policy full_recompute needs pipeline.execution: eager");
}

// pipeline.execution: graphs (pipeline/StageGraphs.h): CUDA only, and none
// of what needs autograd to run at every step.
void validateGraphs(const Config& c) {
  if (c.pipeline.execution != ExecMode::Graphs) return;
  require(c.memory.policy != memory::MemoryPolicy::Plan || c.memory.budgetMb == 0,
          "pipeline.execution: graphs does not run memory plans (swap, recompute) yet: memory.budget_mb under "
          "memory.policy plan needs pipeline.execution: eager");
  require(c.optimizer.name != optim::OptimizerKind::DistAdam || c.optimizer.distAdamMode != optim::DistAdamMode::Hooks,
          "optimizer.dist_adam.mode hooks starts its reduce-scatters from autograd's gradient accumulation, which a "
          "replayed CUDA graph does not run: use optimizer.dist_adam.mode after_backward with pipeline.execution: "
          "graphs");
  require(!c.logging.measureMemory,
          "logging.measure_memory counts the tensors autograd saves as it saves them, which a replayed CUDA graph "
          "does not: turn it off with pipeline.execution: graphs");
  require(c.job.device == DeviceKind::Cuda,
          "pipeline.execution: graphs captures CUDA graphs and needs job.device: cuda (this job runs on " +
              std::string(deviceKindName(c.job.device)) + "); use pipeline.execution: eager");
}

void validateRunSettings(Config& c) {
  require(c.logging.interval >= 1, "logging.interval must be >= 1, got " + std::to_string(c.logging.interval));
  auto& ck = c.checkpoint;
  require(ck.interval >= 0, "checkpoint.interval must be >= 0 (0 = off), got " + std::to_string(ck.interval));
  require(ck.keepLatestK >= 0, "checkpoint.keep_latest_k must be >= 0 (0 = keep all), got " +
                                   std::to_string(ck.keepLatestK));
  if (ck.resume.mode == ResumeMode::Directory) {
    require(!ck.resume.directory.empty(), "checkpoint.resume must be auto, none or a checkpoint directory");
    require(std::filesystem::is_directory(ck.resume.directory),
            "checkpoint.resume '" + ck.resume.directory + "' is neither auto, none nor an existing checkpoint directory");
  }
  for (int s : c.logging.traceSteps) {
    require(s >= 0 && s < c.training.steps, "logging.trace_steps: step " + std::to_string(s) +
                                                " is outside [0, training.steps = " + std::to_string(c.training.steps) + ")");
  }
  auto& cl = c.cluster;
  require(cl.timeoutS >= 0, "cluster.timeout_s must be >= 0 (0 = no limit), got " + std::to_string(cl.timeoutS));
  require(cl.initTimeoutS >= 0, "cluster.init_timeout_s must be >= 0 (0 = no limit), got " +
                                    std::to_string(cl.initTimeoutS));
  require(cl.maxRestarts >= 0, "cluster.max_restarts must be >= 0, got " + std::to_string(cl.maxRestarts));
  require(!cl.rshAgent.empty(), "cluster.rsh_agent must name a program (default ssh)");
  require(cl.nodes >= 0, "cluster.nodes must be >= 0 (0 = from the hostfile or the Slurm allocation), got " +
                             std::to_string(cl.nodes));
  require(cl.masterPort > 0 && cl.masterPort < 65536,
          "cluster.master_port must be in [1, 65535], got " + std::to_string(cl.masterPort));
  for (auto& [name, value] : cl.env) {
    const bool ok = !name.empty() && !std::isdigit(static_cast<unsigned char>(name[0])) &&
                    std::all_of(name.begin(), name.end(), [](char ch) { return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_'; });
    require(ok, "cluster.env: '" + name + "' is not a variable name (letters, digits and _, not starting with a digit)");
  }
}

}  // namespace

// Every value, in one pass; fills the derived defaults (data.path,
// pipeline.microbatches, pipeline.chunks), so the order matters: a later
// section reads what an earlier one derived.
namespace {

// The model keys and whether each applies to the chosen model (modelKeys' `shown`).
struct ModelKeyList {
  std::vector<std::pair<std::string, bool>> keys;
  template <class T>
  void key(const char* name, T&, bool applies = true) {
    keys.emplace_back(name, applies);
  }
  template <class T, class A, class B>
  void choice(const char*, T&, A, B) {}
  template <class T, class A>
  void closedChoice(const char* name, T&, const A&, const char*, bool applies = true) {
    keys.emplace_back(name, applies);
  }
  template <class F>
  void derive(F) {}
};

// A model key given with a model whose spec has strictKeys (model.name:
// exported: the program fixes its sizes) that does not apply to it is
// refused like an unknown key: it would be dropped without a word.
// model.weights and model.loss are shown by other rules and checked on their
// own. (The other models accept each other's keys: configs switch model.name
// by --set.)
void refuseInapplicableModelKeys(Config& c) {
  if (!c.model.spec->strictKeys) return;
  Config copy = c;
  ModelKeyList list;
  modelKeys(list, copy);
  std::string applying;
  for (auto& [name, applies] : list.keys) {
    if (applies) applying += " " + name;
  }
  for (auto& [name, applies] : list.keys) {
    if (applies || name == "weights" || name == "loss") continue;
    require(!c.givenKeys.count("model." + name),
            "model." + name + " does not apply to model.name: " + c.model.spec->name + " (" +
                c.model.spec->strictKeysReason + ")" +
                "; remove it. Keys of this model: name" + applying);
  }
}

}  // namespace

void validateConfig(Config& c) {
  validateJob(c);
  refuseInapplicableModelKeys(c);
  validateModel(c);
  validateData(c);
  validatePrecision(c);
  validateBatches(c);
  validateChunksAndCuts(c);
  validateOptimizer(c);
  validatePlanAndMemory(c);
  validateGraphs(c);
  validateRunSettings(c);
}

}  // namespace sluice
