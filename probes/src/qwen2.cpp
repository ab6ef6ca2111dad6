// The Qwen2 adapter: Llama's decoder with biased query, key and value projections (read wherever the checkpoint
// has them). Its sliding window is refused: transformers' releases disagree on which layers max_window_layers
// windows (4.38.2's eager attention windows all of them whenever sliding_window is set), and the published
// checkpoints leave use_sliding_window false (llama.cpp's "qwen2" has no window either). From safetensors, or GGUF
// files of architecture "qwen2" (biases blk.N.attn_q.bias etc.).

#include "llama_like.hpp"

namespace attncheck::probes::detail {

namespace {

const DecoderTraits qwen2_traits{.family = "Qwen2"};

ModelConfig config_from_json(const nlohmann::json& config, const std::filesystem::path& file,
                             const Checkpoint& checkpoint) {
  if (value_or<bool>(config, "use_sliding_window", false, file)) {
    throw InputError(fmt::format(
        "{}: \"use_sliding_window\" is true: Qwen2's sliding window is not supported (which layers it covers "
        "differs between transformers releases)",
        file.string()));
  }
  return llama_like_config(config, file, checkpoint, qwen2_traits);
}

}  // namespace

extern const FamilyAdapter qwen2_adapter{.name = "Qwen2",
                                         .model_types = {"qwen2"},
                                         .gguf_architectures = {"qwen2"},
                                         .config_from_json = config_from_json,
                                         .config_from_gguf = llama_like_gguf_config_for<qwen2_traits>,
                                         .embedding_scale_tensor = llama_like_embeddings,
                                         .embed_tokens = llama_like_embed_tokens,
                                         .forward = llama_like_forward_for<qwen2_traits>,
                                         .describe = llama_like_describe,
                                         .rotates_keys = true};

}  // namespace attncheck::probes::detail
