// The BERT adapter (BERT, MiniLM: model_type "bert"): word, position and token-type embeddings under a
// LayerNorm, then post-LayerNorm encoder blocks with bidirectional attention and separate query, key and value
// projections. RoBERTa and DistilBERT run the same encoder through the pieces declared in adapters.hpp.
// Also GGUF files of architecture "bert", which llama.cpp's converter writes for BERT, RoBERTa and DistilBERT alike:
// RoBERTa's position embeddings cut to the rows from pad_token_id + 1 on (so positions count from 0), DistilBERT's
// without token types; read as llama.cpp runs them, token type 0's row added when the file has token_types, the MLP's
// GELU ggml's tanh approximation whatever the original configuration said.

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
  const std::string words = c.tensor_prefix + "embeddings.word_embeddings.weight";
  require_declared_sizes(checkpoint, file.string(), "num_hidden_layers", c.layers, c.tensor_prefix + "encoder.layer.",
                         {{declared_value("hidden_size", c.hidden), c.hidden, words, 1},
                          {declared_value("vocab_size", c.vocab), c.vocab, words, 0, false},
                          {declared_value("max_position_embeddings", c.max_positions), c.max_positions,
                           c.tensor_prefix + "embeddings.position_embeddings.weight", 0, false},
                          {declared_value("intermediate_size", c.intermediate), c.intermediate,
                           c.tensor_prefix + "encoder.layer.0.intermediate.dense.weight", 0}});
  return c;
}

std::string bert_word_embeddings(const ModelConfig& c) {
  return c.gguf ? "token_embd.weight" : c.tensor_prefix + "embeddings.word_embeddings.weight";
}

Matrix bert_embeddings(const Checkpoint& checkpoint, const ModelConfig& c, std::span<const std::int64_t> ids,
                       bool token_types, std::span<const std::int64_t> positions) {
  const std::string e = c.tensor_prefix + "embeddings.";
  const std::string position_tensor = c.gguf ? "position_embd.weight" : e + "position_embeddings.weight";
  const std::string type_tensor = c.gguf ? "token_types.weight" : e + "token_type_embeddings.weight";
  Matrix h =
      token_and_position_embeddings(checkpoint, bert_word_embeddings(c), position_tensor, ids, c.hidden, positions);
  if (token_types) {
    const std::vector<std::int64_t> types(ids.size(), 0);
    h += checkpoint.rows(type_tensor, types, c.hidden);
  }
  return h;
}

namespace {

// y = x W^T + b for nn.Linear weights stored [out, in]: detail::project, with the bias every BERT layer has required
// (a checkpoint without it is refused, naming the tensor).
Matrix linear(const Checkpoint& checkpoint, const Matrix& x, const std::string& name, std::int64_t out,
              const LayerSink& sink) {
  checkpoint.info(name + ".bias");
  return project(checkpoint, x, name, out, sink);
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
        linear(checkpoint, fill_heads(layer, weights, c.heads, &map, l, sink), name(names.output), D, sink);
    const Matrix h1 = norm(attended + h, name(names.attention_norm));
    Matrix inter = linear(checkpoint, h1, name(names.mlp_in), I, sink);
    apply_hidden_activation(inter, c.hidden_act, sink.float32_products);
    h = norm(linear(checkpoint, inter, name(names.mlp_out), D, sink) + h1, name(names.output_norm));
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
  static const PostNormNames gguf_names{.embedding_norm = "token_embd_norm",
                                        .layers = "blk.",
                                        .query = "attn_q",
                                        .key = "attn_k",
                                        .value = "attn_v",
                                        .output = "attn_output",
                                        .attention_norm = "attn_output_norm",
                                        .mlp_in = "ffn_up",
                                        .mlp_out = "ffn_down",
                                        .output_norm = "layer_output_norm"};
  post_norm_encoder(checkpoint, c, std::move(h), last, sink, c.gguf ? gguf_names : names);
}

namespace {

ModelConfig config_from_json(const nlohmann::json& config, const fs::path& file, const Checkpoint& checkpoint) {
  return bert_config_from_json(config, file, checkpoint, {"", "bert."});
}

// The sizes as llama.cpp's converter writes them under "bert.", every one required as llama.cpp requires them.
ModelConfig config_from_gguf(const GgufHeader& header, const Checkpoint& checkpoint) {
  const GgufMetadata meta(header);
  ModelConfig c;
  c.gguf = true;
  c.layers = meta.size("block_count");
  c.hidden = meta.size("embedding_length");
  c.intermediate = meta.size("feed_forward_length");
  c.heads = meta.size("attention.head_count");
  c.max_positions = meta.size("context_length");
  if (meta.size_or("attention.head_count_kv", c.heads) != c.heads) {
    throw InputError(fmt::format("{}: {} query heads with {} key/value heads: BERT's heads each have their own",
                                 header.source, c.heads, meta.size("attention.head_count_kv")));
  }
  if (c.hidden % c.heads != 0) {
    throw InputError(
        fmt::format("{}: embedding_length {} is not a multiple of the {} heads", header.source, c.hidden, c.heads));
  }
  const std::string epsilon = meta.prefix + "attention.layer_norm_epsilon";
  c.layer_norm_eps = checked_number(header.number(epsilon), 0, false, header.source, epsilon);
  c.causal = header.boolean(meta.prefix + "attention.causal");
  // llama.cpp's BERT MLP is ggml_gelu, the tanh approximation, for every model the converter writes as "bert".
  c.hidden_act = "gelu_pytorch_tanh";
  if (checkpoint.contains("blk.0.attn_qkv.weight")) {
    throw InputError(fmt::format("{}: fused query/key/value projections (attn_qkv) are not supported", header.source));
  }
  const auto rows = [&](const char* name) {
    return checkpoint.contains(name) && !checkpoint.info(name).shape.empty() ? checkpoint.info(name).shape.front() : 0;
  };
  c.vocab = rows("token_embd.weight");
  // DistilBERT's files have none.
  c.type_vocab = rows("token_types.weight");
  const auto key = [&](const char* name) { return meta.prefix + name; };
  require_declared_sizes(
      checkpoint, header.source, key("block_count"), c.layers, "blk.",
      {{declared_value(key("embedding_length"), c.hidden), c.hidden, "token_embd.weight", 1},
       {declared_value(key("context_length"), c.max_positions), c.max_positions, "position_embd.weight", 0, false},
       {declared_value(key("feed_forward_length"), c.intermediate), c.intermediate, "blk.0.ffn_up.weight", 0}});
  return c;
}

Matrix embed_tokens(const Checkpoint& checkpoint, const ModelConfig& c, std::span<const std::int64_t> ids) {
  return bert_embeddings(checkpoint, c, ids, !c.gguf || c.type_vocab > 0);
}

std::string describe(const ModelConfig& c) {
  if (!c.gguf) return "";
  return fmt::format("as llama.cpp runs GGUF BERT: positions 0 .. N-1, {}the MLP's GELU in tanh form{}\n",
                     c.type_vocab > 0 ? "token type 0's embedding added, " : "no token types, ",
                     c.causal ? ", causal attention (attention.causal)" : "");
}

}  // namespace

extern const FamilyAdapter bert_adapter{.name = "BERT",
                                        .model_types = {"bert"},
                                        .gguf_architectures = {"bert"},
                                        .config_from_json = config_from_json,
                                        .config_from_gguf = config_from_gguf,
                                        .embedding_scale_tensor = bert_word_embeddings,
                                        .embed_tokens = embed_tokens,
                                        .forward = bert_forward,
                                        .describe = describe};

}  // namespace attncheck::probes::detail
