// The GPT-NeoX adapter (model_type "gpt_neox": Pythia and the models interpretability studies most): pre-LayerNorm
// decoder blocks whose attention and MLP read the same hidden states (use_parallel_residual, else one after the other
// as in GPT-2), one fused query_key_value projection laid out head by head (a query, a key and a value of d rows
// each), rotary positions on the first rotary_pct of each head's coordinates, a GELU MLP. From safetensors, or GGUF
// files of architecture "gptneox" as llama.cpp's converter writes them: its attn_qkv holds every head's query, then
// every key, then every value (the converter regroups the rows), the rotated count as rope.dimension_count.

#include "adapters.hpp"

#include <cmath>

namespace attncheck::probes::detail {

namespace fs = std::filesystem;

namespace {

ModelConfig config_from_json(const nlohmann::json& config, const fs::path& file, const Checkpoint& checkpoint) {
  ModelConfig c;
  c.causal = true;
  read_text_model_sizes(config, file, c);
  c.layer_norm_eps =
      checked_number(value_or<double>(config, "layer_norm_eps", 1e-5, file), 0, false, file.string(), "layer_norm_eps");
  c.hidden_act = value_or<std::string>(config, "hidden_act", "gelu", file);
  c.parallel_residual = value_or<bool>(config, "use_parallel_residual", true, file);
  if (config.contains("rope_scaling") && !config["rope_scaling"].is_null()) {
    throw InputError(fmt::format("{}: \"rope_scaling\" is {}: GPT-NeoX's scaled rotary positions are not supported",
                                 file.string(), records::json_excerpt(config["rope_scaling"])));
  }
  // transformers names the base rotary_emb_base, newer releases rope_theta, transformers 5 rope_parameters.rope_theta;
  // the fraction rotary_pct, then partial_rotary_factor.
  c.rope_theta =
      checked_number(rope_setting(config, file, {"rotary_emb_base", "rope_theta", "rope_parameters.rope_theta"}, 10000),
                     0, true, file.string(), "rotary_emb_base");
  const double fraction =
      checked_number(rope_setting(config, file,
                                  {"rotary_pct", "partial_rotary_factor", "rope_parameters.partial_rotary_factor"},
                                  0.25),
                     0, false, file.string(), "rotary_pct");
  if (fraction > 1) throw InputError(fmt::format("{}: \"rotary_pct\" is {:g}, above 1", file.string(), fraction));
  if (c.hidden % c.heads == 0) {
    // transformers: int(head_size * rotary_pct), the first coordinates of each head.
    c.rotary_dims = static_cast<std::int64_t>(static_cast<double>(c.head_dim()) * fraction);
    if (c.rotary_dims % 2 != 0) {
      throw InputError(fmt::format("{}: \"rotary_pct\" {:g} of heads of {} rotates {} coordinates, not an even number",
                                   file.string(), fraction, c.head_dim(), c.rotary_dims));
    }
  }
  for (const char* prefix : {"", "gpt_neox."}) {
    if (checkpoint.contains(std::string(prefix) + "embed_in.weight")) c.tensor_prefix = prefix;
  }
  require_declared_sizes(checkpoint, file.string(), "num_hidden_layers", c.layers, c.tensor_prefix + "layers.",
                         {{declared_value("hidden_size", c.hidden), c.hidden, c.tensor_prefix + "embed_in.weight", 1},
                          {declared_value("vocab_size", c.vocab), c.vocab, c.tensor_prefix + "embed_in.weight", 0,
                           false},
                          {declared_value("intermediate_size", c.intermediate), c.intermediate,
                           c.tensor_prefix + "layers.0.mlp.dense_h_to_4h.weight", 0},
                          {declared_value("hidden_size", c.hidden) + ", 3 x hidden_size", 3 * c.hidden,
                           c.tensor_prefix + "layers.0.attention.query_key_value.weight", 0}});
  return c;
}

// Tensor names of one layer's parts: the checkpoint's own, or llama.cpp's.
struct Names {
  std::string attention_norm, qkv, output, mlp_norm, up, down;
};

Names layer_names(const ModelConfig& c, std::int64_t layer) {
  if (c.gguf) {
    const std::string p = fmt::format("blk.{}.", layer);
    return {p + "attn_norm", p + "attn_qkv", p + "attn_output", p + "ffn_norm", p + "ffn_up", p + "ffn_down"};
  }
  const std::string p = fmt::format("{}layers.{}.", c.tensor_prefix, layer);
  return {p + "input_layernorm",          p + "attention.query_key_value", p + "attention.dense",
          p + "post_attention_layernorm", p + "mlp.dense_h_to_4h",         p + "mlp.dense_4h_to_h"};
}

std::string token_embeddings(const ModelConfig& c) {
  return c.gguf ? "token_embd.weight" : c.tensor_prefix + "embed_in.weight";
}

ModelConfig config_from_gguf(const GgufHeader& header, const Checkpoint& checkpoint) {
  const GgufMetadata meta(header);
  ModelConfig c;
  c.causal = true;
  c.gguf = true;
  c.hidden_act = "gelu";
  c.layers = meta.size("block_count");
  c.hidden = meta.size("embedding_length");
  c.intermediate = meta.size("feed_forward_length");
  c.heads = meta.size("attention.head_count");
  c.max_positions = meta.size("context_length");
  if (c.hidden % c.heads != 0) {
    throw InputError(fmt::format("{}: {} heads do not divide embedding_length {}", header.source, c.heads, c.hidden));
  }
  c.rotary_dims = meta.size_or("rope.dimension_count", c.head_dim());
  if (c.rotary_dims > c.head_dim() || c.rotary_dims % 2 != 0) {
    throw InputError(fmt::format("{}: rope.dimension_count {} is not an even number up to the heads' {}", header.source,
                                 c.rotary_dims, c.head_dim()));
  }
  const std::string parallel = meta.prefix + "use_parallel_residual";
  c.parallel_residual = header.find(parallel) ? header.boolean(parallel) : true;
  // llama.cpp's default when the converter leaves the base out, as its GPT-NeoX converter does.
  c.rope_theta = meta.number_or("rope.freq_base", 10000.0, 0, true);
  const std::string epsilon = meta.prefix + "attention.layer_norm_epsilon";
  c.layer_norm_eps = checked_number(header.number(epsilon), 0, false, header.source, epsilon);
  const auto& embedding = checkpoint.info("token_embd.weight");
  c.vocab = meta.size_or("vocab_size", embedding.shape.empty() ? 0 : embedding.shape.front());
  const Names layer0 = layer_names(c, 0);
  require_declared_sizes(
      checkpoint, header.source, meta.prefix + "block_count", c.layers, "blk.",
      {{declared_value(meta.prefix + "embedding_length", c.hidden), c.hidden, "token_embd.weight", 1},
       {declared_value(meta.prefix + "feed_forward_length", c.intermediate), c.intermediate, layer0.up + ".weight", 0},
       {declared_value(meta.prefix + "embedding_length", c.hidden) + ", 3 x embedding_length", 3 * c.hidden,
        layer0.qkv + ".weight", 0}});
  return c;
}

Matrix embed_tokens(const Checkpoint& checkpoint, const ModelConfig& c, std::span<const std::int64_t> ids) {
  return checkpoint.rows(token_embeddings(c), ids, c.hidden);
}

// The fused projection's rows as the maps of rows of AttentionWeights: head by head a query, a key and a value
// (Hugging Face's), or every query, then every key, then every value (`grouped`, llama.cpp's).
AttentionWeights split_fused(const Matrix& fused, const Vector& bias, std::int64_t heads, std::int64_t d,
                             bool grouped) {
  const std::int64_t D = fused.cols();
  AttentionWeights w{Matrix(D, heads * d), Matrix(D, heads * d), Matrix(D, heads * d),
                     Vector(heads * d),    Vector(heads * d),    Vector(heads * d)};
  for (std::int64_t h = 0; h < heads; ++h) {
    for (auto [part, weight, b] :
         {std::tuple{0, &w.W_Q, &w.b_Q}, std::tuple{1, &w.W_K, &w.b_K}, std::tuple{2, &w.W_V, &w.b_V}}) {
      const std::int64_t first = grouped ? (part * heads + h) * d : (3 * h + part) * d;
      weight->middleCols(h * d, d) = fused.middleRows(first, d).transpose();
      b->segment(h * d, d) = bias.segment(first, d);
    }
  }
  return w;
}

void forward(const Checkpoint& checkpoint, const ModelConfig& c, Matrix h, std::int64_t last, const LayerSink& sink) {
  const std::int64_t D = c.hidden, H = c.heads, d = c.head_dim(), I = c.intermediate;
  if (h.rows() > c.max_positions) {
    throw InputError(fmt::format("the input has {} positions, more than the model's {}", h.rows(), c.max_positions));
  }
  const auto norm = [&](const Matrix& x, const std::string& name) {
    return layer_norm(x, checkpoint.vector(name + ".weight", D), checkpoint.vector(name + ".bias", D),
                      c.layer_norm_eps);
  };
  const double inner = 1 / std::sqrt(static_cast<double>(d));
  const theory::AttentionMap map = trained_attention_map(c.attention_activation, inner);
  for (std::int64_t l = 0; l <= last; ++l) {
    const Names names = layer_names(c, l);
    LayerInputs layer;
    layer.causal = c.causal;
    layer.inner = inner;
    if (c.rotary_dims > 0) layer.rotary = theory::Rotary::partial_half_split(d, c.rotary_dims, c.rope_theta);
    layer.X = norm(h, names.attention_norm);
    const Vector bias = checkpoint.contains(names.qkv + ".bias") ? checkpoint.vector(names.qkv + ".bias", 3 * D)
                                                                 : Vector::Zero(3 * D).eval();
    const AttentionWeights weights =
        split_fused(checkpoint.matrix(names.qkv + ".weight", 3 * D, D), bias, H, d, c.gguf);
    const Matrix attended = project(checkpoint, fill_heads(layer, weights, H, &map, l, sink), names.output, D, sink);
    const auto mlp = [&](const Matrix& x) {
      Matrix inter = project(checkpoint, x, names.up, I, sink);
      apply_hidden_activation(inter, c.hidden_act, sink.float32_products);
      return project(checkpoint, inter, names.down, D, sink);
    };
    if (c.parallel_residual) {
      h += attended + mlp(norm(h, names.mlp_norm));
    } else {
      h += attended;
      h += mlp(norm(h, names.mlp_norm));
    }
    require_finite_hidden_states(h, l);
    sink.receive(layer, l);
  }
}

std::string describe(const ModelConfig& c) {
  return fmt::format(
      "rotary positions on the first {} of each head's {} coordinates (base {:g}, pairs (p, p+{})); "
      "{} residual\n",
      c.rotary_dims, c.head_dim(), c.rope_theta, c.rotary_dims / 2,
      c.parallel_residual ? "parallel (attention and MLP read the same states)" : "sequential");
}

}  // namespace

extern const FamilyAdapter gptneox_adapter{.name = "GPT-NeoX",
                                           .model_types = {"gpt_neox"},
                                           .gguf_architectures = {"gptneox"},
                                           .config_from_json = config_from_json,
                                           .config_from_gguf = config_from_gguf,
                                           .embedding_scale_tensor = token_embeddings,
                                           .embed_tokens = embed_tokens,
                                           .forward = forward,
                                           .describe = describe,
                                           .rotates_keys = true};

}  // namespace attncheck::probes::detail
