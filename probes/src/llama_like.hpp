#pragma once
// Internal to the probes library: Llama's decoder (llama.cpp) as the families built on it read and run it
// (mistral.cpp, qwen2.cpp, gemma.cpp), each naming only what it changes.

#include "adapters.hpp"

namespace attncheck::probes::detail {

// What a family changes in Llama's block beyond ModelConfig's values.
struct DecoderTraits {
  std::string_view family;                            // in messages: "Mistral"
  const char* activation_key = "hidden_act";          // config.json's key for the gated MLP's activation
  std::string_view default_activation = "silu";       // when that key is absent
  std::vector<std::string_view> activations{"silu"};  // the ones the family's checkpoints use
  // Gemma: RMSNorm gains stored as (gain - 1), and embeddings multiplied by sqrt(hidden_size) before layer 0.
  bool gemma_scaling = false;
  // Qwen3, Gemma 3: RMSNorms over each head's queries and keys before the rotation (self_attn.q_norm, k_norm).
  bool head_norms = false;
  // Gemma 2, Gemma 3: the attention's and the MLP's outputs normalized before the residual sum
  // (post_attention_layernorm, post_feedforward_layernorm), the MLP's input by pre_feedforward_layernorm.
  bool sandwich_norms = false;
  // Llama: llama.cpp's converter permutes the query and key rows so that ggml rotates pairs (2p, 2p+1); the other
  // families' GGUF files keep Hugging Face's rows, which ggml rotates in pairs (p, p + d/2).
  bool gguf_interleaved_rope = false;
  // Phi-3: the query, key and value projections fused into self_attn.qkv_proj (rows q | k | v) and the MLP's gate
  // and up projections into mlp.gate_up_proj (rows gate | up).
  bool fused_projections = false;
  // Where config.json's checkpoints keep the decoder: the last of these the embeddings are found under.
  std::vector<const char*> tensor_prefixes{"", "model."};
};

// config.json of a Llama-like decoder: sizes (checked against the checkpoint's tensors), grouped queries, head_dim,
// RMSNorm epsilon, the activation, rotary base (rope scaling refused), the tensor prefix. Errors name the file and the
// key.
ModelConfig llama_like_config(const nlohmann::json& config, const std::filesystem::path& file,
                              const Checkpoint& checkpoint, const DecoderTraits& traits);
// A GGUF file of a Llama-like decoder as llama.cpp writes it: the same values as llama_like_config reads, under the
// file's architecture prefix, the activation the family's default; rope scaling refused, or read when linear and
// `linear_rope_scaling`; experts refused.
ModelConfig llama_like_config_from_gguf(const GgufHeader& header, const Checkpoint& checkpoint,
                                        const DecoderTraits& traits, bool linear_rope_scaling = false);
// Llama's embedding table (GGUF or Hugging Face names).
std::string llama_like_embeddings(const ModelConfig& c);
Matrix llama_like_embed_tokens(const Checkpoint& checkpoint, const ModelConfig& c, std::span<const std::int64_t> ids);
// Layers 0 .. last: pre-RMSNorm blocks, rotary queries and keys, grouped-query causal attention (within
// config.sliding_window positions when set, on config.sliding_layers when listed), a gated MLP.
// With "sliding_window" absent or null in config.json, every layer attends to every earlier key.
void llama_like_forward(const Checkpoint& checkpoint, const ModelConfig& c, Matrix h, std::int64_t last,
                        const LayerSink& sink, const DecoderTraits& traits);
std::string llama_like_describe(const ModelConfig& c);

// config.json's "layer_types" ("sliding_attention" or "full_attention" per layer) as the layers the window applies
// to; when absent, layer l slides unless (l + 1) is a multiple of `global_every`. Errors name the file and the entry.
std::vector<bool> sliding_layers_from_json(const nlohmann::json& config, const std::filesystem::path& file,
                                           std::int64_t layers, std::int64_t global_every);
// Layer l slides unless (l + 1) is a multiple of `global_every`.
std::vector<bool> all_but_every(std::int64_t layers, std::int64_t global_every);
// Gemma 2 and 3's attention in config.json: query_pre_attn_scalar, attn_logit_softcapping, sliding_window and the
// sliding layers (see sliding_layers_from_json), each key's fallback the family's configuration default.
struct GemmaAttentionDefaults {
  double query_pre_attn_scalar = 256, logit_softcap = 0;
  std::int64_t sliding_window = 4096, global_every = 2;
};
void read_gemma_attention(const nlohmann::json& config, const std::filesystem::path& file, ModelConfig& c,
                          const GemmaAttentionDefaults& defaults);
// Gemma 2 and 3's attention in a GGUF file as llama.cpp reads it: the window (attention.sliding_window, or
// `sliding_window` when absent; 0: none) on every layer but each `global_every`-th, the logit cap
// (attn_logit_softcapping, or `logit_softcap` when absent; 0: the family has none), the scale from the sizes.
struct GemmaGgufAttention {
  std::int64_t global_every, layers_27b, sliding_window;
  double logit_softcap;
};
void read_gemma_gguf_attention(const GgufMetadata& meta, ModelConfig& c, const GemmaGgufAttention& gemma);
// What Gemma 2 and 3 add to Llama's description: the scale, the cap, the sliding layers, the sandwich norms.
std::string gemma_attention_describe(const ModelConfig& c);

// The same as a FamilyAdapter's config_from_json, config_from_gguf and forward, for a family's traits.
template <const DecoderTraits& traits>
ModelConfig llama_like_config_for(const nlohmann::json& config, const std::filesystem::path& file,
                                  const Checkpoint& checkpoint) {
  return llama_like_config(config, file, checkpoint, traits);
}
template <const DecoderTraits& traits>
ModelConfig llama_like_gguf_config_for(const GgufHeader& header, const Checkpoint& checkpoint) {
  return llama_like_config_from_gguf(header, checkpoint, traits);
}
template <const DecoderTraits& traits>
void llama_like_forward_for(const Checkpoint& checkpoint, const ModelConfig& c, Matrix h, std::int64_t last,
                            const LayerSink& sink) {
  llama_like_forward(checkpoint, c, std::move(h), last, sink, traits);
}

}  // namespace attncheck::probes::detail
