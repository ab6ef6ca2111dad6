// The GPT-2 adapter (model_type "gpt2"): token and position embeddings, then pre-LayerNorm decoder blocks with
// causal attention and one fused query/key/value projection, c_attn (Conv1D: weights stored [in, out]).

#include "adapters.hpp"

#include <cmath>

namespace attncheck::probes::detail {

namespace fs = std::filesystem;

namespace {

ModelConfig config_from_json(const nlohmann::json& config, const fs::path& file, const Checkpoint& checkpoint) {
  ModelConfig c;
  c.causal = true;
  c.hidden = positive_int(config, "n_embd", file);
  c.heads = positive_int(config, "n_head", file);
  c.layers = positive_int(config, "n_layer", file);
  c.intermediate = positive_int_or(config, "n_inner", 4 * c.hidden, file);
  c.vocab = positive_int(config, "vocab_size", file);
  c.max_positions = positive_int(config, "n_positions", file);
  c.layer_norm_eps = checked_number(value_or<double>(config, "layer_norm_epsilon", 1e-5, file), 0, false, file.string(),
                                    "layer_norm_epsilon");
  c.hidden_act = value_or<std::string>(config, "activation_function", "gelu_new", file);
  c.scale_attn_weights = value_or<bool>(config, "scale_attn_weights", true, file);
  c.scale_by_inverse_layer_idx = value_or<bool>(config, "scale_attn_by_inverse_layer_idx", false, file);
  for (const char* prefix : {"", "transformer."}) {
    if (checkpoint.contains(std::string(prefix) + "wte.weight")) c.tensor_prefix = prefix;
  }
  const bool inner_given = config.contains("n_inner") && !config["n_inner"].is_null();
  require_declared_sizes(checkpoint, file.string(), "n_layer", c.layers, c.tensor_prefix + "h.",
                         {{declared_value("n_embd", c.hidden), c.hidden, c.tensor_prefix + "wte.weight", 1},
                          {declared_value("vocab_size", c.vocab), c.vocab, c.tensor_prefix + "wte.weight", 0, false},
                          {declared_value("n_positions", c.max_positions), c.max_positions,
                           c.tensor_prefix + "wpe.weight", 0, false},
                          {inner_given ? declared_value("n_inner", c.intermediate)
                                       : fmt::format("\"n_inner\" is absent: 4 x \"n_embd\" = {}", c.intermediate),
                           c.intermediate, c.tensor_prefix + "h.0.mlp.c_fc.weight", 1}});
  return c;
}

std::string token_embeddings(const ModelConfig& c) { return c.tensor_prefix + "wte.weight"; }

Matrix embed_tokens(const Checkpoint& checkpoint, const ModelConfig& c, std::span<const std::int64_t> ids) {
  return token_and_position_embeddings(checkpoint, token_embeddings(c), c.tensor_prefix + "wpe.weight", ids, c.hidden);
}

void forward(const Checkpoint& checkpoint, const ModelConfig& c, Matrix h, std::int64_t last, const LayerSink& sink) {
  const std::int64_t D = c.hidden, I = c.intermediate;
  const auto tensor = [&](const std::string& suffix) { return c.tensor_prefix + suffix; };
  const auto norm = [&](const Matrix& x, const std::string& name) {
    return layer_norm(x, checkpoint.vector(tensor(name + ".weight"), D), checkpoint.vector(tensor(name + ".bias"), D),
                      c.layer_norm_eps);
  };
  // x W + b for Conv1D weights NAME.weight stored [in, out] (maps of rows already), in the forward pass's precision.
  const auto conv1d = [&](const Matrix& x, const std::string& name, std::int64_t in, std::int64_t out) {
    Matrix y = times_weight(checkpoint, x, tensor(name + ".weight"), in, out, false, sink);
    y.rowwise() += checkpoint.vector(tensor(name + ".bias"), out).transpose();
    return y;
  };
  for (std::int64_t l = 0; l <= last; ++l) {
    const std::string p = fmt::format("h.{}.", l);
    LayerInputs layer;
    layer.causal = c.causal;
    double inner = 1;
    if (c.scale_attn_weights) inner /= std::sqrt(static_cast<double>(c.head_dim()));
    if (c.scale_by_inverse_layer_idx) inner /= static_cast<double>(l + 1);
    layer.inner = inner;
    layer.X = norm(h, p + "ln_1");
    // Conv1D weights are already maps of rows (x -> x W).
    const Matrix c_attn = checkpoint.matrix(tensor(p + "attn.c_attn.weight"), D, 3 * D);
    const Vector c_attn_b = checkpoint.vector(tensor(p + "attn.c_attn.bias"), 3 * D);
    const AttentionWeights weights{c_attn.leftCols(D), c_attn.middleCols(D, D), c_attn.rightCols(D),
                                   c_attn_b.head(D),   c_attn_b.segment(D, D),  c_attn_b.tail(D)};
    const theory::AttentionMap map = trained_attention_map(c.attention_activation, inner);
    h += conv1d(fill_heads(layer, weights, c.heads, &map, l, sink), p + "attn.c_proj", D, D);
    Matrix inter = conv1d(norm(h, p + "ln_2"), p + "mlp.c_fc", D, I);
    apply_hidden_activation(inter, c.hidden_act, sink.float32_products);
    h += conv1d(inter, p + "mlp.c_proj", I, D);
    require_finite_hidden_states(h, l);
    sink.receive(layer, l);
  }
}

}  // namespace

extern const FamilyAdapter gpt2_adapter{.name = "GPT-2",
                                        .model_types = {"gpt2"},
                                        .config_from_json = config_from_json,
                                        .embedding_scale_tensor = token_embeddings,
                                        .embed_tokens = embed_tokens,
                                        .forward = forward};

}  // namespace attncheck::probes::detail
