// The Qwen3 adapter: Llama's decoder with an RMSNorm over each head's queries and keys before the rotation
// (self_attn.q_norm and k_norm, gain = weight), head_dim given apart from hidden_size / heads, and the q/k/v
// biases read wherever the checkpoint has them (attention_bias, false in the published configs). Its sliding
// window is refused as Qwen2's is (use_sliding_window is false in the published checkpoints). From safetensors, or
// GGUF files of architecture "qwen3" (head norms blk.N.attn_q_norm, attn_k_norm; head_dim as attention.key_length).

#include "llama_like.hpp"

namespace attncheck::probes::detail {

namespace {

const DecoderTraits qwen3_traits{.family = "Qwen3", .head_norms = true};

ModelConfig config_from_json(const nlohmann::json& config, const std::filesystem::path& file,
                             const Checkpoint& checkpoint) {
  if (value_or<bool>(config, "use_sliding_window", false, file)) {
    throw InputError(fmt::format(
        "{}: \"use_sliding_window\" is true: Qwen3's sliding window is not supported (the published checkpoints "
        "leave it off)",
        file.string()));
  }
  return llama_like_config(config, file, checkpoint, qwen3_traits);
}

std::string describe(const ModelConfig& c) {
  return llama_like_describe(c) + fmt::format(
                                      "queries and keys RMS-normalized per head (d = {}) before the rotation: "
                                      "|dA/dW_Q|, |dA/dW_K| through the norms\n",
                                      c.head_dim());
}

}  // namespace

extern const FamilyAdapter qwen3_adapter{.name = "Qwen3",
                                         .model_types = {"qwen3"},
                                         .gguf_architectures = {"qwen3"},
                                         .config_from_json = config_from_json,
                                         .config_from_gguf = llama_like_gguf_config_for<qwen3_traits>,
                                         .embedding_scale_tensor = llama_like_embeddings,
                                         .embed_tokens = llama_like_embed_tokens,
                                         .forward = llama_like_forward_for<qwen3_traits>,
                                         .describe = describe,
                                         .rotates_keys = true,
                                         .normalizes_heads = true};

}  // namespace attncheck::probes::detail
