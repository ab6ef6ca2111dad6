#pragma once
// Internal to the probes library: what the architecture adapters share, and the adapters kept in their own
// files (one per architecture).

#include "attncheck/probes/gguf.hpp"
#include "attncheck/probes/model.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>
#include <vector>

namespace attncheck::probes::detail {

// A positive integer from config.json; errors name the file and the key.
std::int64_t positive_int(const nlohmann::json& config, const char* key, const std::filesystem::path& file);

template <class T>
T value_or(const nlohmann::json& config, const char* key, T fallback, const std::filesystem::path& file) {
  if (!config.contains(key) || config[key].is_null()) return fallback;
  try {
    return config[key].get<T>();
  } catch (const nlohmann::json::exception&) {
    throw InputError(fmt::format("{}: \"{}\" has the wrong type ({})", file.string(), key, config[key].dump()));
  }
}

// The model's MLP activation, in place: "gelu" (erf), "gelu_new"/"gelu_pytorch_tanh", "relu".
void apply_hidden_activation(Matrix& m, const std::string& act);
// y = x W^T (+ b when the checkpoint has NAME.bias) for NAME.weight stored [out, in] (nn.Linear).
Matrix project(const Checkpoint& checkpoint, const Matrix& x, const std::string& name, std::int64_t out);
Vector bias_or_zero(const Checkpoint& checkpoint, const std::string& name, std::int64_t length);

}  // namespace attncheck::probes::detail

namespace attncheck::probes::llama {

// The architecture from a GGUF file's metadata (general.architecture "llama").
ModelConfig config_from_gguf(const GgufHeader& header, const Checkpoint& checkpoint);
// The architecture from a Hugging Face config.json with model_type "llama".
ModelConfig config_from_json(const nlohmann::json& config, const std::filesystem::path& file,
                             const Checkpoint& checkpoint);
std::string embedding_name(const ModelConfig& config);
// The layers 0 .. last from the token embeddings.
std::vector<LayerInputs> forward(const Checkpoint& checkpoint, const ModelConfig& config, Matrix h, std::int64_t last);

}  // namespace attncheck::probes::llama

namespace attncheck::probes::vit {

// The architecture from a Hugging Face config.json with model_type "vit" or "dinov2".
ModelConfig config_from_json(const nlohmann::json& config, const std::filesystem::path& file,
                             const Checkpoint& checkpoint);
// The CLS token, the patch embeddings in row-major patch order and the position embeddings: N x D.
Matrix embed(const Checkpoint& checkpoint, const ModelConfig& config, const Pixels& pixels);
std::string position_embedding_name(const ModelConfig& config);
// The layers 0 .. last from the embeddings.
std::vector<LayerInputs> forward(const Checkpoint& checkpoint, const ModelConfig& config, Matrix h, std::int64_t last);

}  // namespace attncheck::probes::vit
