// The Mistral adapter: Llama's decoder whose attention sees at most the last sliding_window positions
// (transformers' MistralModel, 4.38.2: key j is attended by query i when i - sliding_window < j <= i).
// Safetensors only: llama.cpp writes Mistral checkpoints as "llama" GGUF files, without the window.

#include "llama_like.hpp"

namespace attncheck::probes::detail {

namespace {

const DecoderTraits mistral_traits{.family = "Mistral"};

ModelConfig config_from_json(const nlohmann::json& config, const std::filesystem::path& file,
                             const Checkpoint& checkpoint) {
  ModelConfig c = llama_like_config(config, file, checkpoint, mistral_traits);
  c.sliding_window = positive_int_or(config, "sliding_window", 0, file);
  return c;
}

}  // namespace

extern const FamilyAdapter mistral_adapter{.name = "Mistral",
                                           .model_types = {"mistral"},
                                           .config_from_json = config_from_json,
                                           .embedding_scale_tensor = llama_like_embeddings,
                                           .embed_tokens = llama_like_embed_tokens,
                                           .forward = llama_like_forward_for<mistral_traits>,
                                           .describe = llama_like_describe,
                                           .rotates_keys = true};

}  // namespace attncheck::probes::detail
