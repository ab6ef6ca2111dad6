// The Llama adapter: pre-RMSNorm decoder blocks, rotary positions, grouped-query attention, SwiGLU MLP, from
// GGUF files (llama.cpp's names and metadata) or Hugging Face safetensors checkpoints (config.json).

#include "llama_like.hpp"

#include <algorithm>
#include <cmath>
#include <optional>

#include <fmt/ranges.h>

namespace attncheck::probes::detail {

namespace fs = std::filesystem;

namespace {

void check_shape(const ModelConfig& c, const std::string& source) {
  if (c.heads % c.key_value_heads() != 0) {
    throw InputError(
        fmt::format("{}: {} query heads cannot share {} key/value heads evenly", source, c.heads, c.key_value_heads()));
  }
  if (c.head_dim() <= 0 || c.head_dim() % 2 != 0) {
    throw InputError(
        fmt::format("{}: head dimension {} is not a positive even number (rotary pairs)", source, c.head_dim()));
  }
  if (!(c.rope_theta > 0) || !std::isfinite(c.rope_theta)) {
    throw InputError(fmt::format("{}: rotary base {} is not a positive number", source, c.rope_theta));
  }
  if (!(c.layer_norm_eps >= 0) || !std::isfinite(c.layer_norm_eps)) {
    throw InputError(fmt::format("{}: RMSNorm epsilon {} is not a non-negative number", source, c.layer_norm_eps));
  }
}

// Tensor names of one layer's parts, in the checkpoint's own naming.
struct Names {
  std::string attention_norm, q, k, v, o, mlp_norm, gate, up, down;
  std::string qkv, gate_up;  // Phi-3's fused projections
  // The head norms and Gemma 2's sandwich norms (used when the family has them).
  std::string q_norm, k_norm, attention_out_norm, mlp_out_norm;
};

Names layer_names(const ModelConfig& c, std::int64_t layer) {
  if (c.gguf) {
    const std::string p = fmt::format("blk.{}.", layer);
    return {p + "attn_norm",    p + "attn_q",
            p + "attn_k",       p + "attn_v",
            p + "attn_output",  p + "ffn_norm",
            p + "ffn_gate",     p + "ffn_up",
            p + "ffn_down",     p + "attn_qkv",
            p + "ffn_up",       p + "attn_q_norm",
            p + "attn_k_norm",  p + "post_attention_norm",
            p + "post_ffw_norm"};
  }
  const std::string p = fmt::format("{}layers.{}.", c.tensor_prefix, layer);
  return {p + "input_layernorm",
          p + "self_attn.q_proj",
          p + "self_attn.k_proj",
          p + "self_attn.v_proj",
          p + "self_attn.o_proj",
          p + "post_attention_layernorm",
          p + "mlp.gate_proj",
          p + "mlp.up_proj",
          p + "mlp.down_proj",
          p + "self_attn.qkv_proj",
          p + "mlp.gate_up_proj",
          p + "self_attn.q_norm",
          p + "self_attn.k_norm",
          p + "post_attention_layernorm",
          p + "post_feedforward_layernorm"};
}

// Gemma 2 and 3 name the MLP's input norm apart: their post_attention_layernorm normalizes the attention's output.
// llama.cpp's converter writes pre_feedforward_layernorm as ffn_norm, the name GGUF files give every MLP's input norm.
Names sandwich_names(Names names, const ModelConfig& c, std::int64_t layer) {
  if (c.gguf) return names;
  names.mlp_norm = fmt::format("{}layers.{}.pre_feedforward_layernorm", c.tensor_prefix, layer);
  return names;
}

const DecoderTraits llama_traits{.family = "Llama", .gguf_interleaved_rope = true};

// The sizes as config.json names them (GGUF: under `gguf_prefix`, llama.cpp's names), checked against the
// embeddings and layer 0's projections: the query heads against the query projection's rows, and so on.
void require_decoder_sizes(const ModelConfig& c, const Checkpoint& checkpoint, const std::string& source,
                           const std::optional<std::string>& gguf_prefix, const Names& layer0, bool fused) {
  const auto key = [&](const char* json, const char* gguf) {
    return gguf_prefix ? *gguf_prefix + gguf : std::string(json);
  };
  const std::string embeddings = llama_like_embeddings(c), heads = key("num_attention_heads", "attention.head_count");
  const std::string kv_heads = key("num_key_value_heads", "attention.head_count_kv");
  const std::string head_dim = key("head_dim", "attention.key_length");
  const std::int64_t d = c.head_dim();
  const std::string intermediate = key("intermediate_size", "feed_forward_length");
  std::vector<DeclaredExtent> extents{{declared_value(key("hidden_size", "embedding_length"), c.hidden), c.hidden,
                                       embeddings, 1},
                                      {declared_value(key("vocab_size", "vocab_size"), c.vocab), c.vocab, embeddings, 0,
                                       false}};
  if (fused) {
    extents.push_back({fmt::format("(\"{}\" {} + 2 x \"{}\" {}) x \"{}\" {}", heads, c.heads, kv_heads,
                                   c.key_value_heads(), head_dim, d),
                       (c.heads + 2 * c.key_value_heads()) * d, layer0.qkv + ".weight", 0});
    extents.push_back({fmt::format("2 x \"{}\" {}", intermediate, c.intermediate), 2 * c.intermediate,
                       layer0.gate_up + ".weight", 0});
  } else {
    extents.push_back(
        {fmt::format("\"{}\" {} x \"{}\" {}", heads, c.heads, head_dim, d), c.heads * d, layer0.q + ".weight", 0});
    extents.push_back({fmt::format("\"{}\" {} x \"{}\" {}", kv_heads, c.key_value_heads(), head_dim, d),
                       c.key_value_heads() * d, layer0.k + ".weight", 0});
    extents.push_back({declared_value(intermediate, c.intermediate), c.intermediate, layer0.up + ".weight", 0});
  }
  require_declared_sizes(checkpoint, source, key("num_hidden_layers", "block_count"), c.layers,
                         c.gguf ? "blk." : c.tensor_prefix + "layers.", extents);
}

// Phi-3's qkv_proj (rows: the queries, then the keys, then the values; no biases) as the maps of rows of
// AttentionWeights.
AttentionWeights fused_attention_weights(const Checkpoint& checkpoint, const std::string& name, std::int64_t hidden,
                                         std::int64_t query_width, std::int64_t key_value_width) {
  const Matrix fused = checkpoint.matrix(name + ".weight", query_width + 2 * key_value_width, hidden);
  return {fused.topRows(query_width).transpose(),
          fused.middleRows(query_width, key_value_width).transpose(),
          fused.bottomRows(key_value_width).transpose(),
          Vector::Zero(query_width),
          Vector::Zero(key_value_width),
          Vector()};
}

// Positions i attend to keys j with i - window < j <= i (transformers' sliding-window causal mask).
theory::AttendedMask sliding_window_mask(std::int64_t n, std::int64_t window) {
  theory::AttendedMask mask = theory::AttendedMask::Constant(n, n, false);
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t first = std::max<std::int64_t>(0, i - window + 1);
    mask.row(i).segment(first, i - first + 1) = true;
  }
  return mask;
}

}  // namespace

ModelConfig llama_like_config(const nlohmann::json& config, const fs::path& file, const Checkpoint& checkpoint,
                              const DecoderTraits& traits) {
  ModelConfig c;
  c.causal = true;
  read_text_model_sizes(config, file, c);
  c.kv_heads = positive_int_or(config, "num_key_value_heads", c.heads, file);
  c.head_size = positive_int_or(config, "head_dim", c.hidden / c.heads, file);
  c.layer_norm_eps =
      checked_number(value_or<double>(config, "rms_norm_eps", 1e-6, file), 0, false, file.string(), "rms_norm_eps");
  c.hidden_act = value_or<std::string>(config, traits.activation_key, std::string(traits.default_activation), file);
  if (std::find(traits.activations.begin(), traits.activations.end(), c.hidden_act) == traits.activations.end()) {
    throw InputError(fmt::format("{}: {} '{}' is not supported for {} ({})", file.string(), traits.activation_key,
                                 c.hidden_act, traits.family, fmt::join(traits.activations, ", ")));
  }
  if (value_or<bool>(config, "mlp_bias", false, file)) {
    throw InputError(fmt::format("{}: mlp_bias is not supported", file.string()));
  }
  // Older configs give rope_theta and rope_scaling; newer ones one rope_parameters object.
  if (config.contains("rope_scaling") && !config["rope_scaling"].is_null()) {
    throw InputError(fmt::format("{}: rope_scaling {} is not supported", file.string(),
                                 records::json_excerpt(config["rope_scaling"])));
  }
  c.rope_theta = rope_setting(config, file, {"rope_theta", "rope_parameters.rope_theta"}, 10000.0);
  checked_number(c.rope_theta, 0, true, file.string(), "rope_theta");
  // The decoders read here turn every coordinate: a partial rotary (transformers 5 writes it in rope_parameters)
  // would be measured as a full one.
  const double rotated =
      rope_setting(config, file, {"partial_rotary_factor", "rope_parameters.partial_rotary_factor"}, 1.0);
  if (rotated != 1.0) {
    throw InputError(fmt::format("{}: \"partial_rotary_factor\" is {:g}: a partial rotary is not supported for {}",
                                 file.string(), rotated, traits.family));
  }
  for (const char* prefix : traits.tensor_prefixes) {
    if (checkpoint.contains(std::string(prefix) + "embed_tokens.weight")) c.tensor_prefix = prefix;
  }
  check_shape(c, file.string());
  require_decoder_sizes(c, checkpoint, file.string(), std::nullopt, layer_names(c, 0), traits.fused_projections);
  return c;
}

ModelConfig llama_like_config_from_gguf(const GgufHeader& header, const Checkpoint& checkpoint,
                                        const DecoderTraits& traits, bool linear_rope_scaling) {
  const GgufMetadata meta(header);
  ModelConfig c;
  c.causal = true;
  c.gguf = true;
  c.rope_interleaved = traits.gguf_interleaved_rope;
  c.hidden_act = std::string(traits.default_activation);
  c.layers = meta.size("block_count");
  c.hidden = meta.size("embedding_length");
  c.intermediate = meta.size("feed_forward_length");
  c.heads = meta.size("attention.head_count");
  c.kv_heads = meta.size_or("attention.head_count_kv", c.heads);
  c.max_positions = meta.size("context_length");
  c.head_size = meta.size_or("attention.key_length", c.hidden / c.heads);
  if (meta.size_or("attention.value_length", c.head_size) != c.head_size) {
    throw InputError(fmt::format("{}: key and value heads of different lengths are not supported", header.source));
  }
  if (meta.size_or("rope.dimension_count", c.head_size) != c.head_size) {
    throw InputError(fmt::format("{}: rotary embeddings on {} of the {} head dimensions are not supported (all)",
                                 header.source, meta.size("rope.dimension_count"), c.head_size));
  }
  const std::string scaling = meta.prefix + "rope.scaling.type";
  if (header.find(scaling) && header.string(scaling) != "none") {
    if (!linear_rope_scaling || header.string(scaling) != "linear") {
      throw InputError(fmt::format("{}: rope scaling '{}' is not supported", header.source, header.string(scaling)));
    }
    c.rope_linear_factor = meta.number_or("rope.scaling.factor", 1, 0, true);
  }
  if (meta.has("expert_count") && header.unsigned_integer(meta.prefix + "expert_count") > 0) {
    throw InputError(fmt::format("{}: mixtures of experts are not supported", header.source));
  }
  // llama.cpp's default when a converter leaves the base out, as Gemma's and Gemma 2's do.
  c.rope_theta = meta.number_or("rope.freq_base", 10000.0, 0, true);
  const std::string epsilon = meta.prefix + "attention.layer_norm_rms_epsilon";
  c.layer_norm_eps = checked_number(header.number(epsilon), 0, false, header.source, epsilon);
  const auto& embedding = checkpoint.info("token_embd.weight");
  c.vocab = meta.size_or("vocab_size", embedding.shape.empty() ? 0 : embedding.shape.front());
  check_shape(c, header.source);
  require_decoder_sizes(c, checkpoint, header.source, meta.prefix, layer_names(c, 0), traits.fused_projections);
  return c;
}

std::string llama_like_embeddings(const ModelConfig& c) {
  return c.gguf ? "token_embd.weight" : c.tensor_prefix + "embed_tokens.weight";
}

Matrix llama_like_embed_tokens(const Checkpoint& checkpoint, const ModelConfig& c, std::span<const std::int64_t> ids) {
  return checkpoint.rows(llama_like_embeddings(c), ids, c.hidden);
}

void llama_like_forward(const Checkpoint& checkpoint, const ModelConfig& c, Matrix h, std::int64_t last,
                        const LayerSink& sink, const DecoderTraits& traits) {
  const std::int64_t D = c.hidden, H = c.heads, G = c.key_value_heads(), d = c.head_dim(), I = c.intermediate;
  const std::int64_t n = h.rows();
  if (n > c.max_positions) {
    throw InputError(fmt::format("the input has {} positions, more than the model's {}", n, c.max_positions));
  }
  const auto rotary_of = [&](double base) {
    return c.rope_interleaved ? theory::Rotary::interleaved(d, base) : theory::Rotary::half_split(d, base);
  };
  theory::Rotary rotary = rotary_of(c.rope_theta);
  for (double& frequency : rotary.frequency) frequency /= c.rope_linear_factor;
  const theory::Rotary local_rotary = rotary_of(c.rope_local_theta > 0 ? c.rope_local_theta : c.rope_theta);
  const double inner = 1 / std::sqrt(c.query_pre_attn_scalar > 0 ? c.query_pre_attn_scalar : static_cast<double>(d));
  const theory::AttentionMap map = trained_attention_map(c.attention_activation, inner);
  // A window that covers every earlier position masks nothing beyond causality.
  std::optional<theory::AttendedMask> window;
  if (c.sliding_window > 0 && c.sliding_window < n) window = sliding_window_mask(n, c.sliding_window);
  const auto sliding = [&](std::int64_t l) {
    return c.sliding_window > 0 && (c.sliding_layers.empty() || c.sliding_layers[static_cast<std::size_t>(l)]);
  };
  if (traits.gemma_scaling) h *= std::sqrt(static_cast<double>(D));
  const auto gain_of = [&](const std::string& name, std::int64_t length) {
    Vector gain = checkpoint.vector(name + ".weight", length);
    // llama.cpp's converter adds the 1 when it writes Gemma's gains.
    if (traits.gemma_scaling && !c.gguf) gain.array() += 1;
    return gain;
  };
  const auto norm = [&](const Matrix& x, const std::string& name) {
    return rms_norm(x, gain_of(name, D), c.layer_norm_eps);
  };
  for (std::int64_t l = 0; l <= last; ++l) {
    const Names names = traits.sandwich_norms ? sandwich_names(layer_names(c, l), c, l) : layer_names(c, l);
    LayerInputs layer;
    layer.causal = c.causal;
    if (sliding(l)) layer.attended = window;
    layer.inner = inner;
    layer.rotary = sliding(l) && c.rope_local_theta > 0 ? local_rotary : rotary;
    layer.logit_softcap = c.logit_softcap;
    if (traits.head_norms) {
      layer.query_norm = HeadNorm{gain_of(names.q_norm, d), c.layer_norm_eps};
      layer.key_norm = HeadNorm{gain_of(names.k_norm, d), c.layer_norm_eps};
    }
    layer.X = norm(h, names.attention_norm);
    const AttentionWeights weights =
        traits.fused_projections ? fused_attention_weights(checkpoint, names.qkv, D, H * d, G * d)
                                 : linear_attention_weights(checkpoint, names.q, names.k, names.v, D, H * d, G * d);
    Matrix attended = project(checkpoint, fill_heads(layer, weights, H, &map, l, sink), names.o, D, sink);
    if (traits.sandwich_norms) attended = norm(attended, names.attention_out_norm);
    h += attended;
    const Matrix m = norm(h, names.mlp_norm);
    Matrix gate, up;
    if (traits.fused_projections) {
      const Matrix gate_up = project(checkpoint, m, names.gate_up, 2 * I, sink);
      gate = gate_up.leftCols(I), up = gate_up.rightCols(I);
    } else {
      gate = project(checkpoint, m, names.gate, I, sink), up = project(checkpoint, m, names.up, I, sink);
    }
    apply_hidden_activation(gate, c.hidden_act, sink.float32_products);
    Matrix mlp = project(checkpoint, gate.cwiseProduct(up), names.down, D, sink);
    if (traits.sandwich_norms) mlp = norm(mlp, names.mlp_out_norm);
    h += mlp;
    require_finite_hidden_states(h, l);
    sink.receive(layer, l);
  }
}

std::string llama_like_describe(const ModelConfig& c) {
  std::string lines = fmt::format(
      "rotary positions (base {:g}, pairs {}); {} query heads share {} key/value heads: |dA/dWk| is one "
      "head's, the JSON's dWk_group_fro its group's\n",
      c.rope_theta, c.rope_interleaved ? "(2p, 2p+1)" : "(p, p+d/2)", c.heads, c.key_value_heads());
  if (c.sliding_window > 0) {
    lines +=
        fmt::format("sliding window: each position attends to itself and the {} before it\n", c.sliding_window - 1);
  }
  return lines;
}

std::vector<bool> all_but_every(std::int64_t layers, std::int64_t global_every) {
  std::vector<bool> sliding(static_cast<std::size_t>(layers));
  for (std::int64_t l = 0; l < layers; ++l) sliding[static_cast<std::size_t>(l)] = (l + 1) % global_every != 0;
  return sliding;
}

std::vector<bool> sliding_layers_from_json(const nlohmann::json& config, const fs::path& file, std::int64_t layers,
                                           std::int64_t global_every) {
  if (!config.contains("layer_types") || config["layer_types"].is_null()) return all_but_every(layers, global_every);
  std::vector<bool> sliding(static_cast<std::size_t>(layers));
  const auto& types = config["layer_types"];
  if (!types.is_array() || static_cast<std::int64_t>(types.size()) != layers) {
    throw InputError(fmt::format("{}: \"layer_types\" is {}, not a list of the {} layers' attention types",
                                 file.string(), records::json_excerpt(types), layers));
  }
  for (std::int64_t l = 0; l < layers; ++l) {
    const auto& type = types[static_cast<std::size_t>(l)];
    if (type == "sliding_attention") {
      sliding[static_cast<std::size_t>(l)] = true;
    } else if (type != "full_attention") {
      throw InputError(fmt::format("{}: \"layer_types\"[{}] is {}, not \"sliding_attention\" or \"full_attention\"",
                                   file.string(), l, records::json_excerpt(type)));
    }
  }
  return sliding;
}

void read_gemma_attention(const nlohmann::json& config, const fs::path& file, ModelConfig& c,
                          const GemmaAttentionDefaults& defaults) {
  c.query_pre_attn_scalar =
      checked_number(value_or<double>(config, "query_pre_attn_scalar", defaults.query_pre_attn_scalar, file), 0, true,
                     file.string(), "query_pre_attn_scalar");
  c.logit_softcap = checked_number(value_or<double>(config, "attn_logit_softcapping", defaults.logit_softcap, file), 0,
                                   false, file.string(), "attn_logit_softcapping");
  c.sliding_window = positive_int_or(config, "sliding_window", defaults.sliding_window, file);
  c.sliding_layers = sliding_layers_from_json(config, file, c.layers, defaults.global_every);
  if (c.logit_softcap > 0 && value_or<std::string>(config, "attention_activation", "softmax", file) != "softmax") {
    throw InputError(
        fmt::format("{}: attn_logit_softcapping caps a softmax's logits: attention_activation must be "
                    "softmax",
                    file.string()));
  }
}

void read_gemma_gguf_attention(const GgufMetadata& meta, ModelConfig& c, const GemmaGgufAttention& gemma) {
  // llama.cpp reads no query_pre_attn_scalar: it takes the one Gemma's reference code sets, hidden / heads for the
  // 27B models (told apart by their layer count), head_dim for the others.
  c.query_pre_attn_scalar = static_cast<double>(c.layers == gemma.layers_27b ? c.hidden / c.heads : c.head_dim());
  if (gemma.logit_softcap > 0)
    c.logit_softcap = meta.number_or("attn_logit_softcapping", gemma.logit_softcap, 0, false);
  c.sliding_window = meta.size_or("attention.sliding_window", gemma.sliding_window);
  c.sliding_layers = c.sliding_window > 0 ? all_but_every(c.layers, gemma.global_every)
                                          : std::vector<bool>(static_cast<std::size_t>(c.layers), false);
}

std::string gemma_attention_describe(const ModelConfig& c) {
  std::string global;
  for (std::size_t l = 0; l < c.sliding_layers.size(); ++l) {
    if (!c.sliding_layers[l]) global += fmt::format("{}{}", global.empty() ? "" : ", ", l);
  }
  std::string lines =
      fmt::format("scores scaled by query_pre_attn_scalar^-1/2 = {:g}; the window on every layer but {}\n",
                  1 / std::sqrt(c.query_pre_attn_scalar), global.empty() ? "none" : global);
  if (c.logit_softcap > 0) {
    lines += fmt::format(
        "softmax logits soft-capped, {:g} tanh(S/{:g}): |dA/dW_Q|, |dA/dW_K| through the cap, |grad softmax| in "
        "the capped logits, the other activations on S uncapped\n",
        c.logit_softcap, c.logit_softcap);
  }
  return lines + "embeddings times sqrt(" + std::to_string(c.hidden) +
         "); RMSNorm gains 1 + weight, also after the attention and the MLP; GeGLU MLP (" + c.hidden_act + ")\n";
}

extern const FamilyAdapter llama_adapter{.name = "Llama",
                                         .model_types = {"llama"},
                                         .gguf_architectures = {"llama"},
                                         .config_from_json = llama_like_config_for<llama_traits>,
                                         .config_from_gguf = llama_like_gguf_config_for<llama_traits>,
                                         .embedding_scale_tensor = llama_like_embeddings,
                                         .embed_tokens = llama_like_embed_tokens,
                                         .forward = llama_like_forward_for<llama_traits>,
                                         .describe = llama_like_describe,
                                         .rotates_keys = true};

}  // namespace attncheck::probes::detail
