#pragma once
// Internal to the probes library: what the architecture adapters share, and the adapters kept in their own
// files (one per architecture).

#include "attncheck/probes/gguf.hpp"
#include "attncheck/probes/model.hpp"
#include "attncheck/records/json_input.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace attncheck::probes::detail {

// A positive integer from config.json; errors name the file and the key.
std::int64_t positive_int(const nlohmann::json& config, const char* key, const std::filesystem::path& file);
// The same, or `fallback` when the key is absent or null.
std::int64_t positive_int_or(const nlohmann::json& config, const char* key, std::int64_t fallback,
                             const std::filesystem::path& file);

// A number from a model's configuration that must be finite and at least `min` (above it when `above`): a negative
// normalization epsilon or rotary base would make the forward pass NaN, and the message would then blame a logit.
double checked_number(double value, double min, bool above, const std::string& source, std::string_view key);

// The value at `key` of `object` (config.json, or the part of it that `within` names), or `fallback` when the key
// is absent or null. A value of another type (text for a number, 1.5 for a count, 5 for a word) is an InputError
// naming the file, the key and the value, never a conversion that truncates or a library's bare type error.
template <class T>
T value_or(const nlohmann::json& object, const char* key, T fallback, const std::filesystem::path& file,
           std::string_view within = "") {
  if (!object.is_object() || !object.contains(key) || object[key].is_null()) return fallback;
  const nlohmann::json& value = object[key];
  bool ok = false;
  std::string_view wanted;
  if constexpr (std::is_same_v<T, bool>) {
    ok = value.is_boolean(), wanted = "true or false";
  } else if constexpr (std::is_integral_v<T>) {
    const bool whole_float = value.is_number_float() && std::isfinite(value.get<double>()) &&
                             value.get<double>() == std::floor(value.get<double>()) &&
                             std::fabs(value.get<double>()) < 9e15;
    ok = (value.is_number_integer() && !(value.is_number_unsigned() && value.get<std::uint64_t>() > INT64_MAX)) ||
         whole_float;
    wanted = "a whole number";
  } else if constexpr (std::is_floating_point_v<T>) {
    ok = value.is_number(), wanted = "a number";
  } else {
    ok = value.is_string(), wanted = "text";
  }
  if (!ok) {
    throw InputError(fmt::format("{}: \"{}{}{}\" is {}, not {}", file.string(), within, within.empty() ? "" : ".", key,
                                 records::json_excerpt(value), wanted));
  }
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    if (value.is_number_float()) return static_cast<T>(value.get<double>());
  }
  return value.get<T>();
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
