// The GPT-NeoX adapter (model_type "gpt_neox": Pythia and the models interpretability studies most): pre-LayerNorm
// decoder blocks whose attention and MLP read the same hidden states (use_parallel_residual, else one after the other
// as in GPT-2), one fused query_key_value projection laid out head by head (a query, a key and a value of d rows
// each), rotary positions on the first rotary_pct of each head's coordinates, a GELU MLP.

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
  // transformers names the base rotary_emb_base, newer releases rope_theta; the fraction rotary_pct, newer releases
  // partial_rotary_factor. Two keys that disagree are refused rather than one of them believed.
  const auto one_of = [&](const char* first, const char* second, double fallback) {
    const double a = value_or<double>(config, first, NAN, file), b = value_or<double>(config, second, NAN, file);
    if (!std::isnan(a) && !std::isnan(b) && a != b) {
      throw InputError(
          fmt::format("{}: \"{}\" is {:g} and \"{}\" is {:g}: they must agree", file.string(), first, a, second, b));
    }
    return !std::isnan(a) ? a : !std::isnan(b) ? b : fallback;
  };
  c.rope_theta =
      checked_number(one_of("rotary_emb_base", "rope_theta", 10000), 0, true, file.string(), "rotary_emb_base");
  const double fraction =
      checked_number(one_of("rotary_pct", "partial_rotary_factor", 0.25), 0, false, file.string(), "rotary_pct");
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

std::string token_embeddings(const ModelConfig& c) { return c.tensor_prefix + "embed_in.weight"; }

Matrix embed_tokens(const Checkpoint& checkpoint, const ModelConfig& c, std::span<const std::int64_t> ids) {
  return checkpoint.rows(token_embeddings(c), ids, c.hidden);
}

// The fused projection's rows, head by head a query, a key and a value, as the maps of rows of AttentionWeights.
AttentionWeights split_fused(const Matrix& fused, const Vector& bias, std::int64_t heads, std::int64_t d) {
  const std::int64_t D = fused.cols();
  AttentionWeights w{Matrix(D, heads * d), Matrix(D, heads * d), Matrix(D, heads * d),
                     Vector(heads * d),    Vector(heads * d),    Vector(heads * d)};
  for (std::int64_t h = 0; h < heads; ++h) {
    for (auto [part, weight, b] :
         {std::tuple{0, &w.W_Q, &w.b_Q}, std::tuple{1, &w.W_K, &w.b_K}, std::tuple{2, &w.W_V, &w.b_V}}) {
      weight->middleCols(h * d, d) = fused.middleRows((3 * h + part) * d, d).transpose();
      b->segment(h * d, d) = bias.segment((3 * h + part) * d, d);
    }
  }
  return w;
}

void forward(const Checkpoint& checkpoint, const ModelConfig& c, Matrix h, std::int64_t last, const LayerSink& sink) {
  const std::int64_t D = c.hidden, H = c.heads, d = c.head_dim(), I = c.intermediate;
  if (h.rows() > c.max_positions) {
    throw InputError(fmt::format("the input has {} positions, more than the model's {}", h.rows(), c.max_positions));
  }
  const auto tensor = [&](const std::string& suffix) { return c.tensor_prefix + suffix; };
  const auto norm = [&](const Matrix& x, const std::string& name) {
    return layer_norm(x, checkpoint.vector(tensor(name + ".weight"), D), checkpoint.vector(tensor(name + ".bias"), D),
                      c.layer_norm_eps);
  };
  const double inner = 1 / std::sqrt(static_cast<double>(d));
  const theory::AttentionMap map = trained_attention_map(c.attention_activation, inner);
  for (std::int64_t l = 0; l <= last; ++l) {
    const std::string p = fmt::format("layers.{}.", l);
    LayerInputs layer;
    layer.causal = c.causal;
    layer.inner = inner;
    if (c.rotary_dims > 0) layer.rotary = theory::Rotary::partial_half_split(d, c.rotary_dims, c.rope_theta);
    layer.X = norm(h, p + "input_layernorm");
    const std::string fused = tensor(p + "attention.query_key_value");
    const Vector bias =
        checkpoint.contains(fused + ".bias") ? checkpoint.vector(fused + ".bias", 3 * D) : Vector::Zero(3 * D).eval();
    const AttentionWeights weights = split_fused(checkpoint.matrix(fused + ".weight", 3 * D, D), bias, H, d);
    const Matrix attended =
        project(checkpoint, fill_heads(layer, weights, H, &map, l, sink), tensor(p + "attention.dense"), D, sink);
    const auto mlp = [&](const Matrix& x) {
      Matrix inter = project(checkpoint, x, tensor(p + "mlp.dense_h_to_4h"), I, sink);
      apply_hidden_activation(inter, c.hidden_act, sink.float32_products);
      return project(checkpoint, inter, tensor(p + "mlp.dense_4h_to_h"), D, sink);
    };
    if (c.parallel_residual) {
      h += attended + mlp(norm(h, p + "post_attention_layernorm"));
    } else {
      h += attended;
      h += mlp(norm(h, p + "post_attention_layernorm"));
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
                                           .config_from_json = config_from_json,
                                           .embedding_scale_tensor = token_embeddings,
                                           .embed_tokens = embed_tokens,
                                           .forward = forward,
                                           .describe = describe,
                                           .rotates_keys = true};

}  // namespace attncheck::probes::detail
