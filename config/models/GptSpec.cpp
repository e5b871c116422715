// model.name: gpt, a GPT-2 style transformer (models/Gpt.h) on token windows.
#include "config/models/Specs.h"
#include "models/Gpt.h"

namespace sluice::modelspecs {
namespace {

void validateGpt(Config& c) {
  validateLanguageModel(c);
  if (c.data.kind == DataKind::Text) {
    require(c.model.vocabSize >= 256, "model.vocab_size must be >= 256 for byte-level text data, got " +
                                          std::to_string(c.model.vocabSize));
  }
}

ModelSetup buildGpt(const Config& c) {
  ModelSetup s;
  auto gpt = models::Gpt(languageModelOptions<models::GptOptions>(c));
  setModule(s, gpt);
  languageModelData(c, s);
  return s;
}

}  // namespace

ModelSpec gpt() {
  ModelSpec s;
  s.name = "gpt";
  s.summary = "GPT-2 style transformer (models/Gpt.h)";
  s.keys = kLanguageModelKeys;
  s.tokenWindows = true;
  s.validate = validateGpt;
  s.memory = languageModelMemory;
  s.build = buildGpt;
  return s;
}

}  // namespace sluice::modelspecs
