// The Gemma 3 adapter (text): Gemma 2's decoder without the logit soft-cap (attn_logit_softcapping is null in the
// published configs, applied when set), with an RMSNorm over each head's queries and keys before the rotation
// (self_attn.q_norm and k_norm, gain 1 + weight), a sliding window on every layer but each
// sliding_window_pattern-th (or on those config.json's layer_types names), and two rotary bases: the sliding layers'
// rope_local_base_freq, the others' rope_theta with rope_scaling's linear factor. Reads "gemma3_text" configs, and
// "gemma3" (image and text) configs whose text_config holds the text model, with its tensors under
// language_model.model. or model.language_model. (the vision tower is not read). Keys that a config leaves out take
// Gemma3TextConfig's defaults, as multimodal configs rely on. Or GGUF files of architecture "gemma3" (the text model;
// gains, q/k norms' too, written as 1 + weight), read as llama.cpp reads them: the window on every layer but each
// sixth, the sliding layers' rotary base 10000, the others' rope.freq_base with rope.scaling's linear factor.

#include "llama_like.hpp"

namespace attncheck::probes::detail {

namespace {

const DecoderTraits gemma3_traits{.family = "Gemma 3",
                                  .activation_key = "hidden_activation",
                                  .default_activation = "gelu_pytorch_tanh",
                                  .activations = {"gelu_pytorch_tanh", "gelu_new", "gelu"},
                                  .gemma_scaling = true,
                                  .head_norms = true,
                                  .sandwich_norms = true,
                                  // An image-and-text model's text model.
                                  .tensor_prefixes = {"", "model.", "language_model.model.", "model.language_model."}};

// rope_scaling's linear factor (1 without scaling); other kinds are refused, naming them.
double linear_rope_factor(const nlohmann::json& text, const std::filesystem::path& file) {
  if (!text.contains("rope_scaling") || text["rope_scaling"].is_null()) return 1;
  const auto& scaling = text["rope_scaling"];
  const std::string type =
      value_or<std::string>(scaling, "rope_type",
                            value_or<std::string>(scaling, "type", "default", file, "rope_scaling"), file,
                            "rope_scaling");
  if (!scaling.is_object() || (type != "linear" && type != "default")) {
    throw InputError(fmt::format("{}: rope_scaling {} is not supported (linear only)", file.string(),
                                 records::json_excerpt(scaling)));
  }
  if (type == "default") return 1;
  return checked_number(value_or<double>(scaling, "factor", 1.0, file, "rope_scaling"), 0, true, file.string(),
                        "rope_scaling.factor");
}

// Newer configs give one "rope_parameters" object per kind of layer ({"full_attention": {...},
// "sliding_attention": {...}}) or one for all: the same as the older keys rope_theta and rope_scaling (the full
// layers') and rope_local_base_freq (the sliding layers'), which the reader below takes.
nlohmann::json with_rope_keys(nlohmann::json text, const std::filesystem::path& file) {
  const nlohmann::json& rope = text["rope_parameters"];
  if (!rope.is_object()) {
    throw InputError(
        fmt::format("{}: \"rope_parameters\" is {}, not an object", file.string(), records::json_excerpt(rope)));
  }
  const bool per_kind = rope.contains("full_attention") || rope.contains("sliding_attention");
  const auto kind = [&](const char* name) -> nlohmann::json {
    if (!per_kind) return rope;
    if (!rope.contains(name) || !rope[name].is_object()) {
      throw InputError(fmt::format("{}: \"rope_parameters.{}\" is missing or not an object", file.string(), name));
    }
    return rope[name];
  };
  const nlohmann::json full = kind("full_attention"), sliding = kind("sliding_attention");
  for (const auto& [parameters, name] :
       {std::pair{&full, "full_attention"}, std::pair{&sliding, "sliding_attention"}}) {
    const std::string type = value_or<std::string>(*parameters, "rope_type", "default", file, "rope_parameters");
    if (type != "default" && !(type == "linear" && parameters == &full)) {
      throw InputError(
          fmt::format("{}: rope_parameters{}{} has rope_type '{}': the probe reads default rotary "
                      "positions (and linear scaling of the full-attention layers')",
                      file.string(), per_kind ? "." : "", per_kind ? name : "", type));
    }
  }
  if (full.contains("rope_theta")) text["rope_theta"] = full["rope_theta"];
  if (sliding.contains("rope_theta")) text["rope_local_base_freq"] = sliding["rope_theta"];
  if (value_or<std::string>(full, "rope_type", "default", file, "rope_parameters") == "linear") {
    text["rope_scaling"] = {{"rope_type", "linear"}, {"factor", full.value("factor", nlohmann::json(1.0))}};
  }
  text.erase("rope_parameters");
  return text;
}

ModelConfig config_from_json(const nlohmann::json& config, const std::filesystem::path& file,
                             const Checkpoint& checkpoint) {
  nlohmann::json text = config;
  if (value_or<std::string>(config, "model_type", "", file) == "gemma3") {
    if (!config.contains("text_config") || !config["text_config"].is_object()) {
      throw InputError(fmt::format("{}: a \"gemma3\" configuration without a \"text_config\" object", file.string()));
    }
    text = config["text_config"];
  }
  if (text.contains("rope_parameters")) text = with_rope_keys(std::move(text), file);
  // Gemma3TextConfig's defaults, for the keys a config leaves out.
  const nlohmann::json defaults = {{"vocab_size", 262208},
                                   {"hidden_size", 2304},
                                   {"intermediate_size", 9216},
                                   {"num_hidden_layers", 26},
                                   {"num_attention_heads", 8},
                                   {"num_key_value_heads", 4},
                                   {"head_dim", 256},
                                   {"max_position_embeddings", 131072},
                                   {"rms_norm_eps", 1e-6},
                                   {"rope_theta", 1000000.0},
                                   {"rope_local_base_freq", 10000.0}};
  for (const auto& [key, value] : defaults.items()) {
    if (!text.contains(key) || text[key].is_null()) text[key] = value;
  }
  const double factor = linear_rope_factor(text, file);
  text.erase("rope_scaling");  // read above; Llama's reader refuses every scaling
  ModelConfig c = llama_like_config(text, file, checkpoint, gemma3_traits);
  read_gemma_attention(text, file, c,
                       {.logit_softcap = 0, .global_every = positive_int_or(text, "sliding_window_pattern", 6, file)});
  c.rope_local_theta = checked_number(value_or<double>(text, "rope_local_base_freq", 10000.0, file), 0, true,
                                      file.string(), "rope_local_base_freq");
  c.rope_linear_factor = factor;
  return c;
}

ModelConfig config_from_gguf(const GgufHeader& header, const Checkpoint& checkpoint) {
  ModelConfig c = llama_like_config_from_gguf(header, checkpoint, gemma3_traits, /*linear_rope_scaling=*/true);
  // No window when attention.sliding_window is absent; 62 layers for the 27B model; no logit cap.
  read_gemma_gguf_attention(GgufMetadata(header), c,
                            {.global_every = 6, .layers_27b = 62, .sliding_window = 0, .logit_softcap = 0});
  c.rope_local_theta = 10000;
  return c;
}

std::string describe(const ModelConfig& c) {
  return llama_like_describe(c) + gemma_attention_describe(c) +
         fmt::format(
             "sliding layers' rotary base {:g}, the others' positions divided by {:g}; queries and keys "
             "RMS-normalized per head (d = {}) before the rotation: |dA/dW_Q|, |dA/dW_K| through the norms\n",
             c.rope_local_theta, c.rope_linear_factor, c.head_dim());
}

}  // namespace

extern const FamilyAdapter gemma3_adapter{.name = "Gemma 3",
                                          .model_types = {"gemma3_text", "gemma3"},
                                          .gguf_architectures = {"gemma3"},
                                          .config_from_json = config_from_json,
                                          .config_from_gguf = config_from_gguf,
                                          .embedding_scale_tensor = llama_like_embeddings,
                                          .embed_tokens = llama_like_embed_tokens,
                                          .forward = llama_like_forward_for<gemma3_traits>,
                                          .describe = describe,
                                          .rotates_keys = true,
                                          .normalizes_heads = true};

}  // namespace attncheck::probes::detail
