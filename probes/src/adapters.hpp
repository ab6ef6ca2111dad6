#pragma once
// Internal to the probes library: the interface every model family's adapter fills in (one file per family,
// probes/src/<family>.cpp; the list of them in probes/src/adapters.cpp), and what the adapters share.

#include "attncheck/probes/gguf.hpp"
#include "attncheck/probes/model.hpp"
#include "attncheck/records/json_input.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace attncheck::probes::detail {

// The largest size a configuration may declare. GGUF stores its sizes in 32 bits, and so does every published model;
// with each size below 2^31, a product of two (heads x head_dim, a grid's patches, a padding index plus the positions)
// fits in 64 bits.
inline constexpr std::int64_t kLargestSize = INT32_MAX;

// A positive integer from config.json, at most kLargestSize; errors name the file and the key.
std::int64_t positive_int(const nlohmann::json& config, const char* key, const std::filesystem::path& file);
// The same, or `fallback` when the key is absent or null.
std::int64_t positive_int_or(const nlohmann::json& config, const char* key, std::int64_t fallback,
                             const std::filesystem::path& file);

// The keys of a text model's sizes in config.json: as most name them, BERT's, by default.
struct TextSizeKeys {
  const char* hidden = "hidden_size";
  const char* heads = "num_attention_heads";
  const char* layers = "num_hidden_layers";
  const char* intermediate = "intermediate_size";
  const char* vocab = "vocab_size";
  const char* positions = "max_position_embeddings";
};
void read_text_model_sizes(const nlohmann::json& config, const std::filesystem::path& file, ModelConfig& c,
                           const TextSizeKeys& keys = {});

// What a configuration declares of one tensor's extent: `declared` says it, naming the keys ("\"hidden_size\" is 8"),
// `value` is the extent it gives to `dim` of `tensor`, which must equal it when `exact`, else hold at least as many
// (a vocabulary padded in its table, position rows a sequence never reaches).
struct DeclaredExtent {
  std::string declared;
  std::int64_t value;
  std::string tensor;
  std::size_t dim = 0;
  bool exact = true;
};
// "\"key\" is value": a DeclaredExtent's `declared` for one key's own value.
std::string declared_value(std::string_view key, std::int64_t value);
// Checks a configuration's sizes against the checkpoint before anything is computed from them (the layers counted,
// a window per layer, random rows of the hidden size): `layers`, as `layers_key` declares it, must each have tensors
// in the checkpoint (the highest index N of the names layer_prefix + N + "." is the last layer it holds), and every
// extent must hold its value. Errors name `source` (the configuration's file), the key and the tensor.
void require_declared_sizes(const Checkpoint& checkpoint, const std::string& source, std::string_view layers_key,
                            std::int64_t layers, std::string_view layer_prefix,
                            const std::vector<DeclaredExtent>& extents);

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

// A rotary setting (a base, a fraction of coordinates turned) that config.json may give under any of `keys`: top-level
// keys of older transformers releases (rotary_emb_base, rope_theta, rotary_pct, partial_rotary_factor), or
// "rope_parameters.NAME" inside the one object transformers 5 writes instead. `fallback` when none is given; two that
// disagree are refused rather than one of them believed, and so is a rope_parameters whose rope_type is not
// "default" (scaled rotary positions no reader applies).
double rope_setting(const nlohmann::json& config, const std::filesystem::path& file,
                    std::initializer_list<std::string_view> keys, double fallback);

// The model's MLP activation, in place: "gelu" (erf), "gelu_new"/"gelu_pytorch_tanh", "quick_gelu"
// (x sigmoid(1.702 x)), "relu", "silu". With `float32` (the mixed-precision forward) "gelu" runs in float32, as the
// products around it do.
void apply_hidden_activation(Matrix& m, const std::string& act, bool float32 = false);
// Rows `ids` of the token embeddings plus rows `positions` of the learned position embeddings (empty: 0 .. N-1).
Matrix token_and_position_embeddings(const Checkpoint& checkpoint, const std::string& token_tensor,
                                     const std::string& position_tensor, std::span<const std::int64_t> ids,
                                     std::int64_t hidden, std::span<const std::int64_t> positions = {});
// x W, or x W^T when `transposed`, for the tensor `weight` of shape rows x cols, in the forward pass's precision
// (LayerSink::float32_products): mixed precision reads the weights in float32 as stored.
Matrix times_weight(const Checkpoint& checkpoint, const Matrix& x, const std::string& weight, std::int64_t rows,
                    std::int64_t cols, bool transposed, const LayerSink& sink);
// y = x W^T (+ b when the checkpoint has NAME.bias) for NAME.weight stored [out, in] (nn.Linear), the product in the
// forward pass's precision (times_weight).
Matrix project(const Checkpoint& checkpoint, const Matrix& x, const std::string& name, std::int64_t out,
               const LayerSink& sink);
Vector bias_or_zero(const Checkpoint& checkpoint, const std::string& name, std::int64_t length);

// A GGUF file's metadata under its architecture's prefix ("qwen2." for "block_count"); errors name the file and the
// whole key.
struct GgufMetadata {
  explicit GgufMetadata(const GgufHeader& gguf);
  bool has(std::string_view key) const;
  std::int64_t size(std::string_view key) const;  // a positive integer
  std::int64_t size_or(std::string_view key, std::int64_t fallback) const;
  // A finite number at least `min` (above it when `above`), or `fallback` when absent.
  double number_or(std::string_view key, double fallback, double min, bool above) const;
  const GgufHeader& header;
  std::string prefix;
};

// One layer's attention weights for all heads as maps of rows (x -> x W + b): W_Q is D x (heads d), W_K is
// D x (kv_heads d), W_V is D x (kv_heads d_v) or empty (no values). A bias is added only when it is not empty
// (an empty b_Q or b_K is zero in the heads' inputs).
struct AttentionWeights {
  Matrix W_Q, W_K, W_V;
  Vector b_Q, b_K, b_V;
};

// Query, key and value projections stored as nn.Linear (NAME.weight [out, in], NAME.bias when present): the
// query and key biases are zeros where the checkpoint has none, the value bias empty.
AttentionWeights linear_attention_weights(const Checkpoint& checkpoint, const std::string& query,
                                          const std::string& key, const std::string& value, std::int64_t hidden,
                                          std::int64_t query_width, std::int64_t key_value_width);

// Fills layer.heads from layer.X: head h reads the query columns h d .. h d + d - 1 and the keys and values of
// its key/value head h / (heads / kv_heads); V and U are rotated to their positions when layer.rotary is set.
// With `map`, also each head's attention (scores scaled by layer.inner, masked when layer.causal; errors name
// layer `layer_index`), and returns the context: N x (heads d_v), each head's attention times its values.
// Without, the heads have no attention and the context is empty.
// Unless sink.keep_attention, no head's attention is kept and the context is computed sink.query_row_block rows at a
// time.
Matrix fill_heads(LayerInputs& layer, const AttentionWeights& weights, std::int64_t heads,
                  const theory::AttentionMap* map = nullptr, std::int64_t layer_index = 0, const LayerSink& sink = {});

// Refuses hidden states that overflowed in `layer`, before the next layer turns them into NaN scores.
void require_finite_hidden_states(const Matrix& h, std::int64_t layer);

// BERT's encoder, which RoBERTa and DistilBERT share (probes/src/bert.cpp). The tensor names of its parts:
// prefix + embedding_norm, and per layer prefix + layers + N + "." + each part's name.
struct PostNormNames {
  std::string embedding_norm, layers, query, key, value, output, attention_norm, mlp_in, mlp_out, output_norm;
};
// The configuration as BERT's config.json names it, the tensor prefix the last of `prefixes` the checkpoint uses.
ModelConfig bert_config_from_json(const nlohmann::json& config, const std::filesystem::path& file,
                                  const Checkpoint& checkpoint, std::initializer_list<const char*> prefixes);
std::string bert_word_embeddings(const ModelConfig& config);
// Word and position embeddings (at `positions`; empty: 0 .. N-1), plus token type 0's when `token_types`.
Matrix bert_embeddings(const Checkpoint& checkpoint, const ModelConfig& config, std::span<const std::int64_t> ids,
                       bool token_types, std::span<const std::int64_t> positions = {});
// The embeddings' LayerNorm, then post-LayerNorm layers 0..last with biased query, key, value and output projections.
void post_norm_encoder(const Checkpoint& checkpoint, const ModelConfig& config, Matrix h, std::int64_t last,
                       const LayerSink& sink, const PostNormNames& names);
void bert_forward(const Checkpoint& checkpoint, const ModelConfig& config, Matrix h, std::int64_t last,
                  const LayerSink& sink);

// The vision encoders' pieces, which CLIP's vision tower shares with ViT and DINOv2 (probes/src/vit.cpp).
// max_positions from image_size and patch_size, refusing a patch larger than the image.
void set_patch_grid(ModelConfig& config, const std::filesystem::path& file);
// What image_size and patch_size declare (keys under `within`, "vision_config." or GGUF's "clip.vision."), as a
// DeclaredExtent's `declared` for the position embeddings' rows.
std::string patch_grid_declared(const ModelConfig& config, std::string_view within);
// Where a family keeps its patch embedding: the stride-P convolution's kernel [D, C, P, P] and bias (empty: none),
// the CLS token's embedding and the position embeddings ([1, 1, D] and [1, N, D] when `batched`, else [D] and
// [N, D]); `interpolate`: resampled bicubically to another patch grid, else that image size is refused.
struct PatchEmbeddingNames {
  std::string kernel, bias, cls, positions;
  bool batched = true, interpolate = false;
};
// The CLS token then the image's patches, row-major, each with its position embedding (N = 1 + patches).
Matrix embed_patches(const Checkpoint& checkpoint, const ModelConfig& config, const Pixels& pixels,
                     const PatchEmbeddingNames& names);
// Tensor names of one pre-LayerNorm layer's parts; the LayerScale vectors' empty when the family has none.
struct PreNormNames {
  std::string norm_before, q, k, v, o, norm_after, mlp_in, mlp_out, scale_attention, scale_mlp;
};
// Layers 0..last of pre-LayerNorm blocks (causal when the configuration is), named by `layer_names`.
void pre_norm_encoder(const Checkpoint& checkpoint, const ModelConfig& config, Matrix h, std::int64_t last,
                      const LayerSink& sink,
                      PreNormNames (*layer_names)(const ModelConfig& config, std::int64_t layer));

// What the probes need of one model family. Each family's file defines its adapter, naming only what the family
// has (a text family no embed_pixels); adapters.cpp lists them.
struct FamilyAdapter {
  std::string_view name;  // as reports and probe logs write it ("BERT"; docs/results-format.md lists them)
  std::vector<std::string_view> model_types;         // config.json "model_type" values it reads
  std::vector<std::string_view> gguf_architectures;  // GGUF general.architecture values it reads (none: empty)
  // The configuration from config.json (`file` names it in errors; the tensor prefix is found from the
  // checkpoint's names). The family, the attention activation and the heads' split are checked by the caller.
  ModelConfig (*config_from_json)(const nlohmann::json& config, const std::filesystem::path& file,
                                  const Checkpoint& checkpoint);
  // The configuration from a GGUF file's metadata; null when gguf_architectures is empty.
  ModelConfig (*config_from_gguf)(const GgufHeader& header, const Checkpoint& checkpoint) = nullptr;
  // The tensor whose entries' RMS is the scale of the model's own embeddings, which random inputs are drawn at.
  std::string (*embedding_scale_tensor)(const ModelConfig& config);
  // The embeddings (N x D) of token ids already checked against the vocabulary and the positions; null for a
  // family that takes images.
  Matrix (*embed_tokens)(const Checkpoint& checkpoint, const ModelConfig& config,
                         std::span<const std::int64_t> ids) = nullptr;
  // The embeddings (N x D) of an image; null for a family that takes tokens.
  Matrix (*embed_pixels)(const Checkpoint& checkpoint, const ModelConfig& config, const Pixels& pixels) = nullptr;
  // The inputs of layers 0 .. last from the embeddings (N x D, sizes and memory already checked), each handed to
  // `sink` as soon as it is computed.
  void (*forward)(const Checkpoint& checkpoint, const ModelConfig& config, Matrix h, std::int64_t last,
                  const LayerSink& sink);
  // What `attncheck probe` says of the family's own traits under the model's sizes (lines, each ending in a
  // newline); null when there is nothing to add.
  std::string (*describe)(const ModelConfig& config) = nullptr;
  // Rotary positions on the keys: softmax's dA/dW_K then reads the N x N Gram matrix of the layer's rows.
  bool rotates_keys = false;
  // RMSNorms over each head's queries and keys (Qwen3, Gemma 3): softmax's dA/dW_K then forms an N x N kernel per
  // query row (theory's general rows), as it does under a logit cap.
  bool normalizes_heads = false;
};

// Every family, in the order refusals list their model_type values.
std::span<const FamilyAdapter* const> family_adapters();

}  // namespace attncheck::probes::detail
