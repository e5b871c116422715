// model.name: llama, a Llama style transformer (models/Llama.h): RMSNorm,
// RoPE, SwiGLU, grouped-query attention.
#include "config/models/Specs.h"
#include "models/Llama.h"

namespace sluice::modelspecs {
namespace {

void validateLlama(Config& c) {
  validateLanguageModel(c);
  auto& m = c.model;
  const int64_t kv = m.kvHeads == 0 ? m.heads : m.kvHeads;
  require(m.kvHeads >= 0, "model.kv_heads must be >= 1 (0 = model.heads), got " + std::to_string(m.kvHeads));
  require(m.heads % kv == 0, "model.kv_heads (" + std::to_string(kv) + ") must divide model.heads (" +
                                 std::to_string(m.heads) + "): " + std::to_string(m.heads) + " % " +
                                 std::to_string(kv) + " = " + std::to_string(m.heads % kv));
  require((m.embd / m.heads) % 2 == 0, "model.embd / model.heads (" + std::to_string(m.embd) + " / " +
                                           std::to_string(m.heads) + " = " + std::to_string(m.embd / m.heads) +
                                           ") must be even: rotary embeddings rotate pairs of dimensions");
  require(m.ffnHidden >= 0, "model.ffn_hidden must be >= 0 (0 = 2/3 x 4 x embd), got " + std::to_string(m.ffnHidden));
  if (c.data.kind == DataKind::Text) {
    require(m.vocabSize >= 256, "model.vocab_size must be >= 256 for byte-level text data, got " +
                                    std::to_string(m.vocabSize));
  }
}

ModelSetup buildLlama(const Config& c) {
  ModelSetup s;
  auto o = languageModelOptions<models::LlamaOptions>(c);
  o.kvHeads = c.model.kvHeads == 0 ? c.model.heads : c.model.kvHeads;
  o.hidden = c.model.ffnHidden;
  auto llama = models::Llama(o);
  setModule(s, llama);
  languageModelData(c, s);
  return s;
}

}  // namespace

ModelSpec llama() {
  ModelSpec s;
  s.name = "llama";
  s.summary = "Llama style transformer: RMSNorm, RoPE, SwiGLU, grouped-query attention";
  s.keys = kLanguageModelKeys;
  s.keys.insert(s.keys.end(), {"kv_heads", "ffn_hidden"});
  s.tiesEmbeddings = true;
  s.tokenWindows = true;
  s.validate = validateLlama;
  s.memory = languageModelMemory;
  s.build = buildLlama;
  return s;
}

}  // namespace sluice::modelspecs
