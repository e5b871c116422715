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
#include "models/Exported.h"
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

bool in(const std::string& v, std::initializer_list<const char*> choices) {
  for (auto c : choices) {
    if (v == c) return true;
  }
  return false;
}

// model.name: torchscript. What the module's forward takes is checked when
// it is loaded (models/TorchScript.h); here: the keys and the data.
void validateTorchScript(const Config& c) {
  const auto& m = c.model;
  require(!m.path.empty(), "model.name=torchscript needs model.path: a file saved by torch.jit.trace or torch.jit.script "
                           "(module.save(\"model.pt\")); see docs/models.md, Bring your PyTorch model");
  require(std::filesystem::is_regular_file(m.path), "model.path '" + m.path + "' is not a file (save one from PyTorch "
                                                    "with torch.jit.script(model).save(path))");
  require(!m.inputs.empty(), "model.name=torchscript needs model.inputs: a list of {name, shape, dtype}, one per "
                             "argument of forward (shape without the batch dimension)");
  require(in(m.loss, {"cross_entropy", "mse", "none"}),
          "model.loss must be cross_entropy, mse or none (forward(inputs..., targets) returns the loss), got '" + m.loss +
              "'");
  auto checkSpec = [&](const InputSpec& t, const std::string& key) {
    require(in(t.dtype, {"float32", "int64"}), key + ".dtype must be float32 or int64, got '" + t.dtype + "'");
    for (auto d : t.shape) require(d >= 1, key + ".shape: every size must be >= 1");
  };
  for (size_t i = 0; i < m.inputs.size(); ++i) checkSpec(m.inputs[i], "model.inputs[" + std::to_string(i) + "]");
  checkSpec(m.targets, "model.targets");
  require(c.data.kind == DataKind::Text || c.data.kind == DataKind::FashionMnist,
          "model.name=torchscript reads data.name text (byte windows) or fashion_mnist (images); got data.name=" +
              std::string(dataName(c.data.kind)));
  require(m.inputs.size() == 1, "model.inputs: data." + std::string(dataName(c.data.kind)) + " gives each sample one input, so forward must "
                                "take one argument besides the targets; got " + std::to_string(m.inputs.size()));
  if (c.data.kind == DataKind::Text) {
    const auto& in0 = m.inputs[0];
    require(in0.shape.size() == 1 && in0.dtype == "int64",
            "model.inputs[0] (" + in0.name + "): data.name=text gives windows of byte tokens, so the input must be "
            "shape [block_size] with dtype int64");
    require(m.targets.shape == in0.shape && m.targets.dtype == "int64",
            "model.targets: data.name=text gives the next byte of every position, so targets must be shape [" +
                std::to_string(in0.shape[0]) + "] with dtype int64 like model.inputs[0]");
  } else {
    const auto& in0 = m.inputs[0];
    require(in0.shape == std::vector<int64_t>{1, 28, 28} && in0.dtype == "float32",
            "model.inputs[0] (" + in0.name + "): data.name=fashion_mnist gives images of shape [1, 28, 28] with dtype "
            "float32");
    require(m.targets.shape.empty() && m.targets.dtype == "int64",
            "model.targets: data.name=fashion_mnist gives one class label per image: shape [] with dtype int64");
    require(m.loss != "mse", "model.loss: data.name=fashion_mnist is classification: use cross_entropy (or none)");
  }
}

// model.name: exported. The program's signature (models/Exported.h) is read
// now: one int64 input [micro_batch_size, block] and one output [..., vocab]
// fix model.block_size and model.vocab_size (derived, not keys).
void validateExported(Config& c) {
  auto& m = c.model;
  require(!m.path.empty(), "model.name=exported needs model.path: a .pt2 file written by "
                           "torch.export.save(torch.export.export(model, (example_ids,)), path); models/export_hf.py "
                           "writes one for Hugging Face models");
  const auto sig = models::readExportedSignature(m.path);
  const auto& in = sig.input;
  const auto& out = sig.output;
  require(in.dtype == c10::kLong && in.sizes.size() == 2,
          "model.path '" + m.path + "': its input " + in.name + " must be token ids, int64 of shape [batch, block]; got " +
              c10::toString(in.dtype) + " of " + std::to_string(in.sizes.size()) + " dimensions");
  require(in.sizes[0] == c.training.microBatchSize,
          "model.path '" + m.path + "' was exported for batches of " + std::to_string(in.sizes[0]) +
              " rows, but training.micro_batch_size is " + std::to_string(c.training.microBatchSize) +
              ": export with an example batch of that many rows (models/export_hf.py --batch " +
              std::to_string(c.training.microBatchSize) + ") or set training.micro_batch_size: " +
              std::to_string(in.sizes[0]));
  require(out.sizes.size() == 3 && out.sizes[0] == in.sizes[0] && out.sizes[1] == in.sizes[1],
          "model.path '" + m.path + "': its output " + out.name + " must be logits of shape [batch, block, vocab]");
  require(m.loss == "cross_entropy", "model.loss: an exported program returns logits: use cross_entropy");
  require(c.data.kind == DataKind::Text || c.data.kind == DataKind::Tokens || c.data.kind == DataKind::Synthetic,
          "model.name=exported reads token windows: data.name text, tokens or synthetic");
  m.blockSize = in.sizes[1];
  m.vocabSize = out.sizes[2];
  if (c.data.kind == DataKind::Text) {
    require(m.vocabSize >= 256, "model.path '" + m.path + "' has a vocabulary of " + std::to_string(m.vocabSize) +
                                    " but data.name=text gives bytes (256 values): export with vocab_size >= 256");
  }
}

// data.name: tokens. The files are opened now (every id read once), so a
// wrong dtype, header or vocabulary fails before any rank starts.
void validateTokens(const Config& c) {
  require(isLanguageModel(c.model.kind) || c.model.kind == ModelKind::Exported,
          "data.name=tokens gives windows of token ids for a language model: use model.name gpt, llama or exported, got " +
              std::string(modelName(c.model.kind)));
  require(in(c.data.tokenDtype, {"uint16", "uint32"}),
          "data.token_dtype must be uint16 or uint32, got '" + c.data.tokenDtype + "'");
  require(c.training.evalInterval == 0 || !c.data.evalPath.empty(),
          "training.eval_interval with data.name=tokens needs data.eval_path: a second token file held out from "
          "training (scripts/tokenize.py writes one)");
  for (const auto& [key, path] : {std::pair<std::string, std::string>{"data.path", c.data.path},
                                  {"data.eval_path", c.data.evalPath}}) {
    if (path.empty()) continue;
    require(std::filesystem::is_regular_file(path), key + " '" + path + "' is not a file (scripts/tokenize.py writes "
                                                    "token files)");
    try {
      data::TokenFile(path, c.data.tokenDtype, c.model.blockSize, c.model.vocabSize, c.job.seed);
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

void validateModel(Config& c) {
  auto& m = c.model;
  require(isLanguageModel(m.kind) || !m.tieEmbeddings,
          "model.tie_embeddings is for model.name gpt or llama (a TorchScript model ties its own weights)");
  require(m.weights.empty() || std::filesystem::is_regular_file(m.weights),
          "model.weights '" + m.weights + "' is not a file (a safetensors file: `sluice export --format safetensors` "
          "writes one from a checkpoint)");
  require(m.kind == ModelKind::Llama || (m.kvHeads == 0 && m.ffnHidden == 0),
          "model.kv_heads and model.ffn_hidden are for model.name llama, got model.name " +
              std::string(modelName(m.kind)));
  require(c.data.kind != DataKind::Tokens || !c.data.path.empty(),
          "data.name=tokens needs data.path: a file of token ids (scripts/tokenize.py writes one)");
  if (c.data.path.empty()) {
    c.data.path = c.data.kind == DataKind::FashionMnist ? "/usr/share/datasets/fashion-mnist" : "/usr/share/games/fortunes";
  }
  if (m.kind == ModelKind::TorchScript) {
    validateTorchScript(c);
  } else if (m.kind == ModelKind::Exported) {
    validateExported(c);
  } else if (m.kind == ModelKind::Cnn) {
    require(!m.channels.empty() && m.channels.size() <= 4,
            "model.channels must list 1 to 4 block widths (each block halves the 28x28 image), got " +
                std::to_string(m.channels.size()));
    for (auto ch : m.channels) require(ch >= 1, "model.channels: every width must be >= 1");
    require(m.classes >= 1, "model.classes must be >= 1");
    require(c.data.kind == DataKind::FashionMnist, "model.name=cnn needs data.name=fashion_mnist (images)");
    require(m.classes == 10, "model.classes must be 10 for fashion_mnist, got " + std::to_string(m.classes));
  } else if (isLanguageModel(m.kind)) {
    for (auto [key, v] : {std::pair<const char*, int64_t>{"model.vocab_size", m.vocabSize},
                          {"model.block_size", m.blockSize}, {"model.layers", m.layers},
                          {"model.heads", m.heads}, {"model.embd", m.embd}}) {
      require(v >= 1, std::string(key) + " must be >= 1, got " + std::to_string(v));
    }
    require(m.embd % m.heads == 0, "model.embd (" + std::to_string(m.embd) + ") must be divisible by model.heads (" +
                                       std::to_string(m.heads) + "): " + std::to_string(m.embd) + " % " +
                                       std::to_string(m.heads) + " = " + std::to_string(m.embd % m.heads));
    require(m.dropout >= 0 && m.dropout < 1, "model.dropout must be in [0, 1), got " + std::to_string(m.dropout));
    require(m.attnDropout >= 0 && m.attnDropout < 1,
            "model.attn_dropout must be in [0, 1), got " + std::to_string(m.attnDropout));
    if (m.kind == ModelKind::Llama) {
      const int64_t kv = m.kvHeads == 0 ? m.heads : m.kvHeads;
      require(m.kvHeads >= 0, "model.kv_heads must be >= 1 (0 = model.heads), got " + std::to_string(m.kvHeads));
      require(m.heads % kv == 0, "model.kv_heads (" + std::to_string(kv) + ") must divide model.heads (" +
                                     std::to_string(m.heads) + "): " + std::to_string(m.heads) + " % " +
                                     std::to_string(kv) + " = " + std::to_string(m.heads % kv));
      require((m.embd / m.heads) % 2 == 0, "model.embd / model.heads (" + std::to_string(m.embd) + " / " +
                                               std::to_string(m.heads) + " = " + std::to_string(m.embd / m.heads) +
                                               ") must be even: rotary embeddings rotate pairs of dimensions");
      require(m.ffnHidden >= 0, "model.ffn_hidden must be >= 0 (0 = 2/3 x 4 x embd), got " + std::to_string(m.ffnHidden));
    }
    if (c.data.kind == DataKind::Text) {
      require(m.vocabSize >= 256, "model.vocab_size must be >= 256 for byte-level text data, got " +
                                      std::to_string(m.vocabSize));
    }
  } else {
    for (auto [key, v] : {std::pair<const char*, int64_t>{"model.input_dim", m.inputDim}, {"model.hidden", m.hidden},
                          {"model.mlp_layers", m.mlpLayers}, {"model.classes", m.classes}}) {
      require(v >= 1, std::string(key) + " must be >= 1, got " + std::to_string(v));
    }
    require(c.data.kind == DataKind::Synthetic, "model.name=mlp needs data.name=synthetic (text data is for gpt)");
    // Its graph is small and known: per hidden layer t, addmm, gelu; the head
    // t, addmm; every boundary between them a valid cut. More pieces than
    // ops cannot be cut: say so now, not after starting that many ranks.
    const int64_t ops = 3 * m.mlpLayers + 2;
    const int64_t pieces = static_cast<int64_t>(c.pipeline.stages) * std::max(1, c.pipeline.chunks);
    require(pieces <= ops, "model.name=mlp with model.mlp_layers " + std::to_string(m.mlpLayers) + " has " +
                               std::to_string(ops) + " ops, so it splits into at most " + std::to_string(ops) +
                               " pieces; pipeline.stages (" + std::to_string(c.pipeline.stages) + ") x " +
                               std::to_string(std::max(1, c.pipeline.chunks)) +
                               " per rank asks for " + std::to_string(pieces) +
                               ": lower pipeline.stages or raise model.mlp_layers");
  }
}

void validateData(Config& c) {
  auto& m = c.model;
  if (c.data.kind == DataKind::FashionMnist) {
    require(m.kind == ModelKind::Cnn || m.kind == ModelKind::TorchScript,
            "data.name=fashion_mnist gives [1, 28, 28] images: use model.name cnn or torchscript");
    // The evaluation split only when evaluation is on (training.eval_interval > 0).
    std::vector<std::string> splits{"train"};
    if (c.training.evalInterval > 0 && c.data.evalSplit != "train") splits.push_back(c.data.evalSplit);
    for (const std::string& split : splits) {
      for (const auto& file : {data::FashionMnist::imagesFile(split), data::FashionMnist::labelsFile(split)}) {
        require(!data::FashionMnist::idxPath(c.data.path, file).empty(),
                "data.path '" + c.data.path + "' has no " + file + " (nor " + file + ".gz): " +
                    data::FashionMnist::kInstallHint);
      }
    }
  }
  require(in(c.data.evalSplit, {"test", "train"}), "data.eval_split must be test or train, got '" + c.data.evalSplit + "'");
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
  const auto& schedules = pipeline::scheduleNames();
  std::string scheduleChoices;
  for (auto& name : schedules) scheduleChoices += name + ", ";
  scheduleChoices.replace(scheduleChoices.size() - 2, 2, " or auto");
  require(p.schedule == "auto" || std::find(schedules.begin(), schedules.end(), p.schedule) != schedules.end(),
          "pipeline.schedule must be " + scheduleChoices + ", got '" + p.schedule + "'");
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

void validateChunksAndCuts(Config& c) {
  auto& p = c.pipeline;
  // pipeline.chunks: stages per rank under interleaved, interleaved-zb and
  // zbv (default 2; zbv: exactly 2). Under auto it is what they would use,
  // where they can run (2 by default there, else 1: not candidates).
  const bool interleaved = pipeline::interleavesStages(p.schedule), autoSchedule = p.schedule == "auto";
  const auto* kind = pipeline::findScheduleKind(p.schedule);
  const bool vShape = kind && kind->vShape;
  require(p.chunks >= 0, "pipeline.chunks must be >= 1 (or 0 for the default), got " + std::to_string(p.chunks));
  require(p.chunks <= 1 || interleaved || autoSchedule,
          "pipeline.chunks = " + std::to_string(p.chunks) +
              " (stages per rank) needs pipeline.schedule: interleaved, interleaved-zb, zbv or auto, got '" + p.schedule + "'");
  require(!vShape || p.chunks == 0 || p.chunks == 2,
          "pipeline.schedule " + p.schedule + " places exactly 2 stages per rank (in a V), but pipeline.chunks is " +
              std::to_string(p.chunks) + ": set pipeline.chunks: 2 or leave it out");
  if (p.chunks == 0) {
    const bool canInterleave =
        p.stages >= 2 && p.microbatches % p.stages == 0;
    p.chunks = interleaved || (autoSchedule && canInterleave) ? 2 : 1;
  }
  if (p.chunks > 1) {
    const std::string who =
        interleaved ? "pipeline.schedule " + p.schedule : "pipeline.chunks > 1 (interleaved under auto)";
    require(p.stages >= 2, who + " needs pipeline.stages >= 2 (it spreads each rank's work over pipeline.chunks "
                                 "stages); got " + std::to_string(p.stages));
    require(vShape || p.microbatches % p.stages == 0,
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

void validateRunSettings(Config& c) {
  require(c.logging.interval >= 1, "logging.interval must be >= 1, got " + std::to_string(c.logging.interval));
  auto& ck = c.checkpoint;
  require(ck.interval >= 0, "checkpoint.interval must be >= 0 (0 = off), got " + std::to_string(ck.interval));
  require(ck.keepLatestK >= 0, "checkpoint.keep_latest_k must be >= 0 (0 = keep all), got " +
                                   std::to_string(ck.keepLatestK));
  require(!ck.resume.empty(), "checkpoint.resume must be auto, none or a checkpoint directory");
  require(in(ck.resume, {"auto", "none"}) || std::filesystem::is_directory(ck.resume),
          "checkpoint.resume '" + ck.resume + "' is neither auto, none nor an existing checkpoint directory");
  for (int s : c.logging.traceSteps) {
    require(s >= 0 && s < c.training.steps, "logging.trace_steps: step " + std::to_string(s) +
                                                " is outside [0, training.steps = " + std::to_string(c.training.steps) + ")");
  }
  auto& cl = c.cluster;
  require(cl.timeoutS >= 0, "cluster.timeout_s must be >= 0 (0 = no limit), got " + std::to_string(cl.timeoutS));
  require(cl.initTimeoutS >= 0, "cluster.init_timeout_s must be >= 0 (0 = no limit), got " +
                                    std::to_string(cl.initTimeoutS));
  require(cl.maxRestarts >= 0, "cluster.max_restarts must be >= 0, got " + std::to_string(cl.maxRestarts));
  require(in(cl.launcher, {"auto", "mpirun", "slurm"}),
          "cluster.launcher must be auto, mpirun or slurm, got '" + cl.launcher + "'");
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
  template <class F>
  void derive(F) {}
};

// A model key given with model.name: exported that does not apply to it
// (e.g. model.vocab_size: the program fixes its sizes) is refused like an
// unknown key: it would be dropped without a word. model.weights and
// model.loss are shown by other rules and checked on their own. (The built-in
// models still accept each other's keys: configs switch model.name by --set.)
void refuseInapplicableModelKeys(Config& c) {
  if (c.model.kind != ModelKind::Exported) return;
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
            "model." + name + " does not apply to model.name: " + modelName(c.model.kind) +
                (c.model.kind == ModelKind::Exported ? " (the program fixes its sizes and layers)" : "") +
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
  validateRunSettings(c);
}

}  // namespace sluice
