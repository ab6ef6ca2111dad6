// The Gemma 2 adapter: Gemma's decoder (embeddings times sqrt(hidden_size), RMSNorm gains 1 + weight, GeGLU MLP)
// with scores scaled by query_pre_attn_scalar^(-1/2), softmax logits soft-capped (attn_logit_softcapping: cap
// tanh(S / cap)), a sliding window on the even layers (or on those config.json's layer_types names), and the
// attention's and the MLP's outputs RMS-normalized before the residual sum (post_attention_layernorm,
// post_feedforward_layernorm; the MLP reads pre_feedforward_layernorm). The final logits' soft-capping acts after
// the last layer, outside what the probes measure. From safetensors, or GGUF files of architecture "gemma2" (gains
// written as 1 + weight; blk.N.post_attention_norm, ffn_norm, post_ffw_norm; the scale as llama.cpp sets it).

#include "llama_like.hpp"

namespace attncheck::probes::detail {

namespace {

const DecoderTraits gemma2_traits{.family = "Gemma 2",
                                  .activation_key = "hidden_activation",
                                  .default_activation = "gelu_pytorch_tanh",
                                  .activations = {"gelu_pytorch_tanh", "gelu_new", "gelu"},
                                  .gemma_scaling = true,
                                  .sandwich_norms = true};

ModelConfig config_from_json(const nlohmann::json& config, const std::filesystem::path& file,
                             const Checkpoint& checkpoint) {
  ModelConfig c = llama_like_config(config, file, checkpoint, gemma2_traits);
  // Gemma2Config's defaults: a cap of 50, a window of 4096 on every other layer from layer 0.
  read_gemma_attention(config, file, c, {.logit_softcap = 50, .global_every = 2});
  return c;
}

ModelConfig config_from_gguf(const GgufHeader& header, const Checkpoint& checkpoint) {
  ModelConfig c = llama_like_config_from_gguf(header, checkpoint, gemma2_traits);
  // llama.cpp's defaults: Gemma2Config's cap and window, the window on the even layers, 46 layers for the 27B model.
  read_gemma_gguf_attention(GgufMetadata(header), c,
                            {.global_every = 2, .layers_27b = 46, .sliding_window = 4096, .logit_softcap = 50});
  return c;
}

std::string describe(const ModelConfig& c) { return llama_like_describe(c) + gemma_attention_describe(c); }

}  // namespace

extern const FamilyAdapter gemma2_adapter{.name = "Gemma 2",
                                          .model_types = {"gemma2"},
                                          .gguf_architectures = {"gemma2"},
                                          .config_from_json = config_from_json,
                                          .config_from_gguf = config_from_gguf,
                                          .embedding_scale_tensor = llama_like_embeddings,
                                          .embed_tokens = llama_like_embed_tokens,
                                          .forward = llama_like_forward_for<gemma2_traits>,
                                          .describe = describe,
                                          .rotates_keys = true};

}  // namespace attncheck::probes::detail
