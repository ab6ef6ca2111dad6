// The Gemma adapter: Llama's decoder with embeddings multiplied by sqrt(hidden_size), RMSNorm gains stored as
// (gain - 1), a GeGLU MLP and head_dim given apart from hidden_size / heads. The activation is config.json's
// hidden_activation, the tanh approximation when absent, as transformers read it since 4.40 (4.38.2 read
// hidden_act, which the first published configs set to the exact "gelu"). From safetensors, or GGUF files of
// architecture "gemma", whose gains llama.cpp's converter writes as 1 + weight and whose activation is ggml's GELU,
// the tanh approximation.

#include "llama_like.hpp"

namespace attncheck::probes::detail {

namespace {

const DecoderTraits gemma_traits{.family = "Gemma",
                                 .activation_key = "hidden_activation",
                                 .default_activation = "gelu_pytorch_tanh",
                                 .activations = {"gelu_pytorch_tanh", "gelu_new", "gelu"},
                                 .gemma_scaling = true};

std::string describe(const ModelConfig& c) {
  return llama_like_describe(c) +
         fmt::format("embeddings times sqrt({}); RMSNorm gains 1 + weight; GeGLU MLP ({})\n", c.hidden, c.hidden_act);
}

}  // namespace

extern const FamilyAdapter gemma_adapter{.name = "Gemma",
                                         .model_types = {"gemma"},
                                         .gguf_architectures = {"gemma"},
                                         .config_from_json = llama_like_config_for<gemma_traits>,
                                         .config_from_gguf = llama_like_gguf_config_for<gemma_traits>,
                                         .embedding_scale_tensor = llama_like_embeddings,
                                         .embed_tokens = llama_like_embed_tokens,
                                         .forward = llama_like_forward_for<gemma_traits>,
                                         .describe = describe,
                                         .rotates_keys = true};

}  // namespace attncheck::probes::detail
