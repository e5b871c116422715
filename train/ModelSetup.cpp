#include "train/ModelSetup.h"

#include <ATen/autocast_mode.h>
#include <torch/nn/functional/loss.h>

#include <unistd.h>

#include <algorithm>
#include <optional>
#include <cstdlib>
#include <cmath>
#include <filesystem>

#include "core/Bytes.h"
#include "core/Capture.h"
#include "core/Error.h"
#include "core/Log.h"
#include "checkpoint/SafeTensors.h"
#include "data/FashionMnist.h"
#include "data/TokenFile.h"
#include "models/Cnn.h"
#include "models/Gpt.h"
#include "models/Llama.h"
#include "models/Mlp.h"
#include "models/Exported.h"
#include "models/TorchScript.h"

namespace sluice {

namespace {

torch::Tensor crossEntropy(const torch::Tensor& logits, const torch::Tensor& target) {
  return torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}), target.reshape({-1}));
}

// The training split; fewer images than one global batch would repeat images
// inside a step without a word.
std::unique_ptr<data::FashionMnist> fashionMnistTrain(const Config& c) {
  auto d = std::make_unique<data::FashionMnist>(c.data.path, "train", c.job.seed);
  SLUICE_CHECK(d->samples() >= c.training.globalBatchSize, DataError,
               "fashion_mnist: " << data::FashionMnist::imagesFile("train") << " in " << c.data.path << " holds "
                                 << d->samples() << " images, fewer than training.global_batch_size ("
                                 << c.training.globalBatchSize << "): lower the batch size or use the full data set");
  return d;
}

}  // namespace

// The model, its forward, loss and data for the config (no checks).
static ModelSetup makeModel(const Config& c);

void checkModelFitsMemory(const Config& c, int ranksHere) {
  const auto& m = c.model;
  const double f = 4;  // float32
  const double B = static_cast<double>(c.training.microBatchSize);
  struct Part {
    std::string what;
    double bytes;
  };
  std::vector<Part> parts;
  if (m.kind == ModelKind::TorchScript || m.kind == ModelKind::Exported) {
    std::error_code ec;
    const double file = static_cast<double>(std::filesystem::file_size(m.path, ec));
    parts.push_back({"parameters, gradients and Adam state (model.path: about 4x the file)", ec ? 0.0 : 4 * file});
  } else if (m.kind == ModelKind::Cnn) {
    double params = 0, act = 0, in = 1, size = 28;
    for (auto ch : m.channels) {
      params += 9 * in * ch + 3 * ch;
      act += 6 * ch * size * size;
      in = static_cast<double>(ch);
      size = std::floor(size / 2);
    }
    params += in * size * size * m.classes;
    parts.push_back({"parameters, gradients and Adam state (model.channels)", 4 * f * params});
    parts.push_back({"one micro-batch's activations (training.micro_batch_size, model.channels)", f * B * act});
  } else if (isLanguageModel(m.kind)) {  // (llama: about the same, its MLP 3 x 2/3 of GPT's 2 x 4)
    const double V = m.vocabSize, T = m.blockSize, L = m.layers, d = m.embd, H = m.heads;
    const double params = 2 * V * d + T * d + L * (12 * d * d + 13 * d) + 2 * d;
    parts.push_back({"parameters, gradients and Adam state (model.vocab_size, model.layers, model.embd)", 4 * f * params});
    parts.push_back({"the causal masks, block_size^2 per layer (model.block_size, model.layers)", f * L * T * T});
    parts.push_back({"one micro-batch's activations (training.micro_batch_size, model.block_size, model.heads, "
                     "model.embd, model.layers)",
                     f * B * (L * (16 * T * d + 2 * H * T * T) + 2 * T * V)});
  } else {
    const double params = m.inputDim * m.hidden + (m.mlpLayers - 1.0) * m.hidden * m.hidden + m.hidden * m.classes;
    parts.push_back({"parameters, gradients and Adam state (model.input_dim, model.hidden, model.mlp_layers)",
                     4 * f * params});
    parts.push_back({"one micro-batch's activations (training.micro_batch_size, model.hidden)",
                     f * B * 4 * (m.inputDim + m.mlpLayers * m.hidden)});
  }
  double total = 0;
  const Part* largest = &parts[0];
  for (auto& p : parts) {
    total += p.bytes;
    if (p.bytes > largest->bytes) largest = &p;
  }
  const double machine = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGE_SIZE));
  SLUICE_CHECK(machine <= 0 || total * ranksHere < machine, ConfigError,
               "config error: this model needs about " << formatBytes(static_cast<int64_t>(total))
                   << " on each rank before it is split (" << ranksHere << " rank" << (ranksHere > 1 ? "s" : "")
                   << " on this machine), more than its " << formatBytes(static_cast<int64_t>(machine))
                   << " of memory; the largest part is " << largest->what << ": " << formatBytes(static_cast<int64_t>(largest->bytes))
                   << ". Lower those keys");
}

ModelSetup makeModelSetup(const Config& c) {
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  checkModelFitsMemory(c, local ? std::max(1, std::atoi(local)) : 1);
  ModelSetup s = makeModel(c);
  if (!c.model.weights.empty()) {
    const auto n = loadWeights(*s.module, c.model.weights);
    log::info("model.weights: " + std::to_string(n) + " tensors from " + c.model.weights);
  }
  s.captureOptions.fuseAttention = c.model.fuseAttention;
  if (c.training.precision != Precision::Fp32) {
    s.computeType = c.training.precision == Precision::Bf16 ? c10::kBFloat16 : c10::kHalf;
    // The loss in float32 (logits may leave the graph in the compute dtype).
    s.loss = [inner = s.loss, low = s.computeType](const torch::Tensor& out, const torch::Tensor& target) {
      return inner(out.scalar_type() == low ? out.to(c10::kFloat) : out, target);
    };
  }
  if (!s.setTraining) {
    auto module = s.module;
    s.setTraining = [module](bool on) { module->train(on); };
  }
  return s;
}

namespace {

ModelSetup torchScriptModel(const Config& c) {
  ModelSetup s;
  std::vector<std::string> names;
  for (auto& in : c.model.inputs) names.push_back(in.name);
  const bool targetsLast = c.model.loss == "none";
  auto ts = std::make_shared<models::TorchScriptModel>(models::TorchScriptModel::load(c.model.path, names, targetsLast));
  s.module = ts->holder();
  s.forward = [ts](const std::vector<torch::Tensor>& in) { return ts->forward(in); };
  s.setTraining = [ts](bool on) { ts->setTraining(on); };
  s.inputNames = names;
  if (c.data.kind == DataKind::FashionMnist) {
    s.dataset = fashionMnistTrain(c);
  } else {
    const int64_t seqLen = c.model.inputs.at(0).shape.at(0);
    s.tokensPerSample = seqLen;
    s.dataset = std::make_unique<data::TextDataset>(c.data.path, seqLen, c.job.seed);
  }
  if (c.model.loss == "none") {
    s.targetsAreInputs = true;
    s.inputNames.push_back("targets");  // the graph's second data input
    s.loss = [path = c.model.path](const torch::Tensor& out, const torch::Tensor&) {
      SLUICE_CHECK(out.dim() == 0, GraphError,
                   "model.loss: none, but forward of '" << path << "' returned a tensor of shape " << out.sizes()
                                                       << ", not a scalar loss; return the loss (e.g. .mean())");
      return out;
    };
  } else if (c.model.loss == "mse") {
    s.loss = [](const torch::Tensor& out, const torch::Tensor& target) {
      return torch::mse_loss(out, target.to(out.scalar_type()));
    };
  } else {
    s.loss = crossEntropy;
  }
  return s;
}

// A built-in module, whose forward takes the one data input.
template <class Holder>
void setModule(ModelSetup& s, Holder module) {
  s.module = module.ptr();
  s.forward = [module](const std::vector<torch::Tensor>& in) mutable { return module->forward(in.at(0)); };
}

ModelSetup cnnModel(const Config& c) {
  ModelSetup s;
  models::CnnOptions o;
  o.channels = c.model.channels;
  o.classes = c.model.classes;
  auto cnn = models::Cnn(o);
  setModule(s, cnn);
  s.dataset = fashionMnistTrain(c);
  s.loss = crossEntropy;
  return s;
}

// GPT and Llama: the options they share, and their data (bytes of text,
// token files, or synthetic tokens).
template <class Options>
Options languageModelOptions(const Config& c) {
  Options o;
  o.vocabSize = c.model.vocabSize;
  o.blockSize = c.model.blockSize;
  o.layers = c.model.layers;
  o.heads = c.model.heads;
  o.embd = c.model.embd;
  o.dropout = c.model.dropout;
  o.attnDropout = c.model.attnDropout;
  o.tieEmbeddings = c.model.tieEmbeddings;
  return o;
}

void languageModelData(const Config& c, ModelSetup& s) {
  const int64_t blockSize = c.model.blockSize, vocabSize = c.model.vocabSize;
  s.tokensPerSample = blockSize;
  if (c.data.kind == DataKind::Text) {
    s.dataset = std::make_unique<data::TextDataset>(c.data.path, blockSize, c.job.seed);
  } else if (c.data.kind == DataKind::Tokens) {
    s.dataset = std::make_unique<data::TokenFile>(c.data.path, c.data.tokenDtype, blockSize, vocabSize, c.job.seed);
  } else {
    s.dataset = std::make_unique<data::SyntheticTokens>(vocabSize, blockSize, c.job.seed);
  }
  s.loss = crossEntropy;
}

ModelSetup gptModel(const Config& c) {
  ModelSetup s;
  auto gpt = models::Gpt(languageModelOptions<models::GptOptions>(c));
  setModule(s, gpt);
  languageModelData(c, s);
  return s;
}

ModelSetup llamaModel(const Config& c) {
  ModelSetup s;
  auto o = languageModelOptions<models::LlamaOptions>(c);
  o.kvHeads = c.model.kvHeads == 0 ? c.model.heads : c.model.kvHeads;
  o.hidden = c.model.ffnHidden;
  auto llama = models::Llama(o);
  setModule(s, llama);
  languageModelData(c, s);
  return s;
}

// model.name: exported (models/Exported.h); model.block_size and
// model.vocab_size were derived from its signature when the config loaded.
ModelSetup exportedModel(const Config& c) {
  ModelSetup s;
  auto program = std::make_shared<models::ExportedModel>(models::ExportedModel::load(c.model.path));
  s.module = program->holder();
  s.forward = [program](const std::vector<torch::Tensor>& in) { return program->forward(in); };
  s.setTraining = [program](bool on) { program->setTraining(on); };
  s.transientBuffers = program->transientBuffers();
  languageModelData(c, s);
  return s;
}

ModelSetup mlpModel(const Config& c) {
  ModelSetup s;
  models::MlpOptions o;
  o.inputDim = c.model.inputDim;
  o.hidden = c.model.hidden;
  o.layers = c.model.mlpLayers;
  o.classes = c.model.classes;
  auto mlp = models::Mlp(o);
  setModule(s, mlp);
  s.dataset = std::make_unique<data::SyntheticClassification>(o.inputDim, o.classes, c.job.seed);
  s.loss = crossEntropy;
  return s;
}

// model.name -> the model, its data and its loss. Adding a model: a builder
// above, a row here and its name in Config's modelChoices()
// (docs/architecture.md, "Add a model").
struct ModelBuilder {
  ModelKind kind;
  ModelSetup (*build)(const Config&);
};
constexpr ModelBuilder kModels[] = {{ModelKind::Gpt, gptModel},
                                    {ModelKind::Llama, llamaModel},
                                    {ModelKind::Mlp, mlpModel},
                                    {ModelKind::Cnn, cnnModel},
                                    {ModelKind::TorchScript, torchScriptModel},
                                    {ModelKind::Exported, exportedModel}};

}  // namespace

static ModelSetup makeModel(const Config& c) {
  torch::manual_seed(static_cast<uint64_t>(c.job.seed));
  for (const auto& row : kModels) {
    if (c.model.kind == row.kind) return row.build(c);
  }
  throw ConfigError(std::string("config error: model.name ") + modelName(c.model.kind) + " has no builder");
}

OpGraph ModelSetup::captureEval(int64_t microBatchSize) const {
  struct Mode {
    const ModelSetup& s;
    ~Mode() { s.setTraining(true); }
  } restore{*this};
  setTraining(false);
  return capture(microBatchSize);
}

std::vector<torch::Tensor> ModelSetup::dataInputs(const data::Batch& batch) const {
  if (targetsAreInputs) return {batch.input, batch.target};
  return {batch.input};
}

void ModelSetup::toDevice(const c10::Device& where) {
  device = where;
  if (!where.is_cpu()) module->to(where);
}

namespace {

// Autocast on for one device type while in scope (Note [bf16 by capture]),
// without its weight cache: the cache would outlive the capture.
class AutocastScope {
 public:
  AutocastScope(c10::DeviceType type, c10::ScalarType dtype)
      : type_(type),
        enabled_(at::autocast::is_autocast_enabled(type)),
        dtype_(at::autocast::get_autocast_dtype(type)),
        cache_(at::autocast::is_autocast_cache_enabled()) {
    at::autocast::set_autocast_cache_enabled(false);
    at::autocast::set_autocast_dtype(type, dtype);
    at::autocast::set_autocast_enabled(type, true);
  }
  ~AutocastScope() {
    at::autocast::set_autocast_enabled(type_, enabled_);
    at::autocast::set_autocast_dtype(type_, dtype_);
    at::autocast::set_autocast_cache_enabled(cache_);
  }
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  c10::DeviceType type_;
  bool enabled_;
  c10::ScalarType dtype_;
  bool cache_;
};

}  // namespace

OpGraph ModelSetup::capture(int64_t microBatchSize) const {
  const auto examples = dataInputs(dataset->batch(0, microBatchSize));
  std::vector<NamedTensor> named;
  for (size_t i = 0; i < examples.size(); ++i) named.push_back({inputNames.at(i), examples[i].to(device)});
  std::optional<AutocastScope> autocast;
  if (computeType != c10::kFloat) autocast.emplace(device.type(), computeType);
  return sluice::capture(*module, forward, named, captureOptions);
}

std::vector<torch::Tensor> ModelSetup::tensorsByName(const std::vector<std::string>& names) const {
  return sluice::tensorsByName(*module, names);
}

}  // namespace sluice
