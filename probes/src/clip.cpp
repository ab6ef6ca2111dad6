// The CLIP adapters. The vision tower of Hugging Face CLIPVisionModel (model_type "clip_vision_model") and of a whole
// CLIPModel ("clip", its vision_config): ViT's patches and CLS token, with a convolution without bias, a LayerNorm
// over the embeddings before the first layer (pre_layrnorm, so spelled in the checkpoints), then pre-LayerNorm
// blocks with quick_gelu MLPs. The text tower of CLIPTextModel ("clip_text_model"): the same blocks, causal.

#include "adapters.hpp"

namespace attncheck::probes::detail {

namespace fs = std::filesystem;

namespace {

// A positive count from the tower's part of config.json (`within` names that part in errors).
std::int64_t tower_size(const nlohmann::json& tower, const char* key, std::int64_t fallback, const fs::path& file,
                        std::string_view within) {
  const auto value = value_or<std::int64_t>(tower, key, fallback, file, within);
  if (value <= 0) {
    throw InputError(fmt::format("{}: \"{}{}{}\" is {}, not a positive integer", file.string(), within,
                                 within.empty() ? "" : ".", key, value));
  }
  return value;
}

// What both towers' configurations share, with CLIPTextConfig's or CLIPVisionConfig's defaults.
ModelConfig tower_config(const nlohmann::json& tower, const fs::path& file, std::string_view within,
                         std::int64_t hidden, std::int64_t intermediate, std::int64_t heads) {
  ModelConfig c;
  c.hidden = tower_size(tower, "hidden_size", hidden, file, within);
  c.intermediate = tower_size(tower, "intermediate_size", intermediate, file, within);
  c.layers = tower_size(tower, "num_hidden_layers", 12, file, within);
  c.heads = tower_size(tower, "num_attention_heads", heads, file, within);
  c.hidden_act = value_or<std::string>(tower, "hidden_act", "quick_gelu", file, within);
  const std::string eps_key = fmt::format("{}{}layer_norm_eps", within, within.empty() ? "" : ".");
  c.layer_norm_eps =
      checked_number(value_or<double>(tower, "layer_norm_eps", 1e-5, file, within), 0, false, file.string(), eps_key);
  return c;
}

void find_prefix(ModelConfig& c, const Checkpoint& checkpoint, const char* tower, const char* tensor) {
  for (const std::string& prefix : {std::string(), std::string(tower) + "."}) {
    if (checkpoint.contains(prefix + tensor)) c.tensor_prefix = prefix;
  }
}

ModelConfig vision_config(const nlohmann::json& config, const fs::path& file, const Checkpoint& checkpoint) {
  // A whole CLIP's config.json writes only the tower's values that differ from CLIPVisionConfig's defaults.
  const bool whole = value_or<std::string>(config, "model_type", "", file) == "clip";
  const std::string_view within = whole ? "vision_config" : "";
  const nlohmann::json empty = nlohmann::json::object();
  const bool nested = whole && config.contains("vision_config") && !config["vision_config"].is_null();
  const nlohmann::json& tower = !whole ? config : nested ? config["vision_config"] : empty;
  if (!tower.is_object()) {
    throw InputError(
        fmt::format("{}: \"vision_config\" is {}, not an object", file.string(), records::json_excerpt(tower)));
  }
  ModelConfig c = tower_config(tower, file, within, 768, 3072, 12);
  c.channels = tower_size(tower, "num_channels", 3, file, within);
  c.image_size = tower_size(tower, "image_size", 224, file, within);
  c.patch_size = tower_size(tower, "patch_size", 32, file, within);
  set_patch_grid(c, file);
  find_prefix(c, checkpoint, "vision_model", "embeddings.class_embedding");
  return c;
}

std::string position_embedding_name(const ModelConfig& c) {
  return c.tensor_prefix + "embeddings.position_embedding.weight";
}

ModelConfig text_config(const nlohmann::json& config, const fs::path& file, const Checkpoint& checkpoint) {
  ModelConfig c = tower_config(config, file, "", 512, 2048, 8);
  c.causal = true;
  c.vocab = tower_size(config, "vocab_size", 49408, file, "");
  c.max_positions = tower_size(config, "max_position_embeddings", 77, file, "");
  find_prefix(c, checkpoint, "text_model", "embeddings.token_embedding.weight");
  return c;
}

std::string token_embeddings(const ModelConfig& c) { return c.tensor_prefix + "embeddings.token_embedding.weight"; }

Matrix embed_tokens(const Checkpoint& checkpoint, const ModelConfig& c, std::span<const std::int64_t> ids) {
  return token_and_position_embeddings(checkpoint, token_embeddings(c), position_embedding_name(c), ids, c.hidden);
}

Matrix embed(const Checkpoint& checkpoint, const ModelConfig& c, const Pixels& pixels) {
  const std::string e = c.tensor_prefix + "embeddings.";
  return embed_patches(checkpoint, c, pixels,
                       {.kernel = e + "patch_embedding.weight",
                        .cls = e + "class_embedding",
                        .positions = position_embedding_name(c),
                        .batched = false});
}

PreNormNames layer_names(const ModelConfig& c, std::int64_t layer) {
  const std::string p = fmt::format("{}encoder.layers.{}.", c.tensor_prefix, layer);
  return {.norm_before = p + "layer_norm1",
          .q = p + "self_attn.q_proj",
          .k = p + "self_attn.k_proj",
          .v = p + "self_attn.v_proj",
          .o = p + "self_attn.out_proj",
          .norm_after = p + "layer_norm2",
          .mlp_in = p + "mlp.fc1",
          .mlp_out = p + "mlp.fc2"};
}

// The text tower has no LayerNorm before its first layer.
void text_forward(const Checkpoint& checkpoint, const ModelConfig& c, Matrix h, std::int64_t last,
                  const LayerSink& sink) {
  pre_norm_encoder(checkpoint, c, std::move(h), last, sink, layer_names);
}

void vision_forward(const Checkpoint& checkpoint, const ModelConfig& c, Matrix h, std::int64_t last,
                    const LayerSink& sink) {
  const std::string norm = c.tensor_prefix + "pre_layrnorm";
  h = layer_norm(h, checkpoint.vector(norm + ".weight", c.hidden), checkpoint.vector(norm + ".bias", c.hidden),
                 c.layer_norm_eps);
  pre_norm_encoder(checkpoint, c, std::move(h), last, sink, layer_names);
}

std::string describe_vision(const ModelConfig& c) {
  return fmt::format("{0} x {0} pixel patches; position embeddings for {1} x {1} pixels\n", c.patch_size, c.image_size);
}

}  // namespace

extern const FamilyAdapter clip_vision_adapter{.name = "CLIP vision",
                                               .model_types = {"clip_vision_model", "clip"},
                                               .config_from_json = vision_config,
                                               .embedding_scale_tensor = position_embedding_name,
                                               .embed_pixels = embed,
                                               .forward = vision_forward,
                                               .describe = describe_vision};
// CLIPTextModel: token and position embeddings, the same blocks with causal attention. transformers adds a padding
// mask only when given one; the probe's input has none, so every earlier position is attended.
extern const FamilyAdapter clip_text_adapter{.name = "CLIP text",
                                             .model_types = {"clip_text_model"},
                                             .config_from_json = text_config,
                                             .embedding_scale_tensor = token_embeddings,
                                             .embed_tokens = embed_tokens,
                                             .forward = text_forward};

}  // namespace attncheck::probes::detail
