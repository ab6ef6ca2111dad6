// The BERT adapter (BERT, MiniLM: model_type "bert"): word, position and token-type embeddings under a
// LayerNorm, then post-LayerNorm encoder blocks with bidirectional attention and separate query, key and value
// projections. RoBERTa and DistilBERT run the same encoder through the pieces declared in adapters.hpp.

#include "adapters.hpp"

#include <cmath>

namespace attncheck::probes::detail {

namespace fs = std::filesystem;

ModelConfig bert_config_from_json(const nlohmann::json& config, const fs::path& file, const Checkpoint& checkpoint,
                                  std::initializer_list<const char*> prefixes) {
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
  for (const char* prefix : prefixes) {
    if (checkpoint.contains(std::string(prefix) + "embeddings.word_embeddings.weight")) c.tensor_prefix = prefix;
  }
  // Checkpoints saved by older code name the LayerNorm parameters gamma and beta.
  if (checkpoint.contains(c.tensor_prefix + "embeddings.LayerNorm.gamma")) {
    c.norm_gain = "gamma";
    c.norm_bias = "beta";
  }
  return c;
}

std::string bert_word_embeddings(const ModelConfig& c) { return c.tensor_prefix + "embeddings.word_embeddings.weight"; }

Matrix bert_embeddings(const Checkpoint& checkpoint, const ModelConfig& c, std::span<const std::int64_t> ids,
                       bool token_types, std::span<const std::int64_t> positions) {
  const std::string e = c.tensor_prefix + "embeddings.";
  Matrix h = token_and_position_embeddings(checkpoint, bert_word_embeddings(c), e + "position_embeddings.weight", ids,
                                           c.hidden, positions);
  if (token_types) {
    const std::vector<std::int64_t> types(ids.size(), 0);
    h += checkpoint.rows(e + "token_type_embeddings.weight", types, c.hidden);
  }
  return h;
}

namespace {

// y = x W^T + b for nn.Linear weights stored [out, in].
Matrix linear(const Checkpoint& checkpoint, const Matrix& x, const std::string& name, std::int64_t out,
              std::int64_t in) {
  Matrix y = x * checkpoint.matrix(name + ".weight", out, in).transpose();
  y.rowwise() += checkpoint.vector(name + ".bias", out).transpose();
  return y;
}

}  // namespace

void post_norm_encoder(const Checkpoint& checkpoint, const ModelConfig& c, Matrix h, std::int64_t last,
                       const LayerSink& sink, const PostNormNames& names) {
  const std::int64_t D = c.hidden, I = c.intermediate;
  const auto norm = [&](const Matrix& x, const std::string& name) {
    return layer_norm(x, checkpoint.vector(name + "." + c.norm_gain, D), checkpoint.vector(name + "." + c.norm_bias, D),
                      c.layer_norm_eps);
  };
  h = norm(h, c.tensor_prefix + names.embedding_norm);
  const double inner = 1 / std::sqrt(static_cast<double>(c.head_dim()));
  const theory::AttentionMap map = trained_attention_map(c.attention_activation, inner);
  for (std::int64_t l = 0; l <= last; ++l) {
    const std::string p = fmt::format("{}{}{}.", c.tensor_prefix, names.layers, l);
    const auto name = [&](const std::string& suffix) { return p + suffix; };
    LayerInputs layer;
    layer.causal = c.causal;
    layer.inner = inner;
    layer.X = h;
    // Weights as D x D maps of rows (x -> x W); stored [out, in].
    AttentionWeights weights;
    weights.W_Q = checkpoint.matrix(name(names.query + ".weight"), D, D).transpose();
    weights.W_K = checkpoint.matrix(name(names.key + ".weight"), D, D).transpose();
    weights.W_V = checkpoint.matrix(name(names.value + ".weight"), D, D).transpose();
    weights.b_Q = checkpoint.vector(name(names.query + ".bias"), D);
    weights.b_K = checkpoint.vector(name(names.key + ".bias"), D);
    weights.b_V = checkpoint.vector(name(names.value + ".bias"), D);
    const Matrix attended =
        linear(checkpoint, fill_heads(layer, weights, c.heads, &map, l, sink), name(names.output), D, D);
    const Matrix h1 = norm(attended + h, name(names.attention_norm));
    Matrix inter = linear(checkpoint, h1, name(names.mlp_in), I, D);
    apply_hidden_activation(inter, c.hidden_act);
    h = norm(linear(checkpoint, inter, name(names.mlp_out), D, I) + h1, name(names.output_norm));
    require_finite_hidden_states(h, l);
    sink.receive(layer, l);
  }
}

void bert_forward(const Checkpoint& checkpoint, const ModelConfig& c, Matrix h, std::int64_t last,
                  const LayerSink& sink) {
  static const PostNormNames names{.embedding_norm = "embeddings.LayerNorm",
                                   .layers = "encoder.layer.",
                                   .query = "attention.self.query",
                                   .key = "attention.self.key",
                                   .value = "attention.self.value",
                                   .output = "attention.output.dense",
                                   .attention_norm = "attention.output.LayerNorm",
                                   .mlp_in = "intermediate.dense",
                                   .mlp_out = "output.dense",
                                   .output_norm = "output.LayerNorm"};
  post_norm_encoder(checkpoint, c, std::move(h), last, sink, names);
}

namespace {

ModelConfig config_from_json(const nlohmann::json& config, const fs::path& file, const Checkpoint& checkpoint) {
  return bert_config_from_json(config, file, checkpoint, {"", "bert."});
}

Matrix embed_tokens(const Checkpoint& checkpoint, const ModelConfig& c, std::span<const std::int64_t> ids) {
  return bert_embeddings(checkpoint, c, ids, true);
}

}  // namespace

extern const FamilyAdapter bert_adapter{.name = "BERT",
                                        .model_types = {"bert"},
                                        .config_from_json = config_from_json,
                                        .embedding_scale_tensor = bert_word_embeddings,
                                        .embed_tokens = embed_tokens,
                                        .forward = bert_forward};

}  // namespace attncheck::probes::detail
