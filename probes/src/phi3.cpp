// The Phi-3 adapter (model_type "phi3"): Llama's decoder with the query, key and value projections fused into
// self_attn.qkv_proj and the MLP's gate and up projections into mlp.gate_up_proj, and Mistral's sliding window
// (query i attends keys i - sliding_window < j <= i). Long-context variants (rope_scaling "longrope") and a partial
// rotary (partial_rotary_factor below 1, Phi-4-mini) are refused. From safetensors, or GGUF files of architecture
// "phi3" as llama.cpp's converter writes them (blk.N.attn_qkv, blk.N.ffn_up holding gate | up, the window as
// phi3.attention.sliding_window).

#include "llama_like.hpp"

namespace attncheck::probes::detail {

namespace {

const DecoderTraits phi3_traits{.family = "Phi-3", .fused_projections = true};

ModelConfig config_from_json(const nlohmann::json& config, const std::filesystem::path& file,
                             const Checkpoint& checkpoint) {
  ModelConfig c = llama_like_config(config, file, checkpoint, phi3_traits);
  c.sliding_window = positive_int_or(config, "sliding_window", 0, file);
  const std::string bias = c.tensor_prefix + "layers.0.self_attn.qkv_proj.bias";
  if (checkpoint.contains(bias)) {
    throw InputError(fmt::format("{}: the checkpoint has {}: Phi-3's projections have no biases", file.string(), bias));
  }
  return c;
}

ModelConfig config_from_gguf(const GgufHeader& header, const Checkpoint& checkpoint) {
  ModelConfig c = llama_like_config_from_gguf(header, checkpoint, phi3_traits);
  c.sliding_window = GgufMetadata(header).size_or("attention.sliding_window", 0);
  return c;
}

}  // namespace

extern const FamilyAdapter phi3_adapter{.name = "Phi-3",
                                        .model_types = {"phi3"},
                                        .gguf_architectures = {"phi3"},
                                        .config_from_json = config_from_json,
                                        .config_from_gguf = config_from_gguf,
                                        .embedding_scale_tensor = llama_like_embeddings,
                                        .embed_tokens = llama_like_embed_tokens,
                                        .forward = llama_like_forward_for<phi3_traits>,
                                        .describe = llama_like_describe,
                                        .rotates_keys = true};

}  // namespace attncheck::probes::detail
