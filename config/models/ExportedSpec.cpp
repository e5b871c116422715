// model.name: exported, a program saved by torch.export.save (.pt2;
// models/Exported.h), e.g. a Hugging Face model, on token windows.
#include <filesystem>

#include "config/models/Specs.h"
#include "core/Error.h"
#include "models/Exported.h"

namespace sluice::modelspecs {
namespace {

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
  require(m.loss == LossKind::CrossEntropy, "model.loss: an exported program returns logits: use cross_entropy");
  require(c.data.kind == DataKind::Text || c.data.kind == DataKind::Tokens || c.data.kind == DataKind::Synthetic,
          "model.name=exported reads token windows: data.name text, tokens or synthetic");
  m.blockSize = in.sizes[1];
  m.vocabSize = out.sizes[2];
  if (c.data.kind == DataKind::Text) {
    require(m.vocabSize >= 256, "model.path '" + m.path + "' has a vocabulary of " + std::to_string(m.vocabSize) +
                                    " but data.name=text gives bytes (256 values): export with vocab_size >= 256");
  }
}

// model.name: exported (models/Exported.h); model.block_size and
// model.vocab_size were derived from its signature when the config loaded.
ModelSetup buildExported(const Config& c) {
  ModelSetup s;
  auto program = std::make_shared<models::ExportedModel>(models::ExportedModel::load(c.model.path));
  s.module = program->holder();
  s.forward = [program](const std::vector<torch::Tensor>& in) { return program->forward(in); };
  s.setTraining = [program](bool on) { program->setTraining(on); };
  s.transientBuffers = program->transientBuffers();
  languageModelData(c, s);
  return s;
}

}  // namespace

ModelSpec exported() {
  ModelSpec s;
  s.name = "exported";
  s.summary = "a program saved by torch.export.save (.pt2), e.g. a Hugging Face model";
  s.keys = {"path"};
  s.tokenWindows = true;
  s.strictKeys = true;
  s.strictKeysReason = "the program fixes its sizes and layers";
  s.validate = validateExported;
  s.memory = fileModelMemory;
  s.build = buildExported;
  return s;
}

}  // namespace sluice::modelspecs
