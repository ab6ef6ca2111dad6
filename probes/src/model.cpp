#include "attncheck/probes/model.hpp"

#include "adapters.hpp"
#include "attncheck/records/input_file.hpp"
#include "attncheck/records/json_input.hpp"
#include "attncheck/records/memory_budget.hpp"
#include "attncheck/theory/pointwise.hpp"
#include "attncheck/theory/softmax.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <limits>

namespace attncheck::probes {

namespace fs = std::filesystem;
using detail::value_or;
using theory::Index;

std::string_view architecture_name(Architecture architecture) {
  switch (architecture) {
    case Architecture::bert: return "BERT";
    case Architecture::gpt2: return "GPT-2";
    case Architecture::llama: return "Llama";
    case Architecture::vit: return "ViT";
    case Architecture::dinov2: return "DINOv2";
  }
  return "?";
}

bool is_vision(Architecture architecture) {
  return architecture == Architecture::vit || architecture == Architecture::dinov2;
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
  return value.get<std::int64_t>();
}

std::int64_t detail::positive_int_or(const nlohmann::json& config, const char* key, std::int64_t fallback,
                                     const fs::path& file) {
  return !config.contains(key) || config[key].is_null() ? fallback : positive_int(config, key, file);
}

double detail::checked_number(double value, double min, bool above, const std::string& source, std::string_view key) {
  if (!std::isfinite(value) || value < min || (above && value == min)) {
    throw InputError(
        fmt::format("{}: \"{}\" is {}: it must be a finite number {} {}", source, key, value, above ? ">" : ">=", min));
  }
  return value;
}

using detail::checked_number;
using detail::positive_int;
using detail::positive_int_or;

Matrix detail::project(const Checkpoint& checkpoint, const Matrix& x, const std::string& name, std::int64_t out) {
  Matrix y = x * checkpoint.matrix(name + ".weight", out, x.cols()).transpose();
  if (checkpoint.contains(name + ".bias")) y.rowwise() += checkpoint.vector(name + ".bias", out).transpose();
  return y;
}

Vector detail::bias_or_zero(const Checkpoint& checkpoint, const std::string& name, std::int64_t length) {
  return checkpoint.contains(name + ".bias") ? checkpoint.vector(name + ".bias", length) : Vector::Zero(length);
}

namespace {

double gelu_tanh(double x) {
  constexpr double kSqrt2OverPi = 0.79788456080286535588;
  return 0.5 * x * (1.0 + std::tanh(kSqrt2OverPi * (x + 0.044715 * x * x * x)));
}

}  // namespace

void detail::apply_hidden_activation(Matrix& m, const std::string& act) {
  if (act == "gelu") {
    m = m.unaryExpr([](double x) { return theory::pointwise_value(theory::Pointwise::gelu, 1, x); });
  } else if (act == "gelu_new" || act == "gelu_pytorch_tanh") {
    m = m.unaryExpr(&gelu_tanh);
  } else if (act == "relu") {
    m = m.cwiseMax(0.0);
  } else {
    throw InputError(fmt::format("hidden activation '{}' is not supported (gelu, gelu_new, relu)", act));
  }
}

namespace {
using detail::apply_hidden_activation;

// y = x W^T + b for nn.Linear weights stored [out, in].
Matrix linear(const Matrix& x, const Matrix& weight_out_in, const Vector& bias) {
  Matrix y = x * weight_out_in.transpose();
  y.rowwise() += bias.transpose();
  return y;
}

}  // namespace

Matrix apply_attention(const theory::AttentionMap& map, const Matrix& scores, bool causal, std::string_view where) {
  // Said here, where the cause is known: the softmax would only see a NaN logit.
  if (!scores.allFinite()) {
    throw InputError(
        fmt::format("{}: the attention scores are not finite: the activations overflowed double "
                    "precision (an input or weights far too large)",
                    where));
  }
  const Index n = scores.rows();
  Matrix out = Matrix::Zero(n, n);
  const double c = map.outer.at(n);
  for (Index i = 0; i < n; ++i) {
    const Index visible = causal ? i + 1 : n;
    if (map.activation.kind == theory::ActivationKind::softmax) {
      theory::softmax_row({scores.row(i).data(), static_cast<std::size_t>(visible)},
                          {out.row(i).data(), static_cast<std::size_t>(visible)}, i);
    } else {
      for (Index j = 0; j < visible; ++j) {
        out(i, j) = c * theory::pointwise_value(map.activation.h, map.activation.p, scores(i, j));
      }
    }
  }
  return out;
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

Matrix rms_norm(const Matrix& x, const Vector& gain, double eps) {
  Matrix out(x.rows(), x.cols());
  for (Index i = 0; i < x.rows(); ++i)
    out.row(i) = x.row(i) / std::sqrt(x.row(i).squaredNorm() / static_cast<double>(x.cols()) + eps);
  out.array().rowwise() *= gain.transpose().array();
  return out;
}

ModelConfig read_model_config(const fs::path& config_json, const Checkpoint& checkpoint) {
  const nlohmann::json config = records::read_json_file(config_json);
  if (!config.is_object()) throw InputError(fmt::format("{}: not a JSON object", config_json.string()));
  ModelConfig out;
  const std::string type = value_or<std::string>(config, "model_type", "", config_json);
  if (type == "bert") {
    out.architecture = Architecture::bert;
    out.hidden = positive_int(config, "hidden_size", config_json);
    out.heads = positive_int(config, "num_attention_heads", config_json);
    out.layers = positive_int(config, "num_hidden_layers", config_json);
    out.intermediate = positive_int(config, "intermediate_size", config_json);
    out.vocab = positive_int(config, "vocab_size", config_json);
    out.max_positions = positive_int(config, "max_position_embeddings", config_json);
    out.type_vocab = positive_int_or(config, "type_vocab_size", 2, config_json);
    out.layer_norm_eps = checked_number(value_or<double>(config, "layer_norm_eps", 1e-12, config_json), 0, false,
                                        config_json.string(), "layer_norm_eps");
    out.hidden_act = value_or<std::string>(config, "hidden_act", "gelu", config_json);
    const std::string position = value_or<std::string>(config, "position_embedding_type", "absolute", config_json);
    if (position != "absolute") {
      throw InputError(
          fmt::format("{}: position_embedding_type '{}' is not supported (absolute)", config_json.string(), position));
    }
    for (const char* prefix : {"", "bert."}) {
      if (checkpoint.contains(std::string(prefix) + "embeddings.word_embeddings.weight")) out.tensor_prefix = prefix;
    }
    // Checkpoints saved by older code name the LayerNorm parameters gamma and beta.
    if (checkpoint.contains(out.tensor_prefix + "embeddings.LayerNorm.gamma")) {
      out.norm_gain = "gamma";
      out.norm_bias = "beta";
    }
  } else if (type == "gpt2") {
    out.architecture = Architecture::gpt2;
    out.hidden = positive_int(config, "n_embd", config_json);
    out.heads = positive_int(config, "n_head", config_json);
    out.layers = positive_int(config, "n_layer", config_json);
    out.intermediate = positive_int_or(config, "n_inner", 4 * out.hidden, config_json);
    out.vocab = positive_int(config, "vocab_size", config_json);
    out.max_positions = positive_int(config, "n_positions", config_json);
    out.layer_norm_eps = checked_number(value_or<double>(config, "layer_norm_epsilon", 1e-5, config_json), 0, false,
                                        config_json.string(), "layer_norm_epsilon");
    out.hidden_act = value_or<std::string>(config, "activation_function", "gelu_new", config_json);
    out.scale_attn_weights = value_or<bool>(config, "scale_attn_weights", true, config_json);
    out.scale_by_inverse_layer_idx = value_or<bool>(config, "scale_attn_by_inverse_layer_idx", false, config_json);
    for (const char* prefix : {"", "transformer."}) {
      if (checkpoint.contains(std::string(prefix) + "wte.weight")) out.tensor_prefix = prefix;
    }
  } else if (type == "llama") {
    out = llama::config_from_json(config, config_json, checkpoint);
  } else if (type == "vit" || type == "dinov2") {
    out = vit::config_from_json(config, config_json, checkpoint);
  } else {
    throw InputError(fmt::format("{}: model_type '{}' is not supported (bert, gpt2, llama, vit, dinov2)",
                                 config_json.string(), type));
  }
  if (out.head_size == 0 && out.hidden % out.heads != 0) {
    throw InputError(fmt::format("{}: hidden size {} is not a multiple of the {} heads", config_json.string(),
                                 out.hidden, out.heads));
  }
  out.attention_activation = value_or<std::string>(config, "attention_activation", "softmax", config_json);
  trained_attention_map(out.attention_activation, 1);  // refuses unknown names here, naming them
  return out;
}

TransformerModel TransformerModel::load(const fs::path& model) {
  Checkpoint checkpoint = Checkpoint::open(model);
  ModelConfig config = checkpoint.gguf() ? llama::config_from_gguf(checkpoint.gguf()->header(), checkpoint)
                                         : read_model_config(config_path_for(model), checkpoint);
  return TransformerModel(std::move(checkpoint), std::move(config));
}

double TransformerModel::token_embedding_rms() const {
  switch (config_.architecture) {
    case Architecture::bert: return checkpoint_.root_mean_square(name("embeddings.word_embeddings.weight"));
    case Architecture::gpt2: return checkpoint_.root_mean_square(name("wte.weight"));
    case Architecture::llama: return checkpoint_.root_mean_square(llama::embedding_name(config_));
    case Architecture::vit:
    case Architecture::dinov2: return checkpoint_.root_mean_square(vit::position_embedding_name(config_));
  }
  return 0;
}

std::vector<LayerInputs> TransformerModel::forward_pixels(const Pixels& pixels, const std::vector<int>& layers) const {
  if (!is_vision(config_.architecture)) {
    throw InputError(fmt::format("{} takes tokens, not pixels: use --text, --tokens or --random",
                                 architecture_name(config_.architecture)));
  }
  return forward_embeddings(vit::embed(checkpoint_, config_, pixels), layers);
}

std::vector<LayerInputs> TransformerModel::forward(std::span<const std::int64_t> ids,
                                                   const std::vector<int>& layers) const {
  if (is_vision(config_.architecture)) {
    throw InputError(fmt::format("{} takes images, not tokens: use --pixels, --image or --random",
                                 architecture_name(config_.architecture)));
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
  std::vector<std::int64_t> positions(static_cast<std::size_t>(n));
  for (std::int64_t k = 0; k < n; ++k) positions[k] = k;
  const std::int64_t D = config_.hidden;
  Matrix embeddings;
  if (config_.architecture == Architecture::llama) {
    embeddings = checkpoint_.rows(llama::embedding_name(config_), ids, D);
  } else if (config_.architecture == Architecture::bert) {
    const std::vector<std::int64_t> types(static_cast<std::size_t>(n), 0);
    embeddings = checkpoint_.rows(name("embeddings.word_embeddings.weight"), ids, D) +
                 checkpoint_.rows(name("embeddings.position_embeddings.weight"), positions, D) +
                 checkpoint_.rows(name("embeddings.token_type_embeddings.weight"), types, D);
  } else {
    embeddings = checkpoint_.rows(name("wte.weight"), ids, D) + checkpoint_.rows(name("wpe.weight"), positions, D);
  }
  return forward_embeddings(std::move(embeddings), layers);
}

void TransformerModel::require_memory_for(std::int64_t positions, const std::vector<int>& layers) const {
  using records::saturating_product;
  using records::saturating_sum;
  const auto u = [](std::int64_t v) { return static_cast<std::uint64_t>(std::max<std::int64_t>(v, 0)); };
  const std::uint64_t n = u(positions), D = u(config_.hidden), H = u(config_.heads), d = u(config_.head_dim()),
                      I = u(config_.intermediate);
  // Layers past the model's are refused elsewhere, by name.
  const std::uint64_t kept =
      std::min(u(config_.layers), layers.empty()
                                      ? u(config_.layers)
                                      : u(std::int64_t{*std::max_element(layers.begin(), layers.end())} + 1));
  // Every kept layer: its input rows, and per head the projections, the weight slices and the N x N attention.
  const std::uint64_t per_layer =
      saturating_sum({saturating_product({n, D}),
                      saturating_product({H, saturating_sum({saturating_product({n, n}), saturating_product({3, n, d}),
                                                             saturating_product({2, D, d}), 2 * d})})});
  // The layer being computed: its projections, MLP rows and weights, and a few N x N score matrices at once.
  const std::uint64_t working =
      saturating_sum({saturating_product({n, saturating_sum({8 * D, 2 * I})}), saturating_product({4, D, D}),
                      saturating_product({2, D, I}), saturating_product({4, n, n})});
  records::require_memory(
      saturating_product({sizeof(double), saturating_sum({saturating_product({kept, per_layer}), working})}),
      fmt::format("a forward pass over {} positions keeping {} layers of {} heads (D = {})", n, kept, H, D),
      "; use fewer positions or --layers");
}

std::vector<LayerInputs> TransformerModel::forward_embeddings(Matrix h, const std::vector<int>& layers) const {
  const std::int64_t D = config_.hidden, H = config_.heads, d = config_.head_dim(), I = config_.intermediate;
  const Index n = h.rows();
  if (h.cols() != D) throw InputError(fmt::format("embeddings have {} columns, the model {}", h.cols(), D));
  require_memory_for(n, layers);
  const bool bert = config_.architecture == Architecture::bert;
  const double eps = config_.layer_norm_eps;
  std::int64_t last = config_.layers - 1;
  if (!layers.empty()) {
    for (int layer : layers) {
      if (layer < 0 || layer >= config_.layers) {
        throw InputError(fmt::format("layer {} does not exist: the model has layers 0..{}", layer, config_.layers - 1));
      }
    }
    last = *std::max_element(layers.begin(), layers.end());
  }
  if (config_.architecture == Architecture::llama) {
    if (n > config_.max_positions) {
      throw InputError(fmt::format("the input has {} positions, more than the model's {}", n, config_.max_positions));
    }
    return llama::forward(checkpoint_, config_, std::move(h), last);
  }
  if (is_vision(config_.architecture)) return vit::forward(checkpoint_, config_, std::move(h), last);
  if (bert) {
    h = layer_norm(h, checkpoint_.vector(name("embeddings.LayerNorm." + config_.norm_gain), D),
                   checkpoint_.vector(name("embeddings.LayerNorm." + config_.norm_bias), D), eps);
  }
  std::vector<LayerInputs> out;
  for (std::int64_t l = 0; l <= last; ++l) {
    LayerInputs layer;
    layer.causal = !bert;
    double inner = 1;
    if (bert || config_.scale_attn_weights) inner /= std::sqrt(static_cast<double>(d));
    if (!bert && config_.scale_by_inverse_layer_idx) inner /= static_cast<double>(l + 1);
    layer.inner = inner;
    // Weights as D x D' maps of rows (x -> x W), whatever the storage order.
    Matrix W_q, W_k, W_v, W_o;
    Vector b_q, b_k, b_v, b_o;
    if (bert) {
      const std::string p = fmt::format("encoder.layer.{}.", l);
      layer.X = h;
      W_q = checkpoint_.matrix(name(p + "attention.self.query.weight"), D, D).transpose();
      W_k = checkpoint_.matrix(name(p + "attention.self.key.weight"), D, D).transpose();
      W_v = checkpoint_.matrix(name(p + "attention.self.value.weight"), D, D).transpose();
      W_o = checkpoint_.matrix(name(p + "attention.output.dense.weight"), D, D).transpose();
      b_q = checkpoint_.vector(name(p + "attention.self.query.bias"), D);
      b_k = checkpoint_.vector(name(p + "attention.self.key.bias"), D);
      b_v = checkpoint_.vector(name(p + "attention.self.value.bias"), D);
      b_o = checkpoint_.vector(name(p + "attention.output.dense.bias"), D);
    } else {
      const std::string p = fmt::format("h.{}.", l);
      layer.X = layer_norm(h, checkpoint_.vector(name(p + "ln_1.weight"), D),
                           checkpoint_.vector(name(p + "ln_1.bias"), D), eps);
      const Matrix c_attn = checkpoint_.matrix(name(p + "attn.c_attn.weight"), D, 3 * D);
      const Vector c_attn_b = checkpoint_.vector(name(p + "attn.c_attn.bias"), 3 * D);
      W_q = c_attn.leftCols(D);
      W_k = c_attn.middleCols(D, D);
      W_v = c_attn.rightCols(D);
      b_q = c_attn_b.head(D);
      b_k = c_attn_b.segment(D, D);
      b_v = c_attn_b.tail(D);
      W_o = checkpoint_.matrix(name(p + "attn.c_proj.weight"), D, D);
      b_o = checkpoint_.vector(name(p + "attn.c_proj.bias"), D);
    }
    const auto project = [&](const Matrix& W, const Vector& b) {
      Matrix y = layer.X * W;
      y.rowwise() += b.transpose();
      return y;
    };
    const Matrix V_all = project(W_q, b_q), U_all = project(W_k, b_k), values = project(W_v, b_v);
    const theory::AttentionMap map = trained_attention_map(config_.attention_activation, inner);
    Matrix context(n, D);
    for (std::int64_t head = 0; head < H; ++head) {
      HeadInputs inputs;
      inputs.V = V_all.middleCols(head * d, d);
      inputs.U = U_all.middleCols(head * d, d);
      inputs.W_Q = W_q.middleCols(head * d, d);
      inputs.W_K = W_k.middleCols(head * d, d);
      inputs.b_Q = b_q.segment(head * d, d);
      inputs.b_K = b_k.segment(head * d, d);
      inputs.kv_head = head;
      inputs.attention = apply_attention(map, inner * (inputs.V * inputs.U.transpose()), layer.causal,
                                         fmt::format("layer {} head {}", l, head));
      inputs.values = values.middleCols(head * d, d);
      context.middleCols(head * d, d) = inputs.attention * inputs.values;
      layer.heads.push_back(std::move(inputs));
    }
    Matrix attended = context * W_o;
    attended.rowwise() += b_o.transpose();
    if (bert) {
      const std::string p = fmt::format("encoder.layer.{}.", l);
      const Matrix h1 =
          layer_norm(attended + h, checkpoint_.vector(name(p + "attention.output.LayerNorm." + config_.norm_gain), D),
                     checkpoint_.vector(name(p + "attention.output.LayerNorm." + config_.norm_bias), D), eps);
      Matrix inter = linear(h1, checkpoint_.matrix(name(p + "intermediate.dense.weight"), I, D),
                            checkpoint_.vector(name(p + "intermediate.dense.bias"), I));
      apply_hidden_activation(inter, config_.hidden_act);
      const Matrix mlp = linear(inter, checkpoint_.matrix(name(p + "output.dense.weight"), D, I),
                                checkpoint_.vector(name(p + "output.dense.bias"), D));
      h = layer_norm(mlp + h1, checkpoint_.vector(name(p + "output.LayerNorm." + config_.norm_gain), D),
                     checkpoint_.vector(name(p + "output.LayerNorm." + config_.norm_bias), D), eps);
    } else {
      const std::string p = fmt::format("h.{}.", l);
      h += attended;
      const Matrix m = layer_norm(h, checkpoint_.vector(name(p + "ln_2.weight"), D),
                                  checkpoint_.vector(name(p + "ln_2.bias"), D), eps);
      Matrix inter = m * checkpoint_.matrix(name(p + "mlp.c_fc.weight"), D, I);
      inter.rowwise() += checkpoint_.vector(name(p + "mlp.c_fc.bias"), I).transpose();
      apply_hidden_activation(inter, config_.hidden_act);
      Matrix mlp = inter * checkpoint_.matrix(name(p + "mlp.c_proj.weight"), I, D);
      mlp.rowwise() += checkpoint_.vector(name(p + "mlp.c_proj.bias"), D).transpose();
      h += mlp;
    }
    if (!h.allFinite()) {
      throw InputError(fmt::format("hidden states after layer {} are not finite (the activations overflowed)", l));
    }
    out.push_back(std::move(layer));
  }
  return out;
}

}  // namespace attncheck::probes
