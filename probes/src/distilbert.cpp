// The DistilBERT adapter (model_type "distilbert"): BERT's post-LayerNorm encoder under other names and config
// keys, without token type embeddings, every LayerNorm with epsilon 1e-12 whatever the configuration says.

#include "adapters.hpp"

namespace attncheck::probes::detail {

namespace fs = std::filesystem;

namespace {

ModelConfig config_from_json(const nlohmann::json& config, const fs::path& file, const Checkpoint& checkpoint) {
  ModelConfig c;
  read_text_model_sizes(config, file, c,
                        {.hidden = "dim", .heads = "n_heads", .layers = "n_layers", .intermediate = "hidden_dim"});
  c.hidden_act = value_or<std::string>(config, "activation", "gelu", file);
  // With sinusoidal_pos_embds the position embeddings are still the parameter position_embeddings.weight, which
  // the checkpoint stores and transformers loads over its own sinusoids: read as learned ones, they are the rows the
  // model adds. Only the key's type is checked.
  value_or<bool>(config, "sinusoidal_pos_embds", false, file);
  c.layer_norm_eps = 1e-12;
  for (const char* prefix : {"", "distilbert."}) {
    if (checkpoint.contains(std::string(prefix) + "embeddings.word_embeddings.weight")) c.tensor_prefix = prefix;
  }
  const std::string words = c.tensor_prefix + "embeddings.word_embeddings.weight";
  require_declared_sizes(checkpoint, file.string(), "n_layers", c.layers, c.tensor_prefix + "transformer.layer.",
                         {{declared_value("dim", c.hidden), c.hidden, words, 1},
                          {declared_value("vocab_size", c.vocab), c.vocab, words, 0, false},
                          {declared_value("max_position_embeddings", c.max_positions), c.max_positions,
                           c.tensor_prefix + "embeddings.position_embeddings.weight", 0, false},
                          {declared_value("hidden_dim", c.intermediate), c.intermediate,
                           c.tensor_prefix + "transformer.layer.0.ffn.lin1.weight", 0}});
  return c;
}

Matrix embed_tokens(const Checkpoint& checkpoint, const ModelConfig& c, std::span<const std::int64_t> ids) {
  return bert_embeddings(checkpoint, c, ids, false);
}

void forward(const Checkpoint& checkpoint, const ModelConfig& c, Matrix h, std::int64_t last, const LayerSink& sink) {
  static const PostNormNames names{.embedding_norm = "embeddings.LayerNorm",
                                   .layers = "transformer.layer.",
                                   .query = "attention.q_lin",
                                   .key = "attention.k_lin",
                                   .value = "attention.v_lin",
                                   .output = "attention.out_lin",
                                   .attention_norm = "sa_layer_norm",
                                   .mlp_in = "ffn.lin1",
                                   .mlp_out = "ffn.lin2",
                                   .output_norm = "output_layer_norm"};
  post_norm_encoder(checkpoint, c, std::move(h), last, sink, names);
}

}  // namespace

extern const FamilyAdapter distilbert_adapter{.name = "DistilBERT",
                                              .model_types = {"distilbert"},
                                              .config_from_json = config_from_json,
                                              .embedding_scale_tensor = bert_word_embeddings,
                                              .embed_tokens = embed_tokens,
                                              .forward = forward};

}  // namespace attncheck::probes::detail
