// The BERT adapter (BERT, MiniLM: model_type "bert"): word, position and token-type embeddings under a
// LayerNorm, then post-LayerNorm encoder blocks with bidirectional attention and separate query, key and value
// projections.

#include "adapters.hpp"

#include <cmath>
#include <numeric>

namespace attncheck::probes::detail {

namespace fs = std::filesystem;

namespace {

ModelConfig config_from_json(const nlohmann::json& config, const fs::path& file, const Checkpoint& checkpoint) {
  ModelConfig c;
  read_text_model_sizes(config, file, c);
  c.type_vocab = positive_int_or(config, "type_vocab_size", 2, file);
  c.layer_norm_eps = checked_number(value_or<double>(config, "layer_norm_eps", 1e-12, file), 0, false, file.string(),
                                    "layer_norm_eps");
  c.hidden_act = value_or<std::string>(config, "hidden_act", "gelu", file);
  const std::string position = value_or<std::string>(config, "position_embedding_type", "absolute", file);
  if (position != "absolute") {
    throw InputError(
        fmt::format("{}: position_embedding_type '{}' is not supported (absolute)", file.string(), position));
  }
  for (const char* prefix : {"", "bert."}) {
    if (checkpoint.contains(std::string(prefix) + "embeddings.word_embeddings.weight")) c.tensor_prefix = prefix;
  }
  // Checkpoints saved by older code name the LayerNorm parameters gamma and beta.
  if (checkpoint.contains(c.tensor_prefix + "embeddings.LayerNorm.gamma")) {
    c.norm_gain = "gamma";
    c.norm_bias = "beta";
  }
  return c;
}

std::string word_embeddings(const ModelConfig& c) { return c.tensor_prefix + "embeddings.word_embeddings.weight"; }

Matrix embed_tokens(const Checkpoint& checkpoint, const ModelConfig& c, std::span<const std::int64_t> ids) {
  std::vector<std::int64_t> positions(ids.size());
  std::iota(positions.begin(), positions.end(), 0);
  const std::vector<std::int64_t> types(ids.size(), 0);
  const std::string e = c.tensor_prefix + "embeddings.";
  return checkpoint.rows(word_embeddings(c), ids, c.hidden) +
         checkpoint.rows(e + "position_embeddings.weight", positions, c.hidden) +
         checkpoint.rows(e + "token_type_embeddings.weight", types, c.hidden);
}

// y = x W^T + b for nn.Linear weights stored [out, in].
Matrix linear(const Matrix& x, const Matrix& weight_out_in, const Vector& bias) {
  Matrix y = x * weight_out_in.transpose();
  y.rowwise() += bias.transpose();
  return y;
}

std::vector<LayerInputs> forward(const Checkpoint& checkpoint, const ModelConfig& c, Matrix h, std::int64_t last) {
  const std::int64_t D = c.hidden, I = c.intermediate;
  const auto tensor = [&](const std::string& suffix) { return c.tensor_prefix + suffix; };
  const auto norm = [&](const Matrix& x, const std::string& name) {
    return layer_norm(x, checkpoint.vector(tensor(name + "." + c.norm_gain), D),
                      checkpoint.vector(tensor(name + "." + c.norm_bias), D), c.layer_norm_eps);
  };
  h = norm(h, "embeddings.LayerNorm");
  const double inner = 1 / std::sqrt(static_cast<double>(c.head_dim()));
  const theory::AttentionMap map = trained_attention_map(c.attention_activation, inner);
  std::vector<LayerInputs> out;
  for (std::int64_t l = 0; l <= last; ++l) {
    const std::string p = fmt::format("encoder.layer.{}.", l);
    LayerInputs layer;
    layer.causal = c.causal;
    layer.inner = inner;
    layer.X = h;
    // Weights as D x D maps of rows (x -> x W); stored [out, in].
    AttentionWeights weights;
    weights.W_Q = checkpoint.matrix(tensor(p + "attention.self.query.weight"), D, D).transpose();
    weights.W_K = checkpoint.matrix(tensor(p + "attention.self.key.weight"), D, D).transpose();
    weights.W_V = checkpoint.matrix(tensor(p + "attention.self.value.weight"), D, D).transpose();
    const Matrix W_o = checkpoint.matrix(tensor(p + "attention.output.dense.weight"), D, D).transpose();
    weights.b_Q = checkpoint.vector(tensor(p + "attention.self.query.bias"), D);
    weights.b_K = checkpoint.vector(tensor(p + "attention.self.key.bias"), D);
    weights.b_V = checkpoint.vector(tensor(p + "attention.self.value.bias"), D);
    const Vector b_o = checkpoint.vector(tensor(p + "attention.output.dense.bias"), D);
    Matrix attended = fill_heads(layer, weights, c.heads, &map, l) * W_o;
    attended.rowwise() += b_o.transpose();
    const Matrix h1 = norm(attended + h, p + "attention.output.LayerNorm");
    Matrix inter = linear(h1, checkpoint.matrix(tensor(p + "intermediate.dense.weight"), I, D),
                          checkpoint.vector(tensor(p + "intermediate.dense.bias"), I));
    apply_hidden_activation(inter, c.hidden_act);
    const Matrix mlp = linear(inter, checkpoint.matrix(tensor(p + "output.dense.weight"), D, I),
                              checkpoint.vector(tensor(p + "output.dense.bias"), D));
    h = norm(mlp + h1, p + "output.LayerNorm");
    require_finite_hidden_states(h, l);
    out.push_back(std::move(layer));
  }
  return out;
}

}  // namespace

extern const FamilyAdapter bert_adapter{.name = "BERT",
                                        .model_types = {"bert"},
                                        .config_from_json = config_from_json,
                                        .embedding_scale_tensor = word_embeddings,
                                        .embed_tokens = embed_tokens,
                                        .forward = forward};

}  // namespace attncheck::probes::detail
