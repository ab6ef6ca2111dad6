#include "attncheck/probes/model.hpp"

#include "adapters.hpp"
#include "attncheck/records/input_file.hpp"
#include "attncheck/records/json_input.hpp"
#include "attncheck/records/memory_budget.hpp"
#include "attncheck/theory/pointwise.hpp"
#include "attncheck/theory/softmax.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <numeric>

namespace attncheck::probes {

void keep_freed_matrices_in_heap() {
#if defined(__GLIBC__)
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  // The heap's free top is kept too (trimming it would return the same pages); RSS stays at the peak it reached.
  mallopt(M_TRIM_THRESHOLD, std::numeric_limits<int>::max());
#endif
}

namespace fs = std::filesystem;
using detail::value_or;
using theory::Index;

std::string_view architecture_name(const ModelConfig& config) { return config.family ? config.family->name : "?"; }

bool is_vision(const ModelConfig& config) { return config.family && config.family->embed_pixels; }

std::string describe_family(const ModelConfig& config) {
  return config.family && config.family->describe ? config.family->describe(config) : "";
}

theory::AttentionMap trained_attention_map(const std::string& attention_activation, double inner) {
  theory::AttentionMap map;
  map.inner = inner;
  if (attention_activation == "softmax") return map;
  map.activation = {theory::ActivationKind::pointwise, theory::Pointwise::poly, 3};
  if (attention_activation == "poly3_scaled") {
    map.outer = {1, 0.5};
  } else if (attention_activation != "poly3") {
    throw InputError(
        fmt::format("attention_activation '{}' is not one of softmax, poly3_scaled, poly3", attention_activation));
  }
  return map;
}

fs::path config_path_for(const fs::path& model) {
  if (!fs::is_directory(model)) return model.parent_path() / "config.json";
  // A checkpoint sub-folder of a training run may rely on the run folder's config.json.
  if (!fs::exists(model / "config.json") && fs::exists(model.parent_path() / "config.json")) {
    return model.parent_path() / "config.json";
  }
  return model / "config.json";
}

std::int64_t detail::positive_int(const nlohmann::json& config, const char* key, const fs::path& file) {
  if (!config.contains(key)) throw InputError(fmt::format("{}: no \"{}\"", file.string(), key));
  const auto& value = config[key];
  if (!value.is_number_integer() || value.get<std::int64_t>() <= 0 ||
      (value.is_number_unsigned() && value.get<std::uint64_t>() > INT64_MAX)) {
    throw InputError(
        fmt::format("{}: \"{}\" is {}, not a positive integer", file.string(), key, records::json_excerpt(value)));
  }
  if (value.get<std::int64_t>() > kLargestSize) {
    throw InputError(fmt::format("{}: \"{}\" is {}, more than the largest size a model declares ({})", file.string(),
                                 key, value.get<std::int64_t>(), kLargestSize));
  }
  return value.get<std::int64_t>();
}

std::int64_t detail::positive_int_or(const nlohmann::json& config, const char* key, std::int64_t fallback,
                                     const fs::path& file) {
  return !config.contains(key) || config[key].is_null() ? fallback : positive_int(config, key, file);
}

void detail::read_text_model_sizes(const nlohmann::json& config, const fs::path& file, ModelConfig& c,
                                   const TextSizeKeys& keys) {
  c.hidden = positive_int(config, keys.hidden, file);
  c.heads = positive_int(config, keys.heads, file);
  c.layers = positive_int(config, keys.layers, file);
  c.intermediate = positive_int(config, keys.intermediate, file);
  c.vocab = positive_int(config, keys.vocab, file);
  c.max_positions = positive_int(config, keys.positions, file);
}

std::string detail::declared_value(std::string_view key, std::int64_t value) {
  return fmt::format("\"{}\" is {}", key, value);
}

void detail::require_declared_sizes(const Checkpoint& checkpoint, const std::string& source,
                                    std::string_view layers_key, std::int64_t layers, std::string_view layer_prefix,
                                    const std::vector<DeclaredExtent>& extents) {
  // The last layer the names hold, and one of its tensors to name.
  std::int64_t held = 0;
  std::string last_tensor;
  for (const std::string& name : checkpoint.names()) {
    if (!name.starts_with(layer_prefix)) continue;
    const std::string_view rest = std::string_view(name).substr(layer_prefix.size());
    std::int64_t index = -1;
    const auto [end, error] = std::from_chars(rest.data(), rest.data() + rest.size(), index);
    if (error != std::errc() || end == rest.data() || end == rest.data() + rest.size() || *end != '.' || index < 0 ||
        index >= kLargestSize) {
      continue;
    }
    if (index + 1 > held) held = index + 1, last_tensor = name;
  }
  if (layers > held) {
    throw InputError(held == 0
                         ? fmt::format("{}: {}, but the checkpoint holds no layer's tensors (named {}N.*)", source,
                                       declared_value(layers_key, layers), layer_prefix)
                         : fmt::format("{}: {}, but the checkpoint holds layers 0..{} only (the last: {})", source,
                                       declared_value(layers_key, layers), held - 1, checkpoint.where(last_tensor)));
  }
  for (const DeclaredExtent& e : extents) {
    const std::vector<std::int64_t>& shape = checkpoint.info(e.tensor).shape;
    const bool holds = e.dim < shape.size() && (e.exact ? shape[e.dim] == e.value : shape[e.dim] >= e.value);
    if (!holds) {
      throw InputError(fmt::format("{}: {}, but {} has shape [{}]: its extent {} should be {}{}", source, e.declared,
                                   checkpoint.where(e.tensor), fmt::join(shape, ", "), e.dim,
                                   e.exact ? "" : "at least ", e.value));
    }
  }
}

double detail::checked_number(double value, double min, bool above, const std::string& source, std::string_view key) {
  if (!std::isfinite(value) || value < min || (above && value == min)) {
    throw InputError(
        fmt::format("{}: \"{}\" is {}: it must be a finite number {} {}", source, key, value, above ? ">" : ">=", min));
  }
  return value;
}

double detail::rope_setting(const nlohmann::json& config, const std::filesystem::path& file,
                            std::initializer_list<std::string_view> keys, double fallback) {
  constexpr std::string_view nested = "rope_parameters.";
  const nlohmann::json* parameters = nullptr;
  if (config.contains("rope_parameters") && !config["rope_parameters"].is_null()) {
    parameters = &config["rope_parameters"];
    if (!parameters->is_object()) {
      throw InputError(fmt::format("{}: \"rope_parameters\" is {}, not an object", file.string(),
                                   records::json_excerpt(*parameters)));
    }
    // One object per kind of layer (Gemma 3's reader flattens its own): read as one, its base would be the fallback.
    for (const char* kind : {"full_attention", "sliding_attention"}) {
      if (parameters->contains(kind)) {
        throw InputError(
            fmt::format("{}: \"rope_parameters\" has one object per kind of layer (\"{}\"): this "
                        "family's reader takes one for all its layers",
                        file.string(), kind));
      }
    }
    const auto type = value_or<std::string>(*parameters, "rope_type", "default", file, "rope_parameters");
    if (type != "default") {
      throw InputError(
          fmt::format("{}: \"rope_parameters.rope_type\" is '{}': scaled rotary positions are not "
                      "supported (default only)",
                      file.string(), type));
    }
  }
  std::optional<double> agreed;
  std::string agreed_key;
  for (const std::string_view key : keys) {
    const bool inside = key.starts_with(nested);
    const nlohmann::json* object = inside ? parameters : &config;
    if (!object) continue;
    const std::string name(inside ? key.substr(nested.size()) : key);
    const double value = value_or<double>(*object, name.c_str(), NAN, file, inside ? "rope_parameters" : "");
    if (std::isnan(value)) continue;
    if (agreed && *agreed != value) {
      throw InputError(fmt::format("{}: \"{}\" is {:g} and \"{}\" is {:g}: they must agree", file.string(), agreed_key,
                                   *agreed, key, value));
    }
    agreed = value;
    agreed_key = std::string(key);
  }
  return agreed.value_or(fallback);
}

detail::GgufMetadata::GgufMetadata(const GgufHeader& gguf)
    : header(gguf), prefix(gguf.string("general.architecture") + ".") {}

bool detail::GgufMetadata::has(std::string_view key) const { return header.find(prefix + std::string(key)) != nullptr; }

std::int64_t detail::GgufMetadata::size(std::string_view key) const {
  const std::string name = prefix + std::string(key);
  const auto value = header.unsigned_integer(name);
  if (value == 0 || value > static_cast<std::uint64_t>(kLargestSize)) {
    throw InputError(fmt::format("{}: metadata '{}' is {}, not a positive size", header.source, name, value));
  }
  return static_cast<std::int64_t>(value);
}

std::int64_t detail::GgufMetadata::size_or(std::string_view key, std::int64_t fallback) const {
  return has(key) ? size(key) : fallback;
}

double detail::GgufMetadata::number_or(std::string_view key, double fallback, double min, bool above) const {
  const std::string name = prefix + std::string(key);
  return checked_number(has(key) ? header.number(name) : fallback, min, above, header.source, name);
}

Matrix detail::token_and_position_embeddings(const Checkpoint& checkpoint, const std::string& token_tensor,
                                             const std::string& position_tensor, std::span<const std::int64_t> ids,
                                             std::int64_t hidden, std::span<const std::int64_t> positions) {
  std::vector<std::int64_t> from_zero;
  if (positions.empty()) {
    from_zero.resize(ids.size());
    std::iota(from_zero.begin(), from_zero.end(), 0);
    positions = from_zero;
  }
  return checkpoint.rows(token_tensor, ids, hidden) + checkpoint.rows(position_tensor, positions, hidden);
}

Matrix detail::times_weight(const Checkpoint& checkpoint, const Matrix& x, const std::string& weight, std::int64_t rows,
                            std::int64_t cols, bool transposed, const LayerSink& sink) {
  if (!sink.float32_products) {
    const Matrix W = checkpoint.matrix(weight, rows, cols);
    return transposed ? Matrix(x * W.transpose()) : Matrix(x * W);
  }
  // Read in float32 at once: widening the weights to double only to round them back took a tenth of DINOv2's forward.
  const FloatMatrix W = checkpoint.float_matrix(weight, rows, cols);
  const FloatMatrix rounded = rounded_to_float32(x, SummedAlong::rows);
  return transposed ? float32_product(rounded, W.transpose()) : float32_product(rounded, W);
}

Matrix detail::project(const Checkpoint& checkpoint, const Matrix& x, const std::string& name, std::int64_t out,
                       const LayerSink& sink) {
  Matrix y = times_weight(checkpoint, x, name + ".weight", out, x.cols(), true, sink);
  if (checkpoint.contains(name + ".bias")) y.rowwise() += checkpoint.vector(name + ".bias", out).transpose();
  return y;
}

void throw_beyond_float32(std::string_view what, double value) {
  throw InputError(fmt::format("--precision mixed: {} is beyond float32's range{}; --precision double takes it", what,
                               std::isfinite(value) ? fmt::format(" (magnitude {:g})", value) : std::string()));
}

void throw_below_float32(std::string_view what, double value) {
  throw InputError(fmt::format(
      "--precision mixed: {} is below float32's normal range (magnitude {:g}, under {:g}, where float32 keeps fewer "
      "than its 24 bits and its error exceeds the documented one); --precision double takes it",
      what, value, static_cast<double>(std::numeric_limits<float>::min())));
}

Vector detail::bias_or_zero(const Checkpoint& checkpoint, const std::string& name, std::int64_t length) {
  return checkpoint.contains(name + ".bias") ? checkpoint.vector(name + ".bias", length) : Vector::Zero(length);
}

detail::AttentionWeights detail::linear_attention_weights(const Checkpoint& checkpoint, const std::string& query,
                                                          const std::string& key, const std::string& value,
                                                          std::int64_t hidden, std::int64_t query_width,
                                                          std::int64_t key_value_width) {
  AttentionWeights weights;
  weights.W_Q = checkpoint.matrix(query + ".weight", query_width, hidden).transpose();
  weights.W_K = checkpoint.matrix(key + ".weight", key_value_width, hidden).transpose();
  weights.b_Q = bias_or_zero(checkpoint, query, query_width);
  weights.b_K = bias_or_zero(checkpoint, key, key_value_width);
  weights.W_V = checkpoint.matrix(value + ".weight", key_value_width, hidden).transpose();
  if (checkpoint.contains(value + ".bias")) weights.b_V = checkpoint.vector(value + ".bias", key_value_width);
  return weights;
}

void detail::require_finite_hidden_states(const Matrix& h, std::int64_t layer) {
  if (!theory::all_finite(h)) {
    throw InputError(fmt::format("hidden states after layer {} are not finite (the activations overflowed)", layer));
  }
}

namespace {

double gelu_tanh(double x) {
  constexpr double kSqrt2OverPi = 0.79788456080286535588;
  return 0.5 * x * (1.0 + std::tanh(kSqrt2OverPi * (x + 0.044715 * x * x * x)));
}

}  // namespace

void detail::apply_hidden_activation(Matrix& m, const std::string& act, bool float32) {
  if (act == "gelu" && float32) {
    FloatMatrix rounded = rounded_to_float32(m, SummedAlong::rows);
    float_kernels::gelu(rounded.data(), rounded.size());
    m = rounded.cast<double>();
  } else if (act == "gelu") {
    m = m.unaryExpr([](double x) { return theory::pointwise_value(theory::Pointwise::gelu, 1, x); });
  } else if (act == "gelu_new" || act == "gelu_pytorch_tanh") {
    m = m.unaryExpr(&gelu_tanh);
  } else if (act == "quick_gelu") {
    m = m.unaryExpr([](double x) { return x / (1 + std::exp(-1.702 * x)); });
  } else if (act == "relu") {
    m = m.cwiseMax(0.0);
  } else if (act == "silu") {
    m = m.unaryExpr([](double x) { return x / (1 + std::exp(-x)); });
  } else {
    throw InputError(
        fmt::format("hidden activation '{}' is not supported (gelu, gelu_new, quick_gelu, relu, silu)", act));
  }
}

Matrix apply_attention(const theory::AttentionMap& map, const Matrix& scores, bool causal, std::string_view where,
                       const theory::AttendedMask* attended) {
  return apply_attention_rows(map, scores, 0, causal, where, attended);
}

namespace {
// Head `index`'s view of `norm` over all the heads: its d gains, and the other heads' squares as the layer's
// `all_squares` less those of the head's own raw rows `raw`.
HeadNormSlice slice_of(const HeadNorm& norm, Index index, const Matrix& raw, const Vector& all_squares) {
  const Index d = raw.cols();
  return {HeadNorm{norm.gain.segment(index * d, d), norm.eps},
          theory::OtherHeads{norm.gain.size() - d, all_squares - raw.rowwise().squaredNorm(), {}}};
}

// Said where the cause is known: the softmax would only see a NaN logit.
void require_finite_scores(const Matrix& scores, std::string_view where) {
  if (!theory::all_finite(scores)) {
    throw InputError(
        fmt::format("{}: the attention scores are not finite: the activations overflowed double "
                    "precision (an input or weights far too large)",
                    where));
  }
}
}  // namespace

Matrix apply_attention_rows(const theory::AttentionMap& map, const Matrix& scores, Index first_row, bool causal,
                            std::string_view where, const theory::AttendedMask* attended) {
  require_finite_scores(scores, where);
  const Index n = scores.cols();
  Matrix out = Matrix::Zero(scores.rows(), n);
  const double c = map.outer.at(n);
  std::vector<Index> keys;
  Vector row_scores(n), row_out(n);
  for (Index r = 0; r < scores.rows(); ++r) {
    const Index i = first_row + r;
    if (attended) {
      keys.clear();
      for (Index j = 0; j < n; ++j) {
        if ((*attended)(i, j)) keys.push_back(j);
      }
      const auto visible = static_cast<std::size_t>(keys.size());
      row_scores.head(static_cast<Index>(visible)) = scores.row(r)(keys).transpose();
      if (map.activation.kind == theory::ActivationKind::softmax) {
        theory::softmax_row({row_scores.data(), visible}, {row_out.data(), visible}, i);
      } else {
        for (std::size_t k = 0; k < visible; ++k) {
          row_out[static_cast<Index>(k)] =
              c * theory::pointwise_value(map.activation.h, map.activation.p, row_scores[static_cast<Index>(k)]);
        }
      }
      out.row(r)(keys) = row_out.head(static_cast<Index>(visible)).transpose();
      continue;
    }
    const Index visible = causal ? i + 1 : n;
    if (map.activation.kind == theory::ActivationKind::softmax) {
      row_scores.head(visible) = scores.row(r).head(visible).transpose();
      theory::softmax_row({row_scores.data(), static_cast<std::size_t>(visible)},
                          {row_out.data(), static_cast<std::size_t>(visible)}, i);
      out.row(r).head(visible) = row_out.head(visible).transpose();
    } else {
      for (Index j = 0; j < visible; ++j) {
        out(r, j) = c * theory::pointwise_value(map.activation.h, map.activation.p, scores(r, j));
      }
    }
  }
  return out;
}

Matrix detail::fill_heads(LayerInputs& layer, const AttentionWeights& weights, std::int64_t heads,
                          const theory::AttentionMap* map, std::int64_t layer_index, const LayerSink& sink) {
  const Index n = layer.X.rows(), d = weights.W_Q.cols() / heads, kv_heads = weights.W_K.cols() / d;
  const Index d_v = weights.W_V.cols() / kv_heads;
  const auto project_rows = [&](const Matrix& W, const Vector& b) {
    Matrix y = forward_product(layer.X, W, sink.float32_products);
    if (b.size() != 0) y.rowwise() += b.transpose();
    return y;
  };
  const Matrix queries = project_rows(weights.W_Q, weights.b_Q), keys = project_rows(weights.W_K, weights.b_K);
  const Matrix values = weights.W_V.size() != 0 ? project_rows(weights.W_V, weights.b_V) : Matrix();
  const auto bias_of = [](const Vector& b, Index offset, Index length) {
    return b.size() != 0 ? Vector(b.segment(offset, length)) : Vector(Vector::Zero(length));
  };
  if (!std::isfinite(layer.logit_softcap) || layer.logit_softcap < 0) {
    throw InputError(fmt::format("logit soft-cap {} is not a finite number >= 0 (0: none)", layer.logit_softcap));
  }
  if (map && layer.logit_softcap > 0 && map->activation.kind != theory::ActivationKind::softmax) {
    throw InputError("soft-capped logits are a softmax's: the trained activation is not softmax");
  }
  // A gain of every head's coordinates is a norm over all the heads together (OLMo 2): RMSNorms only.
  for (const auto& [norm, name, width] : {std::tuple{&layer.query_norm, "query_norm", queries.cols()},
                                          std::tuple{&layer.key_norm, "key_norm", keys.cols()}}) {
    if (!*norm) continue;
    const bool all_heads = (*norm)->gain.size() != d;
    if (all_heads && (*norm)->gain.size() != width) {
      throw InputError(fmt::format("{} has {} gains: need d = {} (one head's) or {} (every head's)", name,
                                   (*norm)->gain.size(), d, width));
    }
    if (all_heads && (*norm)->centred) {
      throw InputError(
          fmt::format("{} is a LayerNorm over all the heads: only an RMSNorm over them is measured", name));
    }
    if (!((*norm)->eps >= 0)) throw InputError(fmt::format("{} eps = {} is negative", name, (*norm)->eps));
    if ((*norm)->bias.size() != 0 && ((*norm)->bias.size() != d || !(*norm)->centred)) {
      throw InputError(fmt::format("{} has a bias of {} entries: only a LayerNorm over the head's d = {} has one", name,
                                   (*norm)->bias.size(), d));
    }
  }
  if (layer.query_norm && spans_all_heads(*layer.query_norm, d))
    layer.all_query_squares = queries.rowwise().squaredNorm();
  if (layer.key_norm && spans_all_heads(*layer.key_norm, d)) {
    layer.all_key_squares = keys.rowwise().squaredNorm();
    layer.all_key_gram.noalias() = keys * keys.transpose();
  }
  if (!layer.head_rotary.empty() && (std::ssize(layer.head_rotary) != heads || kv_heads != heads)) {
    throw InputError(
        fmt::format("{} rotary embeddings for {} heads and {} key heads: need one per head, each head "
                    "its own keys",
                    layer.head_rotary.size(), heads, kv_heads));
  }
  // Normalized, then rotated, as the models do; head `index`'s coordinates of a norm over all the heads.
  const auto head_rows = [&](const Matrix& all, Index index, const std::optional<HeadNorm>& norm,
                             const Vector& all_squares) {
    Matrix rows = all.middleCols(index * d, d);
    if (norm && spans_all_heads(*norm, d)) {
      const HeadNormSlice slice = slice_of(*norm, index, rows, all_squares);
      rows = theory::head_normalized(rows, slice.norm, &slice.others);
    } else if (norm) {
      rows = theory::head_normalized(rows, *norm);
    }
    if (const theory::Rotary* rotary = rotary_of(layer, index)) theory::apply_rotary(*rotary, rows);
    return rows;
  };
  // Once for all the query heads that share them.
  std::vector<Matrix> head_keys;
  for (Index g = 0; g < kv_heads; ++g) head_keys.push_back(head_rows(keys, g, layer.key_norm, layer.all_key_squares));
  Matrix context = map ? Matrix(n, heads * d_v) : Matrix();
  for (Index head = 0; head < heads; ++head) {
    const Index g = head / (heads / kv_heads);
    HeadInputs inputs;
    inputs.head = head;
    inputs.kv_head = g;
    inputs.queries = head_rows(queries, head, layer.query_norm, layer.all_query_squares);
    inputs.keys = head_keys[static_cast<std::size_t>(g)];
    inputs.W_Q = weights.W_Q.middleCols(head * d, d);
    inputs.W_K = weights.W_K.middleCols(g * d, d);
    inputs.b_Q = bias_of(weights.b_Q, head * d, d);
    inputs.b_K = bias_of(weights.b_K, g * d, d);
    if (values.size() != 0) inputs.values = values.middleCols(g * d_v, d_v);
    if (map) {
      const std::string where = fmt::format("layer {} head {}", layer_index, head);
      const theory::AttendedMask* attended = layer.attended ? &*layer.attended : nullptr;
      if (sink.keep_attention) {
        inputs.attention = apply_attention(*map, softmax_logits(layer, inputs, 0, -1, sink.float32_products),
                                           layer.causal, where, attended);
        context.middleCols(head * d_v, d_v) = forward_product(inputs.attention, inputs.values, sink.float32_products);
      } else {
        const Index block_rows = std::max<Index>(1, sink.query_row_block);
        // Mixed precision takes a softmax over every key or a causal prefix in float32, as the products are;
        // masks of other shapes and other activations stay in double.
        const bool float32_softmax =
            sink.float32_products && map->activation.kind == theory::ActivationKind::softmax && !attended;
        const FloatMatrix float_values =
            float32_softmax ? rounded_to_float32(inputs.values, SummedAlong::columns) : FloatMatrix();
        for (Index first = 0; first < n; first += block_rows) {
          const Index rows = std::min(block_rows, n - first);
          const Matrix logits = softmax_logits(layer, inputs, first, rows, sink.float32_products);
          if (float32_softmax) {
            require_finite_scores(logits, where);
            FloatMatrix probabilities = rounded_to_float32(logits, SummedAlong::neither);
            float_kernels::softmax_rows(probabilities.data(), rows, n, first, layer.causal);
            context.block(first, head * d_v, rows, d_v) = float32_product(probabilities, float_values);
            continue;
          }
          const Matrix block = apply_attention_rows(*map, logits, first, layer.causal, where, attended);
          context.block(first, head * d_v, rows, d_v) = forward_product(block, inputs.values, sink.float32_products);
        }
      }
    }
    layer.heads.push_back(std::move(inputs));
  }
  return context;
}

Matrix layer_norm(const Matrix& x, const Vector& gain, const Vector& bias, double eps) {
  Matrix out(x.rows(), x.cols());
  for (Index i = 0; i < x.rows(); ++i) {
    const double mean = x.row(i).mean();
    const double variance = (x.row(i).array() - mean).square().mean();
    out.row(i) = ((x.row(i).array() - mean) / std::sqrt(variance + eps)).matrix();
  }
  out.array().rowwise() *= gain.transpose().array();
  out.rowwise() += bias.transpose();
  return out;
}

Matrix rms_norm(const Matrix& x, const Vector& gain, double eps) { return theory::rms_normalized(x, gain, eps); }

Matrix softmax_logits(const LayerInputs& layer, const HeadInputs& head, Index first_row, Index rows,
                      bool float32_products) {
  if (rows < 0) rows = head.queries.rows() - first_row;
  Matrix scores =
      layer.inner * forward_product(head.queries.middleRows(first_row, rows), head.keys.transpose(), float32_products);
  if (layer.logit_softcap > 0) {
    const double cap = layer.logit_softcap;
    scores = scores.unaryExpr([cap](double s) { return cap * std::tanh(s / cap); });
  }
  return scores;
}

const theory::Rotary* rotary_of(const LayerInputs& layer, Index head) {
  if (!layer.head_rotary.empty()) return &layer.head_rotary.at(static_cast<std::size_t>(head));
  return layer.rotary ? &*layer.rotary : nullptr;
}

bool spans_all_heads(const HeadNorm& norm, Index d) { return norm.gain.size() != d; }

theory::ScoreMaps score_maps(const LayerInputs& layer, const HeadInputs& head, HeadMapStorage& storage, bool key_gram) {
  const auto raw = [&](const Matrix& W, const Vector& b) {
    Matrix y = layer.X * W;
    if (b.size() != 0) y.rowwise() += b.transpose();
    return y;
  };
  const Index d = head.W_Q.cols();
  if (layer.query_norm) storage.raw_queries = raw(head.W_Q, head.b_Q);
  if (layer.key_norm) storage.raw_keys = raw(head.W_K, head.b_K);
  theory::ScoreMaps maps{rotary_of(layer, head.head),
                         layer.query_norm ? &*layer.query_norm : nullptr,
                         layer.key_norm ? &*layer.key_norm : nullptr,
                         &storage.raw_queries,
                         &storage.raw_keys,
                         layer.logit_softcap};
  if (layer.query_norm && spans_all_heads(*layer.query_norm, d)) {
    storage.query_slice = slice_of(*layer.query_norm, head.head, storage.raw_queries, layer.all_query_squares);
    maps.query_norm = &storage.query_slice.norm;
    maps.query_others = &storage.query_slice.others;
  }
  if (layer.key_norm && spans_all_heads(*layer.key_norm, d)) {
    storage.key_slice = slice_of(*layer.key_norm, head.kv_head, storage.raw_keys, layer.all_key_squares);
    if (key_gram) {
      storage.key_slice.others.gram = layer.all_key_gram;
      storage.key_slice.others.gram.noalias() -= storage.raw_keys * storage.raw_keys.transpose();
    }
    maps.key_norm = &storage.key_slice.norm;
    maps.key_others = &storage.key_slice.others;
  }
  return maps;
}

namespace {

// "bert, gpt2, ...": what a refusal offers instead.
std::string supported(std::vector<std::string_view> detail::FamilyAdapter::*names) {
  std::string list;
  for (const detail::FamilyAdapter* family : detail::family_adapters()) {
    for (const std::string_view name : family->*names) list += fmt::format("{}{}", list.empty() ? "" : ", ", name);
  }
  return list;
}

const detail::FamilyAdapter* family_reading(std::vector<std::string_view> detail::FamilyAdapter::*names,
                                            std::string_view name) {
  for (const detail::FamilyAdapter* family : detail::family_adapters()) {
    if (std::find((family->*names).begin(), (family->*names).end(), name) != (family->*names).end()) return family;
  }
  return nullptr;
}

}  // namespace

ModelConfig read_model_config(const fs::path& config_json, const Checkpoint& checkpoint) {
  const nlohmann::json config = records::read_json_file(config_json);
  if (!config.is_object()) throw InputError(fmt::format("{}: not a JSON object", config_json.string()));
  const std::string type = value_or<std::string>(config, "model_type", "", config_json);
  const detail::FamilyAdapter* family = family_reading(&detail::FamilyAdapter::model_types, type);
  if (!family) {
    throw InputError(fmt::format("{}: model_type '{}' is not supported ({})", config_json.string(), type,
                                 supported(&detail::FamilyAdapter::model_types)));
  }
  ModelConfig out = family->config_from_json(config, config_json, checkpoint);
  out.family = family;
  if (out.head_size == 0 && out.hidden % out.heads != 0) {
    throw InputError(fmt::format("{}: hidden size {} is not a multiple of the {} heads", config_json.string(),
                                 out.hidden, out.heads));
  }
  out.attention_activation = value_or<std::string>(config, "attention_activation", "softmax", config_json);
  trained_attention_map(out.attention_activation, 1);  // refuses unknown names here, naming them
  return out;
}

namespace {

ModelConfig read_gguf_config(const GgufHeader& header, const Checkpoint& checkpoint) {
  const std::string& architecture = header.string("general.architecture");
  const detail::FamilyAdapter* family = family_reading(&detail::FamilyAdapter::gguf_architectures, architecture);
  if (!family) {
    throw InputError(fmt::format("{}: general.architecture '{}' is not supported ({})", header.source, architecture,
                                 supported(&detail::FamilyAdapter::gguf_architectures)));
  }
  ModelConfig out = family->config_from_gguf(header, checkpoint);
  out.family = family;
  return out;
}

}  // namespace

TransformerModel TransformerModel::load(const fs::path& model) {
  Checkpoint checkpoint = Checkpoint::open(model);
  ModelConfig config = checkpoint.gguf() ? read_gguf_config(checkpoint.gguf()->header(), checkpoint)
                                         : read_model_config(config_path_for(model), checkpoint);
  return TransformerModel(std::move(checkpoint), std::move(config));
}

double TransformerModel::token_embedding_rms() const {
  return checkpoint_.root_mean_square(config_.family->embedding_scale_tensor(config_));
}

Matrix TransformerModel::embed_pixels(const Pixels& pixels) const {
  if (!config_.family->embed_pixels) {
    throw InputError(
        fmt::format("{} takes tokens, not pixels: use --text, --tokens or --random", architecture_name(config_)));
  }
  return config_.family->embed_pixels(checkpoint_, config_, pixels);
}

Matrix TransformerModel::embed_tokens(std::span<const std::int64_t> ids) const {
  if (!config_.family->embed_tokens) {
    throw InputError(
        fmt::format("{} takes images, not tokens: use --pixels, --image or --random", architecture_name(config_)));
  }
  const auto n = static_cast<std::int64_t>(ids.size());
  if (n == 0) throw InputError("the input has no tokens");
  if (n > config_.max_positions) {
    throw InputError(
        fmt::format("the input has {} tokens, more than the model's {} positions", n, config_.max_positions));
  }
  for (std::int64_t k = 0; k < n; ++k) {
    if (ids[k] < 0 || ids[k] >= config_.vocab) {
      throw InputError(
          fmt::format("token id {} at position {} is outside the vocabulary of {}", ids[k], k, config_.vocab));
    }
  }
  return config_.family->embed_tokens(checkpoint_, config_, ids);
}

std::vector<LayerInputs> TransformerModel::forward_pixels(const Pixels& pixels, const std::vector<int>& layers) const {
  return forward_embeddings(embed_pixels(pixels), layers);
}

std::vector<LayerInputs> TransformerModel::forward(std::span<const std::int64_t> ids,
                                                   const std::vector<int>& layers) const {
  return forward_embeddings(embed_tokens(ids), layers);
}

void TransformerModel::require_memory_for(std::int64_t positions, const std::vector<int>& layers, bool keep_layers,
                                          int measuring_threads, bool cross_norm) const {
  using records::saturating_product;
  using records::saturating_sum;
  const auto u = [](std::int64_t v) { return static_cast<std::uint64_t>(std::max<std::int64_t>(v, 0)); };
  const std::uint64_t n = u(positions), D = u(config_.hidden), H = u(config_.heads), G = u(config_.key_value_heads()),
                      d = u(config_.head_dim()), I = u(config_.intermediate), threads = u(measuring_threads);
  // Layers past the model's are refused elsewhere, by name.
  const std::uint64_t kept =
      std::min(u(config_.layers), layers.empty()
                                      ? u(config_.layers)
                                      : u(std::int64_t{*std::max_element(layers.begin(), layers.end())} + 1));
  // The layer being computed, in doubles: its weights dequantized (query, key, value and output projections, a gated
  // MLP), the hidden rows and their norms, the projections and each head's copies of its queries, keys and values,
  // the context and the MLP's rows.
  const std::uint64_t weights =
      saturating_sum({saturating_product({D, saturating_sum({2 * H * d, 2 * G * d})}), saturating_product({3, D, I})});
  const std::uint64_t activations = saturating_product({n, saturating_sum({6 * D, 5 * H * d, 3 * G * d, 3 * I})});
  // Each measuring thread: a block of score rows or its row-by-row scratch, the attended keys' rows, and with the
  // cross-normalization what-if the head's N x N softmax attention and its scores.
  const std::uint64_t block = std::min<std::uint64_t>(n, static_cast<std::uint64_t>(kQueryRowBlock));
  // Under query/key norms or a logit cap each query row forms an N x N kernel and a product of that size.
  const bool general_rows = config_.family->normalizes_heads || config_.logit_softcap > 0;
  const std::uint64_t per_thread = saturating_sum(
      {saturating_product({3, block, n}), saturating_product({n, saturating_sum({D, 4 * d, 8})}),
       cross_norm ? saturating_product({3, n, n}) : 0, general_rows ? saturating_product({2, n, n}) : 0});
  // Layer-wide and shared: the Gram matrix of the layer's rows (rotary keys) and a sliding window's mask (bytes).
  const std::uint64_t gram = config_.family->rotates_keys ? saturating_product({n, n}) : 0;
  const std::uint64_t window =
      config_.sliding_window > 0 && u(config_.sliding_window) < n ? saturating_product({n, n}) / sizeof(double) : 0;
  std::uint64_t total = saturating_sum(
      {weights, activations, saturating_product({threads, per_thread}), gram, window, saturating_product({n, D})});
  if (keep_layers) {
    // Every kept layer: its input rows, and per head the projections, the weight slices and the N x N attention.
    const std::uint64_t per_layer = saturating_sum(
        {saturating_product({n, D}),
         saturating_product({H, saturating_sum({saturating_product({n, n}), saturating_product({3, n, d}),
                                                saturating_product({2, D, d}), 2 * d})})});
    total = saturating_sum({total, saturating_product({kept, per_layer})});
  }
  records::require_memory(
      saturating_product({sizeof(double), total}),
      keep_layers
          ? fmt::format("a forward pass over {} positions keeping {} layers of {} heads (D = {})", n, kept, H, D)
          : fmt::format("a probe over {} positions, one layer of {} heads (D = {}) at a time, {} measuring "
                        "thread{}",
                        n, H, D, threads, threads == 1 ? "" : "s"),
      keep_layers ? "; use fewer positions or --layers" : "; use fewer positions or --threads");
}

void TransformerModel::forward_embeddings(Matrix h, const std::vector<int>& layers, const LayerSink& sink) const {
  if (h.cols() != config_.hidden) {
    throw InputError(fmt::format("embeddings have {} columns, the model {}", h.cols(), config_.hidden));
  }
  std::int64_t last = config_.layers - 1;
  if (!layers.empty()) {
    for (int layer : layers) {
      if (layer < 0 || layer >= config_.layers) {
        throw InputError(fmt::format("layer {} does not exist: the model has layers 0..{}", layer, config_.layers - 1));
      }
    }
    last = *std::max_element(layers.begin(), layers.end());
  }
  require_memory_for(h.rows(), layers, sink.keep_attention);
  config_.family->forward(checkpoint_, config_, std::move(h), last, sink);
}

std::vector<LayerInputs> TransformerModel::forward_embeddings(Matrix h, const std::vector<int>& layers) const {
  std::vector<LayerInputs> kept;
  forward_embeddings(std::move(h), layers,
                     {[&](LayerInputs& layer, std::int64_t) { kept.push_back(std::move(layer)); }, true});
  return kept;
}

}  // namespace attncheck::probes
