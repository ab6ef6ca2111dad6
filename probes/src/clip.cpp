// The CLIP adapters. The vision tower of Hugging Face CLIPVisionModel (model_type "clip_vision_model") and of a whole
// CLIPModel ("clip", its vision_config): ViT's patches and CLS token, with a convolution without bias, a LayerNorm
// over the embeddings before the first layer (pre_layrnorm, so spelled in the checkpoints), then pre-LayerNorm
// blocks with quick_gelu MLPs. The text tower of CLIPTextModel ("clip_text_model"): the same blocks, causal.
// The vision tower is also read from llama.cpp's mmproj GGUF files (general.architecture "clip", keys clip.vision.*,
// tensors v.*) as its CLIP and LLaVA converter writes them: the layers the file holds (LLaVA's drop the last one),
// the MLP's activation as llama.cpp picks it (clip.use_gelu: ggml's tanh GELU; else quick_gelu), ffn_up and
// ffn_down told apart by shape. Towers other than CLIP's (SigLIP, Qwen2-VL, Pixtral, ...) are refused by their
// projector type.

#include "adapters.hpp"

#include <algorithm>
#include <array>

namespace attncheck::probes::detail {

namespace fs = std::filesystem;

namespace {

// The key as messages name it: "vision_config.image_size" within a whole CLIP's configuration.
std::string tower_key(std::string_view within, const char* key) {
  return fmt::format("{}{}{}", within, within.empty() ? "" : ".", key);
}

// A positive count from the tower's part of config.json, at most kLargestSize (`within` names that part in errors).
std::int64_t tower_size(const nlohmann::json& tower, const char* key, std::int64_t fallback, const fs::path& file,
                        std::string_view within) {
  const auto value = value_or<std::int64_t>(tower, key, fallback, file, within);
  if (value <= 0) {
    throw InputError(
        fmt::format("{}: \"{}\" is {}, not a positive integer", file.string(), tower_key(within, key), value));
  }
  if (value > kLargestSize) {
    throw InputError(fmt::format("{}: \"{}\" is {}, more than the largest size a model declares ({})", file.string(),
                                 tower_key(within, key), value, kLargestSize));
  }
  return value;
}

std::string position_embedding_name(const ModelConfig& c) {
  return c.gguf ? "v.position_embd.weight" : c.tensor_prefix + "embeddings.position_embedding.weight";
}

std::string token_embeddings(const ModelConfig& c) { return c.tensor_prefix + "embeddings.token_embedding.weight"; }

// The sizes of either tower checked against its tensors: the layers, the hidden size (the position embeddings'
// columns), the MLP's width (its first projection's rows), and `extents`, the tower's own.
void require_tower_sizes(const ModelConfig& c, const Checkpoint& checkpoint, const std::string& source,
                         std::string_view within, const std::string& mlp_in, std::vector<DeclaredExtent> extents) {
  extents.push_back(
      {declared_value(tower_key(within, "hidden_size"), c.hidden), c.hidden, position_embedding_name(c), 1});
  extents.push_back(
      {declared_value(tower_key(within, "intermediate_size"), c.intermediate), c.intermediate, mlp_in, 0});
  require_declared_sizes(checkpoint, source, tower_key(within, "num_hidden_layers"), c.layers,
                         c.tensor_prefix + "encoder.layers.", extents);
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
  const std::string kernel = c.tensor_prefix + "embeddings.patch_embedding.weight";
  require_tower_sizes(c, checkpoint, file.string(), within, c.tensor_prefix + "encoder.layers.0.mlp.fc1.weight",
                      {{patch_grid_declared(c, whole ? "vision_config." : ""), c.max_positions,
                        position_embedding_name(c), 0, false},
                       {declared_value(tower_key(within, "num_channels"), c.channels), c.channels, kernel, 1},
                       {declared_value(tower_key(within, "patch_size"), c.patch_size), c.patch_size, kernel, 2}});
  return c;
}

ModelConfig vision_config_from_gguf(const GgufHeader& header, const Checkpoint& checkpoint) {
  const GgufMetadata meta(header);
  if (meta.has("has_vision_encoder") && !header.boolean(meta.prefix + "has_vision_encoder")) {
    throw InputError(
        fmt::format("{}: {}has_vision_encoder is false: no vision tower to probe", header.source, meta.prefix));
  }
  // LLaVA's and MobileVLM's projectors sit on CLIP's tower; the other types name other towers.
  static constexpr std::array<std::string_view, 4> clip_projectors{"mlp", "mlp_norm", "ldp", "ldpv2"};
  const std::string projector_key = meta.prefix + "projector_type";
  if (header.find(projector_key)) {
    const std::string& projector = header.string(projector_key);
    if (std::find(clip_projectors.begin(), clip_projectors.end(), projector) == clip_projectors.end()) {
      throw InputError(fmt::format(
          "{}: {} '{}' is not supported: only CLIP's vision tower is (projectors mlp, mlp_norm, ldp, ldpv2, or none)",
          header.source, projector_key, projector));
    }
  }
  for (const char* tensor : {"v.class_embd", "v.pre_ln.weight"}) {
    if (!checkpoint.contains(tensor)) {
      throw InputError(fmt::format(
          "{}: no tensor '{}': not CLIP's vision tower (a class embedding, a LayerNorm before the first layer)",
          header.source, tensor));
    }
  }
  ModelConfig c;
  c.gguf = true;
  c.layers = meta.size("vision.block_count");
  c.hidden = meta.size("vision.embedding_length");
  c.intermediate = meta.size("vision.feed_forward_length");
  c.heads = meta.size("vision.attention.head_count");
  c.image_size = meta.size("vision.image_size");
  c.patch_size = meta.size("vision.patch_size");
  c.channels = 3;
  if (c.hidden % c.heads != 0) {
    throw InputError(fmt::format("{}: {}vision.embedding_length {} is not a multiple of the {} heads", header.source,
                                 meta.prefix, c.hidden, c.heads));
  }
  const std::string epsilon = meta.prefix + "vision.attention.layer_norm_epsilon";
  c.layer_norm_eps = checked_number(header.number(epsilon), 0, false, header.source, epsilon);
  const auto flag = [&](const char* key) { return meta.has(key) && header.boolean(meta.prefix + key); };
  if (flag("use_gelu") && flag("use_silu")) {
    throw InputError(fmt::format("{}: {}use_gelu and use_silu are both true", header.source, meta.prefix));
  }
  c.hidden_act = flag("use_gelu") ? "gelu_pytorch_tanh" : flag("use_silu") ? "silu" : "quick_gelu";
  set_patch_grid(c, header.source);
  // llama.cpp's own test: a second projection that reads the embedding is the first one.
  const std::string down = "v.blk.0.ffn_down.weight";
  c.gguf_mlp_swapped = checkpoint.contains(down) && checkpoint.info(down).shape.size() == 2 &&
                       checkpoint.info(down).shape.back() == c.hidden;
  const std::string vision = meta.prefix + "vision.";
  require_declared_sizes(checkpoint, header.source, vision + "block_count", c.layers, "v.blk.",
                         {{declared_value(vision + "embedding_length", c.hidden), c.hidden, position_embedding_name(c),
                           1},
                          {patch_grid_declared(c, vision), c.max_positions, position_embedding_name(c), 0, false},
                          {declared_value(vision + "patch_size", c.patch_size), c.patch_size, "v.patch_embd.weight", 2},
                          {declared_value(vision + "feed_forward_length", c.intermediate), c.intermediate,
                           c.gguf_mlp_swapped ? down : "v.blk.0.ffn_up.weight", 0}});
  return c;
}

ModelConfig text_config(const nlohmann::json& config, const fs::path& file, const Checkpoint& checkpoint) {
  ModelConfig c = tower_config(config, file, "", 512, 2048, 8);
  c.causal = true;
  c.vocab = tower_size(config, "vocab_size", 49408, file, "");
  c.max_positions = tower_size(config, "max_position_embeddings", 77, file, "");
  find_prefix(c, checkpoint, "text_model", "embeddings.token_embedding.weight");
  require_tower_sizes(c, checkpoint, file.string(), "", c.tensor_prefix + "encoder.layers.0.mlp.fc1.weight",
                      {{declared_value("max_position_embeddings", c.max_positions), c.max_positions,
                        position_embedding_name(c), 0, false},
                       {declared_value("vocab_size", c.vocab), c.vocab, token_embeddings(c), 0, false}});
  return c;
}

Matrix embed_tokens(const Checkpoint& checkpoint, const ModelConfig& c, std::span<const std::int64_t> ids) {
  return token_and_position_embeddings(checkpoint, token_embeddings(c), position_embedding_name(c), ids, c.hidden);
}

Matrix embed(const Checkpoint& checkpoint, const ModelConfig& c, const Pixels& pixels) {
  if (c.gguf) {
    return embed_patches(checkpoint, c, pixels,
                         {.kernel = "v.patch_embd.weight",
                          .bias = checkpoint.contains("v.patch_embd.bias") ? "v.patch_embd.bias" : "",
                          .cls = "v.class_embd",
                          .positions = position_embedding_name(c),
                          .batched = false});
  }
  const std::string e = c.tensor_prefix + "embeddings.";
  return embed_patches(checkpoint, c, pixels,
                       {.kernel = e + "patch_embedding.weight",
                        .cls = e + "class_embedding",
                        .positions = position_embedding_name(c),
                        .batched = false});
}

PreNormNames layer_names(const ModelConfig& c, std::int64_t layer) {
  if (c.gguf) {
    const std::string p = fmt::format("v.blk.{}.", layer);
    return {.norm_before = p + "ln1",
            .q = p + "attn_q",
            .k = p + "attn_k",
            .v = p + "attn_v",
            .o = p + "attn_out",
            .norm_after = p + "ln2",
            .mlp_in = p + (c.gguf_mlp_swapped ? "ffn_down" : "ffn_up"),
            .mlp_out = p + (c.gguf_mlp_swapped ? "ffn_up" : "ffn_down")};
  }
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
  const std::string norm = c.gguf ? "v.pre_ln" : c.tensor_prefix + "pre_layrnorm";
  h = layer_norm(h, checkpoint.vector(norm + ".weight", c.hidden), checkpoint.vector(norm + ".bias", c.hidden),
                 c.layer_norm_eps);
  pre_norm_encoder(checkpoint, c, std::move(h), last, sink, layer_names);
}

std::string describe_vision(const ModelConfig& c) {
  std::string lines =
      fmt::format("{0} x {0} pixel patches; position embeddings for {1} x {1} pixels\n", c.patch_size, c.image_size);
  if (c.gguf) {
    lines +=
        fmt::format("mmproj GGUF as llama.cpp runs it: the {} layers the file holds, the MLP's activation {}\n",
                    c.layers, c.hidden_act == "gelu_pytorch_tanh" ? "GELU in tanh form (clip.use_gelu)" : c.hidden_act);
  }
  return lines;
}

}  // namespace

extern const FamilyAdapter clip_vision_adapter{.name = "CLIP vision",
                                               .model_types = {"clip_vision_model", "clip"},
                                               .gguf_architectures = {"clip"},
                                               .config_from_json = vision_config,
                                               .config_from_gguf = vision_config_from_gguf,
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
