// The RoBERTa adapter (model_type "roberta", and "xlm-roberta", whose modeling code is RoBERTa's): BERT's
// embeddings and encoder, with positions as fairseq numbers them: the padding token's position embedding is
// row padding_idx, every other token's position counts up from padding_idx + 1, so the first padding_idx + 1 rows
// of max_position_embeddings are not positions a sequence can reach.

#include "adapters.hpp"

namespace attncheck::probes::detail {

namespace fs = std::filesystem;

namespace {

ModelConfig config_from_json(const nlohmann::json& config, const fs::path& file, const Checkpoint& checkpoint) {
  ModelConfig c = bert_config_from_json(config, file, checkpoint, {"", "roberta."});
  c.padding_idx = value_or<std::int64_t>(config, "pad_token_id", 1, file);
  // Compared without adding to it: a pad_token_id near 2^63 would overflow padding_idx + 1.
  if (c.padding_idx < 0 || c.padding_idx >= c.max_positions - 1) {
    throw InputError(
        fmt::format("{}: \"pad_token_id\" is {}: RoBERTa's positions start past it, so it must lie in 0 .. {} "
                    "(max_position_embeddings {} minus 2)",
                    file.string(), c.padding_idx, c.max_positions - 2, c.max_positions));
  }
  c.max_positions -= c.padding_idx + 1;
  return c;
}

// As transformers' create_position_ids_from_input_ids: a pad token keeps position padding_idx and does not count.
Matrix embed_tokens(const Checkpoint& checkpoint, const ModelConfig& c, std::span<const std::int64_t> ids) {
  std::vector<std::int64_t> positions;
  std::int64_t counted = 0;
  for (const std::int64_t id : ids) {
    positions.push_back(id == c.padding_idx ? c.padding_idx : c.padding_idx + ++counted);
  }
  return bert_embeddings(checkpoint, c, ids, true, positions);
}

std::string describe(const ModelConfig& c) {
  return fmt::format("positions from {} (past pad_token_id {}): at most {} tokens\n", c.padding_idx + 1, c.padding_idx,
                     c.max_positions);
}

}  // namespace

extern const FamilyAdapter roberta_adapter{.name = "RoBERTa",
                                           .model_types = {"roberta", "xlm-roberta"},
                                           .config_from_json = config_from_json,
                                           .embedding_scale_tensor = bert_word_embeddings,
                                           .embed_tokens = embed_tokens,
                                           .forward = bert_forward,
                                           .describe = describe};

}  // namespace attncheck::probes::detail
