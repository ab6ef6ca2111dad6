#include "attncheck/probes/live_metrics.hpp"

#include "adapters.hpp"
#include "attncheck/probes/image.hpp"
#include "attncheck/probes/tokenizer.hpp"
#include "attncheck/records/input_file.hpp"
#include "attncheck/records/json_input.hpp"
#include "attncheck/records/sha256.hpp"
#include "attncheck/streams/parallel.hpp"
#include "attncheck/streams/random_stream.hpp"
#include "attncheck/theory/bound_check.hpp"
#include "attncheck/theory/cross_norm.hpp"
#include "attncheck/theory/moments.hpp"
#include "attncheck/theory/vocabulary.hpp"
#include "attncheck/theory/softmax.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>
#include <cmath>
#include <limits>
#include <mutex>
#include <stdexcept>
#include <tuple>

namespace attncheck::probes {

namespace fs = std::filesystem;
using theory::ActivationKind;
using theory::AttentionMap;
using theory::Index;
using theory::Pointwise;

namespace {

// Rows per part of one head's norms. The parts are independent (theory::AttentionSquaredSums), so up to N / 64 threads
// share a head; a part starts at a multiple of the rotary key term's blocks, so the parts sum the same blocks.
constexpr Index kRowsPerPart = 8 * theory::kRotaryKeyBlockRows;
Index row_parts(Index rows) { return (rows + kRowsPerPart - 1) / kRowsPerPart; }

// The least work, counted as heads x N^2 x D (a head's norms take a few times N^2 D multiply-adds), that a layer's
// heads are measured in parallel for: milliseconds on one core, where starting a team of threads takes tens of
// microseconds on idle cores and a scheduler's time slice on busy ones.
constexpr double kParallelWork = 1 << 24;

// The parts are always the same rows and are added in order, so the norms have the same bits on any number of threads.
NormSet norms_of(const AttentionMap& map, const LayerInputs& layer, const HeadInputs& head, int threads) {
  Matrix own_gram;
  HeadMapStorage storage;
  theory::ScoreMaps maps = score_maps(layer, head, storage, map.activation.kind == ActivationKind::softmax);
  if (layer.gram.size() != 0) {
    maps.gram = &layer.gram;
  } else if (theory::key_term_reads_gram(map, maps)) {
    // Formed once here, not once per part.
    own_gram.noalias() = layer.X * layer.X.transpose();
    maps.gram = &own_gram;
  }
  const Index n = layer.X.rows(), parts = row_parts(n);
  std::vector<theory::AttentionSquaredSums> part_sums(static_cast<std::size_t>(parts));
  // No more threads than parts: a thread without one would only be started and waited for.
  streams::parallel_for(parts, static_cast<int>(std::min<Index>(threads, parts)), [&](Index k) {
    const theory::RowRange rows{k * kRowsPerPart, std::min(kRowsPerPart, n - k * kRowsPerPart)};
    part_sums[static_cast<std::size_t>(k)] =
        layer.attended ? theory::attention_row_sums_from_projections(map, layer.X, head.queries, head.keys,
                                                                     *layer.attended, maps, rows)
                       : theory::attention_row_sums_from_projections(map, layer.X, head.queries, head.keys,
                                                                     layer.causal, maps, rows);
  });
  theory::AttentionSquaredSums sums;
  for (const auto& part : part_sums) sums += part;
  const auto norms = theory::attention_norms_from_sums(map, n, sums);
  return {norms.value_fro, *norms.dS_fro, *norms.dQ_fro, *norms.dK_fro};
}

double softmax_key_derivative(const LayerInputs& layer, const HeadInputs& head, int threads) {
  return norms_of(AttentionMap{{ActivationKind::softmax, Pointwise::identity, 1}, layer.inner, {}}, layer, head,
                  threads)
      .dWk;
}

// A mask under causal attention: the entries j > i are masked too (LayerInputs::attended holds them so).
void keep_causal_part(theory::AttendedMask& mask) {
  for (Index i = 0; i < mask.rows(); ++i) mask.row(i).tail(mask.cols() - i - 1) = false;
}

bool is_attended(Index i, Index j, bool causal, const std::optional<theory::AttendedMask>& attended) {
  return attended ? (*attended)(i, j) : (!causal || j <= i);
}

struct ScoreStatistics {
  double mean = 0, std = 0, max_abs = 0, fro = 0;
};

struct ScoreSums {
  double sum = 0, sum_sq = 0, max_abs = 0;
  std::int64_t count = 0;
  // Rows first_row .. of the N x N scores, over their attended entries.
  void add(const Matrix& scores, Index first_row, bool causal, const std::optional<theory::AttendedMask>& attended) {
    for (Index r = 0; r < scores.rows(); ++r) {
      for (Index j = 0; j < scores.cols(); ++j) {
        if (!is_attended(first_row + r, j, causal, attended)) continue;
        const double s = scores(r, j);
        sum += s;
        sum_sq += s * s;
        max_abs = std::max(max_abs, std::abs(s));
        ++count;
      }
    }
  }
};

ScoreStatistics statistics_of(const ScoreSums& sums) {
  const auto [sum, sum_sq, max_abs, count] = sums;
  ScoreStatistics out;
  if (count == 0) return out;
  out.mean = sum / static_cast<double>(count);
  out.std = std::sqrt(std::max(0.0, sum_sq / static_cast<double>(count) - out.mean * out.mean));
  out.max_abs = max_abs;
  out.fro = std::sqrt(sum_sq);
  return out;
}

// Over the attended entries only.
ScoreStatistics score_statistics(const Matrix& scores, bool causal,
                                 const std::optional<theory::AttendedMask>& attended) {
  ScoreSums sums;
  sums.add(scores, 0, causal, attended);
  return statistics_of(sums);
}

// The statistics of S = inner queries keys^T, a block of query rows at a time: no N x N matrix is formed.
ScoreStatistics head_score_statistics(const LayerInputs& layer, const HeadInputs& head) {
  ScoreSums sums;
  const Index n = head.queries.rows();
  for (Index first = 0; first < n; first += kQueryRowBlock) {
    const Index rows = std::min(kQueryRowBlock, n - first);
    sums.add(layer.inner * (head.queries.middleRows(first, rows) * head.keys.transpose()), first, layer.causal,
             layer.attended);
  }
  return statistics_of(sums);
}

AttentionMap pointwise_map(Pointwise h, int p, double inner, theory::OuterScale outer) {
  AttentionMap map;
  map.activation = {ActivationKind::pointwise, h, p};
  map.inner = inner;
  map.outer = outer;
  return map;
}

// sqrt(E||c S^p||_F^2) over the attended entries: every entry for bidirectional attention, the lower
// triangle with the diagonal for causal attention, the mask's diagonal and off-diagonal entries otherwise
// (their moments differ).
double iid_root_mean_square(const theory::GaussianModel& model, Index n, int p, double outer, bool causal,
                            const std::optional<theory::AttendedMask>& attended) {
  if (!causal && !attended) return std::sqrt(theory::expected_poly_fro_sq(model, n, p, outer));
  const double nn = static_cast<double>(n);
  double diagonal = nn, off_diagonal = nn * (nn - 1) / 2;
  if (attended) {
    diagonal = static_cast<double>(attended->matrix().diagonal().count());
    off_diagonal = static_cast<double>(attended->count()) - diagonal;
  }
  const double off = theory::offdiagonal_abs_moment(model, 2.0 * p);
  const double diag = theory::diagonal_abs_moment(model, 2.0 * p);
  return outer * std::sqrt(off_diagonal * off + diagonal * diag);
}

// The activations probed beside the trained one, on the same scores: S/sqrt(N), S^3/sqrt(N), S^3, relu(S)/N.
AttentionMap linear_scaled_map(double inner) { return pointwise_map(Pointwise::identity, 1, inner, {1, 0.5}); }
AttentionMap poly3_scaled_map(double inner) { return pointwise_map(Pointwise::poly, 3, inner, {1, 0.5}); }
AttentionMap poly3_map(double inner) { return pointwise_map(Pointwise::poly, 3, inner, {1, 0}); }
AttentionMap relu_n_map(double inner) { return pointwise_map(Pointwise::relu, 1, inner, {1, 1}); }
AttentionMap softmax_map(double inner) {
  return AttentionMap{{ActivationKind::softmax, Pointwise::identity, 1}, inner, {}};
}

// Logits with the entries not attended (is_attended) at -inf: their softmax is the softmax attention under the mask.
Matrix masked_logits(Matrix logits, bool causal, const std::optional<theory::AttendedMask>& attended) {
  for (Index i = 0; i < logits.rows(); ++i) {
    for (Index j = 0; j < logits.cols(); ++j) {
      if (!is_attended(i, j, causal, attended)) logits(i, j) = -std::numeric_limits<double>::infinity();
    }
  }
  return logits;
}

// The softmax's logits masked as the head masks them: the softmax of these is the head's softmax attention, whatever
// activation it was trained with.
Matrix masked_softmax_logits(const LayerInputs& layer, const HeadInputs& head) {
  return masked_logits(softmax_logits(layer, head), layer.causal, layer.attended);
}

// Softmax on the head's scores whatever the trained activation: the what-if changes only what A multiplies.
Matrix softmax_attention(const LayerInputs& layer, const HeadInputs& head) {
  return theory::row_softmax(masked_softmax_logits(layer, head));
}

// The map of a what-if expression on a head of N rows and head size d, its scores scaled by `inner`.
AttentionMap what_if_map(const theory::PhiExpression& e, std::int64_t N, std::int64_t d, double inner) {
  return {theory::expression_activation(e.bind(static_cast<double>(N), static_cast<double>(d)), false), inner, {}};
}

void set_cross_norm(HeadMetrics& m, const LayerInputs& layer, const HeadInputs& head) {
  if (head.values.size() == 0) {
    throw InputError(
        fmt::format("layer {} head {}: the value projections are unknown, so the cross-normalization "
                    "what-if cannot be measured",
                    m.layer, m.head));
  }
  const Matrix attention = softmax_attention(layer, head);
  m.d_v = head.values.cols();
  for (const double mix : kCrossNormMixes) {
    const auto norms = theory::cross_norm_norms(attention, head.values, mix);
    m.cross_norm.push_back({mix, norms.output_fro, norms.grad_values_fro});
  }
  const auto bounds = theory::cross_norm_bounds(m.N, m.d_v);
  m.cross_norm_output_bound = bounds.output;
  m.cross_norm_grad_values_bound = bounds.grad_values;
}

void set_bounds(HeadMetrics& m) {
  const auto bounds = theory::softmax_bounds(m.N);
  m.sqrt_n = bounds.softmax_paper;
  m.grad_paper_bound = bounds.grad_paper;
  m.grad_tight_bound = bounds.grad_tight;
}

void set_score_statistics(HeadMetrics& m, const ScoreStatistics& statistics) {
  m.score_mean = statistics.mean;
  m.score_std = statistics.std;
  m.score_max_abs = statistics.max_abs;
  m.scores_fro = statistics.fro;
}

}  // namespace

std::vector<std::int64_t> tokenize_for_model(const fs::path& model_path, const TransformerModel& model,
                                             std::string_view text) {
  if (const GgufFile* gguf = model.checkpoint().gguf()) {
    const GgufHeader& header = gguf->header();
    if (header.find("tokenizer.ggml.model") && header.string("tokenizer.ggml.model") == "bert") {
      return WordPieceTokenizer::from_gguf(header).encode(text);
    }
    return ByteLevelBpeTokenizer::from_gguf(header).encode(text);
  }
  const fs::path folder = fs::is_directory(model_path) ? model_path : model_path.parent_path();
  if (fs::exists(folder / "vocab.txt")) {
    bool lower_case = true;
    const fs::path tokenizer_config = folder / "tokenizer_config.json";
    if (std::error_code absent; fs::exists(tokenizer_config, absent)) {
      const auto json = records::read_json_file(tokenizer_config);
      if (json.is_object() && json.contains("do_lower_case") && json["do_lower_case"].is_boolean()) {
        lower_case = json["do_lower_case"].get<bool>();
      }
    }
    return WordPieceTokenizer(folder / "vocab.txt", lower_case).encode(text);
  }
  if (fs::exists(folder / "vocab.json") && fs::exists(folder / "merges.txt")) {
    return ByteLevelBpeTokenizer::from_files(folder / "vocab.json", folder / "merges.txt").encode(text);
  }
  if (fs::exists(folder / "tokenizer.json")) return encode_with_tokenizer_json(folder / "tokenizer.json", text);
  throw InputError(
      fmt::format("{}: no tokenizer for --text (vocab.txt, vocab.json with merges.txt, or "
                  "tokenizer.json); pass the ids with --tokens FILE",
                  folder.string()));
}

std::vector<std::string> token_strings_for_model(const fs::path& model_path, const TransformerModel& model,
                                                 std::span<const std::int64_t> ids) {
  std::vector<std::string> by_id;
  if (const GgufFile* gguf = model.checkpoint().gguf()) {
    if (gguf->header().find("tokenizer.ggml.tokens")) by_id = gguf->header().strings("tokenizer.ggml.tokens");
  } else {
    // The strings only label the ids: a vocabulary that cannot be read leaves them unlabelled.
    try {
      by_id = vocabulary_strings(fs::is_directory(model_path) ? model_path : model_path.parent_path());
    } catch (const InputError&) {
      by_id.clear();
    }
  }
  if (by_id.empty()) return {};
  std::vector<std::string> strings;
  for (std::int64_t id : ids) {
    strings.push_back(id >= 0 && static_cast<std::size_t>(id) < by_id.size() ? by_id[static_cast<std::size_t>(id)]
                                                                             : std::string());
  }
  return strings;
}

void set_group_key_derivatives(const LayerInputs& layer, std::span<HeadMetrics> heads, int threads) {
  for (auto& metrics : heads) {
    double sum = 0;
    for (std::size_t h = 0; h < layer.heads.size(); ++h) {
      if (layer.heads[h].kv_head != metrics.kv_head) continue;
      const auto it =
          std::find_if(heads.begin(), heads.end(), [&](const HeadMetrics& m) { return m.head == static_cast<int>(h); });
      const double dWk = it != heads.end() ? it->softmax.dWk : softmax_key_derivative(layer, layer.heads[h], threads);
      sum += dWk * dWk;
    }
    metrics.dWk_group = std::sqrt(sum);
  }
}

HeadMetrics measure_head(const LayerInputs& layer, int layer_index, int head_index, bool cross_norm,
                         int requested_threads, std::span<const theory::PhiExpression> what_if) {
  const int threads = streams::thread_count(requested_threads);
  const HeadInputs& head = layer.heads.at(static_cast<std::size_t>(head_index));
  HeadMetrics m;
  m.layer = layer_index;
  m.head = head_index;
  m.N = layer.X.rows();
  m.D = layer.X.cols();
  m.d = head.queries.cols();
  m.causal = layer.causal;
  m.inner = layer.inner;
  m.kv_head = head.kv_head;
  const double lambda = layer.inner;
  m.softmax = norms_of(softmax_map(lambda), layer, head, threads);
  set_bounds(m);
  set_score_statistics(m, head_score_statistics(layer, head));
  m.softmax_entropy = theory::mean_softmax_row_entropy(masked_softmax_logits(layer, head));

  m.linear_scaled = norms_of(linear_scaled_map(lambda), layer, head, threads);
  m.poly3_scaled = norms_of(poly3_scaled_map(lambda), layer, head, threads);
  m.poly3 = norms_of(poly3_map(lambda), layer, head, threads);
  m.relu_n = norms_of(relu_n_map(lambda), layer, head, threads);
  for (const theory::PhiExpression& e : what_if) {
    m.what_if.emplace_back(e.text(), norms_of(what_if_map(e, m.N, m.d, lambda), layer, head, threads));
  }

  m.sigma_x = std::sqrt(layer.X.squaredNorm() / static_cast<double>(layer.X.size()));
  m.sigma_t = std::sqrt((head.W_Q.squaredNorm() + head.W_K.squaredNorm()) /
                        static_cast<double>(head.W_Q.size() + head.W_K.size()));
  const theory::GaussianModel model{m.D, m.d, m.sigma_x, m.sigma_t, lambda};
  m.iid_scores_fro = iid_root_mean_square(model, m.N, 1, 1.0, m.causal, layer.attended);
  m.iid_poly3_scaled_fro = iid_root_mean_square(model, m.N, 3, 1.0 / m.sqrt_n, m.causal, layer.attended);
  m.iid_poly3_fro = iid_root_mean_square(model, m.N, 3, 1.0, m.causal, layer.attended);
  if (cross_norm) set_cross_norm(m, layer, head);
  for (const auto& [name, value] : {std::pair<const char*, double>{"||softmax(S)||_F", m.softmax.value},
                                    {"||grad softmax(S)||_F", m.softmax.grad},
                                    {"||dA/dW_Q||_F", m.softmax.dWq},
                                    {"||dA/dW_K||_F", m.softmax.dWk}}) {
    if (!std::isfinite(value)) {
      throw InputError(
          fmt::format("layer {} head {}: {} is {} (scores up to |s| = {:.3g}: the weights overflow "
                      "double precision)",
                      layer_index, head_index, name, value, m.score_max_abs));
    }
  }
  return m;
}

HeadMetrics measure_scores(const Matrix& scores, int layer_index, int head_index, bool causal,
                           const std::optional<theory::AttendedMask>& attended,
                           std::span<const theory::PhiExpression> what_if, std::int64_t d) {
  if (scores.rows() != scores.cols()) {
    throw InputError(
        fmt::format("the scores are {}x{}: self-attention scores are N x N", scores.rows(), scores.cols()));
  }
  std::optional<theory::AttendedMask> mask = attended;
  if (causal) {
    if (!mask) mask = theory::AttendedMask::Constant(scores.rows(), scores.cols(), true);
    keep_causal_part(*mask);
  }
  const theory::AttendedMask* mask_or_all = mask ? &*mask : nullptr;
  const auto norms = [&](const AttentionMap& map) {
    const auto n = theory::score_map_norms(map, scores, mask_or_all);
    return NormSet{n.value_fro, *n.dS_fro, 0, 0};
  };
  HeadMetrics m;
  m.from_scores = true;
  m.layer = layer_index;
  m.head = head_index;
  m.N = scores.rows();
  m.causal = causal;
  m.softmax = norms(softmax_map(1));
  set_bounds(m);
  set_score_statistics(m, score_statistics(scores, causal, attended));
  m.softmax_entropy = theory::mean_softmax_row_entropy(masked_logits(scores, false, mask));  // causal in the mask
  m.linear_scaled = norms(linear_scaled_map(1));
  m.poly3_scaled = norms(poly3_scaled_map(1));
  m.poly3 = norms(poly3_map(1));
  m.relu_n = norms(relu_n_map(1));
  for (const theory::PhiExpression& e : what_if) {
    if (d == 0 && e.uses_head_size()) {
      throw InputError(fmt::format("what-if '{}' uses d, the head size, which the scores alone do not give", e.text()));
    }
    m.what_if.emplace_back(e.text(), norms(what_if_map(e, m.N, d, 1)));
  }
  return m;
}

LayerInputs split_heads(Matrix X, const Matrix& W_Q, const Matrix& W_K, const Vector& b_Q, const Vector& b_K, int heads,
                        double inner, bool causal, const Matrix& W_V, const Vector& b_V, HeadSplit split) {
  const Index D = X.cols();
  if (heads < 1) throw InputError(fmt::format("heads = {} must be >= 1", heads));
  const int kv_heads = split.kv_heads == 0 ? heads : split.kv_heads;
  if (kv_heads < 1 || heads % kv_heads != 0) {
    throw InputError(fmt::format("kv_heads = {} does not divide heads = {}", split.kv_heads, heads));
  }
  if (W_Q.cols() == 0 || W_Q.cols() % heads != 0) {
    throw InputError(fmt::format("w_q has {} columns, not a positive multiple of heads = {}", W_Q.cols(), heads));
  }
  if (W_Q.rows() != D || W_K.rows() != D || W_Q.cols() / heads * kv_heads != W_K.cols()) {
    throw InputError(
        fmt::format("shapes do not chain: x is {}x{}, w_q is {}x{}, w_k is {}x{} (need w_q of D x (heads d) and w_k "
                    "of D x (kv_heads d) with D = {}, heads = {}, kv_heads = {})",
                    X.rows(), D, W_Q.rows(), W_Q.cols(), W_K.rows(), W_K.cols(), D, heads, kv_heads));
  }
  for (const auto& [bias, weight, name] : {std::tuple{&b_Q, &W_Q, "b_q"}, std::tuple{&b_K, &W_K, "b_k"}}) {
    if (bias->size() != 0 && bias->size() != weight->cols()) {
      throw InputError(fmt::format("{} has {} entries, {} {} columns", name, bias->size(),
                                   weight == &W_Q ? "w_q" : "w_k", weight->cols()));
    }
  }
  const bool with_values = W_V.size() != 0;
  if (with_values && (W_V.rows() != D || W_V.cols() % kv_heads != 0)) {
    throw InputError(fmt::format("w_v is {}x{}: need D = {} rows and a multiple of kv_heads = {} columns", W_V.rows(),
                                 W_V.cols(), D, kv_heads));
  }
  if (b_V.size() != 0 && (!with_values || b_V.size() != W_V.cols())) {
    throw InputError(fmt::format("b_v has {} entries, w_v {} columns", b_V.size(), W_V.cols()));
  }
  const Index d = W_Q.cols() / heads;
  if (split.rotary && !split.head_rotary.empty()) {
    throw InputError("both one rotary embedding for the layer and one per head");
  }
  std::vector<const theory::Rotary*> rotations;
  if (split.rotary) rotations.push_back(&*split.rotary);
  for (const theory::Rotary& rotary : split.head_rotary) rotations.push_back(&rotary);
  for (const theory::Rotary* rotary : rotations) {
    if (rotary->dimension != d) {
      throw InputError(
          fmt::format("the rotary embedding rotates {} coordinates, the heads have d = {}", rotary->dimension, d));
    }
  }
  if (split.attended && (split.attended->rows() != X.rows() || split.attended->cols() != X.rows())) {
    throw InputError(fmt::format("the mask is {}x{}, the layer has N = {} positions", split.attended->rows(),
                                 split.attended->cols(), X.rows()));
  }
  LayerInputs layer;
  layer.X = std::move(X);
  layer.inner = inner;
  layer.causal = causal;
  if (!(split.logit_softcap >= 0) || !std::isfinite(split.logit_softcap))
    throw InputError(fmt::format("logit_softcap = {} is not a finite cap >= 0", split.logit_softcap));
  layer.rotary = std::move(split.rotary);
  layer.head_rotary = std::move(split.head_rotary);
  layer.query_norm = std::move(split.query_norm);
  layer.key_norm = std::move(split.key_norm);
  layer.logit_softcap = split.logit_softcap;
  if (split.attended) {
    if (causal) keep_causal_part(*split.attended);
    layer.attended = std::move(split.attended);
  }
  detail::fill_heads(layer, {W_Q, W_K, W_V, b_Q, b_K, b_V}, heads);
  return layer;
}

bool within_theorem_bounds(const HeadMetrics& m) {
  return theory::within(m.softmax.value, m.sqrt_n) && theory::within(m.softmax.grad, m.grad_tight_bound);
}

bool within_cross_norm_bounds(const HeadMetrics& m) {
  for (const auto& what_if : m.cross_norm) {
    if (what_if.mix != 1.0) continue;  // below mix 1 the norms grow with V: no bound to check
    return theory::within(what_if.output_fro, m.cross_norm_output_bound) &&
           theory::within(what_if.grad_values_fro, m.cross_norm_grad_values_bound);
  }
  return true;
}

records::ProbeHeadRecord head_record(const HeadMetrics& m) {
  records::ProbeHeadRecord r;
  r.layer = m.layer;
  r.head = m.head;
  r.N = m.N;
  r.causal = m.causal;
  r.from_scores = m.from_scores;
  r.D = m.D;
  r.d = m.d;
  r.kv_head = m.kv_head;
  r.inner = m.inner;
  r.dWk_group = m.dWk_group;
  r.sigma_x = m.sigma_x;
  r.sigma_t = m.sigma_t;
  r.iid_scores_fro = m.iid_scores_fro;
  r.iid_poly3_scaled_fro = m.iid_poly3_scaled_fro;
  r.iid_poly3_fro = m.iid_poly3_fro;
  const auto norms = [](const NormSet& n) { return records::ProbeNorms{n.value, n.grad, n.dWq, n.dWk}; };
  r.softmax = norms(m.softmax);
  r.sqrt_n = m.sqrt_n;
  r.softmax_over_sqrt_n = m.softmax.value / m.sqrt_n;
  r.grad_over_2sqrt_n = m.softmax.grad / m.grad_paper_bound;
  r.grad_over_half_sqrt_n = m.softmax.grad / m.grad_tight_bound;
  r.score_mean = m.score_mean;
  r.score_std = m.score_std;
  r.score_max_abs = m.score_max_abs;
  r.softmax_entropy = m.softmax_entropy;
  r.scores_fro = m.scores_fro;
  r.linear_scaled = norms(m.linear_scaled);
  r.poly3_scaled = norms(m.poly3_scaled);
  r.poly3 = norms(m.poly3);
  r.relu_n = norms(m.relu_n);
  if (!m.cross_norm.empty()) {
    records::ProbeCrossNorm cross{m.d_v, m.cross_norm_output_bound, m.cross_norm_grad_values_bound, {}};
    for (const auto& what_if : m.cross_norm)
      cross.mixes.push_back({what_if.mix, what_if.output_fro, what_if.grad_values_fro});
    r.cross_norm = std::move(cross);
  }
  for (const auto& [phi, set] : m.what_if) r.what_if.push_back({phi, norms(set)});
  return r;
}

nlohmann::json to_json(const HeadMetrics& metrics) { return records::to_json(head_record(metrics)); }

std::vector<std::string> csv_columns(bool cross_norm) { return records::probe_head_columns(cross_norm); }

std::vector<double> csv_values(const HeadMetrics& metrics) { return records::probe_head_values(head_record(metrics)); }

records::ProbePrecisionCheck precision_difference(const ProbeResult& exact, const ProbeResult& mixed) {
  if (exact.heads.size() != mixed.heads.size()) {
    throw std::invalid_argument("precision_difference: the two probes measured different heads");
  }
  records::ProbePrecisionCheck check{.largest = -1, .float_kernels = mixed.float_kernels};
  for (std::size_t k = 0; k < exact.heads.size(); ++k) {
    const std::vector<double> a = csv_values(exact.heads[k]), b = csv_values(mixed.heads[k]);
    const std::vector<std::string> columns = csv_columns(a.size() > csv_columns(false).size());
    for (std::size_t v = 0; v < a.size(); ++v) {
      const bool both_finite = std::isfinite(a[v]) && std::isfinite(b[v]);
      const bool same = a[v] == b[v] || (std::isnan(a[v]) && std::isnan(b[v]));
      const double difference = both_finite ? std::abs(b[v] - a[v]) / std::max(std::abs(a[v]), 1e-12)
                                            : (same ? 0.0 : std::numeric_limits<double>::infinity());
      if (difference > check.largest) {
        check.largest = difference;
        check.field = columns[v];
        check.layer = exact.heads[k].layer;
        check.head = exact.heads[k].head;
      }
      if (columns[v].ends_with("_fro")) check.largest_norm = std::max(check.largest_norm, difference);
    }
  }
  check.largest = std::max(check.largest, 0.0);
  return check;
}

ProbeResult probe_model(const fs::path& model_path, const ProbeInput& input, const std::vector<int>& layers,
                        const std::vector<int>& heads, bool keep_layers, bool cross_norm, const ProbeProgress& progress,
                        int threads, bool float32_products, std::span<const theory::PhiExpression> what_if) {
  const TransformerModel model = TransformerModel::load(model_path);
  ProbeResult result;
  result.config = model.config();
  if (!model.checkpoint().gguf()) {
    result.config_file = config_path_for(model_path);
    result.config_sha256 = records::sha256_hex(records::read_text_file(result.config_file));
  }
  for (int head : heads) {
    if (head < 0 || head >= model.config().heads) {
      throw InputError(
          fmt::format("head {} does not exist: the model has heads 0..{}", head, model.config().heads - 1));
    }
  }
  const bool vision = is_vision(model.config());
  if (vision && (input.kind == ProbeInput::Kind::text || input.kind == ProbeInput::Kind::tokens)) {
    throw InputError(fmt::format("{} takes images, not tokens: use --pixels, --image or --random",
                                 architecture_name(model.config())));
  }
  if (!vision && (input.kind == ProbeInput::Kind::pixels || input.kind == ProbeInput::Kind::image)) {
    throw InputError(fmt::format("{} takes tokens, not images: use --text, --tokens or --random",
                                 architecture_name(model.config())));
  }
  const auto selected = [](const std::vector<int>& chosen, int index) {
    return chosen.empty() || std::find(chosen.begin(), chosen.end(), index) != chosen.end();
  };
  std::vector<int> layer_heads;  // the heads measured in every selected layer, in order
  for (int head = 0; head < model.config().heads; ++head) {
    if (selected(heads, head)) layer_heads.push_back(head);
  }
  // One layer's selected heads at a time: no more threads than those measure at once.
  const int measuring_threads =
      std::min(streams::thread_count(threads), std::max(1, static_cast<int>(layer_heads.size())));
  const auto require_memory = [&](std::int64_t positions) {
    model.require_memory_for(positions, layers, keep_layers, measuring_threads, cross_norm);
  };
  Matrix embeddings;
  switch (input.kind) {
    case ProbeInput::Kind::pixels:
    case ProbeInput::Kind::image: {
      Pixels pixels;
      if (input.kind == ProbeInput::Kind::pixels) {
        pixels = read_pixels(input.pixels_file);
      } else {
        const ImagePreprocessing preprocessing = read_preprocessing(model_path, model.config());
        result.preprocessing = preprocessing.describe();
        pixels = preprocess_image(read_image(input.image_file), preprocessing);
      }
      result.image_height = pixels.height;
      result.image_width = pixels.width;
      const std::int64_t P = model.config().patch_size;
      require_memory(1 + (pixels.height / P) * (pixels.width / P));
      embeddings = model.embed_pixels(pixels);
      if (keep_layers) result.pixels = std::move(pixels);
      break;
    }
    case ProbeInput::Kind::text:
    case ProbeInput::Kind::tokens:
      result.ids = input.kind == ProbeInput::Kind::text ? tokenize_for_model(model_path, model, input.text)
                                                        : read_token_file(input.tokens_file);
      if (input.max_tokens >= 0) {
        if (static_cast<std::int64_t>(result.ids.size()) < input.max_tokens) {
          throw InputError(fmt::format("the input has {} tokens, fewer than the {} asked for with --length",
                                       result.ids.size(), input.max_tokens));
        }
        result.ids.resize(static_cast<std::size_t>(input.max_tokens));
      }
      embeddings = model.embed_tokens(result.ids);
      require_memory(embeddings.rows());
      result.token_strings = token_strings_for_model(model_path, model, result.ids);
      break;
    case ProbeInput::Kind::random: {
      if (input.random_length <= 0) {
        throw InputError(fmt::format("random input length {} is not positive", input.random_length));
      }
      // Text models have learned or rotary positions up to max_positions: beyond them the forward pass
      // would read past the position table (or extrapolate rotary angles the model never saw).
      std::int64_t length = input.random_length;
      if (!vision && !input.random_length_chosen) length = std::min(length, model.config().max_positions);
      if (!vision && length > model.config().max_positions) {
        throw InputError(
            fmt::format("--random --length {}: the input has {} positions, more than the model's {} "
                        "positions",
                        input.random_length, input.random_length, model.config().max_positions));
      }
      require_memory(length);
      result.random_length = length;
      result.random_sigma = model.token_embedding_rms();
      embeddings.resize(length, model.config().hidden);
      streams::PhiloxStream stream(input.seed, 0);
      stream.fill_normal(embeddings.data(), embeddings.data() + embeddings.size(), result.random_sigma);
      break;
    }
  }
  std::int64_t selected_layers = 0;
  for (std::int64_t l = 0; l < model.config().layers; ++l) selected_layers += selected(layers, static_cast<int>(l));
  const std::int64_t heads_total = selected_layers * static_cast<std::int64_t>(layer_heads.size());
  if (progress) progress(0, heads_total);
  std::int64_t heads_done = 0;
  std::mutex progress_mutex;
  const auto head_done = [&] {
    const std::lock_guard lock(progress_mutex);
    ++heads_done;
    if (progress) progress(heads_done, heads_total);
  };
  // Each layer is measured as soon as it is computed, then released (kept only for the attention dump).
  LayerSink sink;
  sink.keep_attention = keep_layers;
  sink.float32_products = result.float32_products = float32_products;
  if (float32_products) result.float_kernels = std::string(float_kernels::instruction_set());
  sink.receive = [&](LayerInputs& layer, std::int64_t index) {
    const int l = static_cast<int>(index);
    if (selected(layers, l)) {
      std::vector<HeadMetrics> measured = measure_layer(layer, l, layer_heads, cross_norm, threads, head_done, what_if);
      std::move(measured.begin(), measured.end(), std::back_inserter(result.heads));
    }
    if (keep_layers) result.layers.push_back(std::move(layer));
  };
  model.forward_embeddings(std::move(embeddings), layers, sink);
  return result;
}

std::vector<HeadMetrics> measure_layer(LayerInputs& layer, int layer_index, const std::vector<int>& heads,
                                       bool cross_norm, int threads, const std::function<void()>& head_done,
                                       std::span<const theory::PhiExpression> what_if) {
  // Softmax's dA/dW_K under rotary keys reads X X^T: once for the layer rather than once per head.
  const bool shares_gram = (layer.rotary || !layer.head_rotary.empty()) && layer.gram.size() == 0;
  if (shares_gram) layer.gram.noalias() = layer.X * layer.X.transpose();
  // The heads in parallel, or one head at a time with its parts of rows in parallel where there are more of those
  // (`--heads 0` on every core); never more threads than heads or parts. A layer with less work than kParallelWork
  // runs on the calling thread: a team of threads woken for it costs more than it saves (2,000 lines of a few tokens
  // of a tiny model took 16 times as long on 2 busy cores as on one thread).
  const Index n = layer.X.rows();
  const double work =
      static_cast<double>(heads.size()) * static_cast<double>(n * n) * static_cast<double>(layer.X.cols());
  const int thread_total = work < kParallelWork ? 1 : streams::thread_count(threads);
  const auto head_work = static_cast<int>(std::min<Index>(thread_total, static_cast<Index>(heads.size())));
  const auto row_work = static_cast<int>(std::min<Index>(thread_total, row_parts(n)));
  const bool rows_in_parallel = row_work > head_work;
  const int head_threads = rows_in_parallel ? 1 : std::max(1, head_work), row_threads = rows_in_parallel ? row_work : 1;
  std::vector<HeadMetrics> measured(heads.size());
  streams::parallel_for(static_cast<Index>(heads.size()), head_threads, [&](Index k) {
    measured[static_cast<std::size_t>(k)] =
        measure_head(layer, layer_index, heads[static_cast<std::size_t>(k)], cross_norm, row_threads, what_if);
    if (head_done) head_done();
  });
  // Grouped keys: a key head's derivative sums over the query heads that share it, once all are measured.
  set_group_key_derivatives(layer, measured, thread_total);
  if (shares_gram) layer.gram = Matrix();
  return measured;
}

void write_attention(const fs::path& path, const ProbeResult& result) {
  std::vector<NamedTensor> tensors;
  for (std::size_t l = 0; l < result.layers.size(); ++l) {
    const auto& layer = result.layers[l];
    const auto n = layer.X.rows();
    NamedTensor tensor{fmt::format("layer.{}", l),
                       {static_cast<std::int64_t>(layer.heads.size()), n, n},
                       {},
                       DType::F64};
    for (const auto& head : layer.heads) {
      tensor.values.insert(tensor.values.end(), head.attention.data(), head.attention.data() + head.attention.size());
    }
    tensors.push_back(std::move(tensor));
    tensors.push_back({fmt::format("inputs.{}", l),
                       {static_cast<std::int64_t>(layer.X.rows()), static_cast<std::int64_t>(layer.X.cols())},
                       std::vector<double>(layer.X.data(), layer.X.data() + layer.X.size()),
                       DType::F64});
  }
  if (!result.ids.empty()) {
    tensors.push_back({"input_ids",
                       {static_cast<std::int64_t>(result.ids.size())},
                       std::vector<double>(result.ids.begin(), result.ids.end()),
                       DType::I64});
  }
  if (!result.pixels.values.empty()) {
    tensors.push_back({"pixel_values",
                       {result.pixels.channels, result.pixels.height, result.pixels.width},
                       result.pixels.values,
                       DType::F64});
  }
  write_safetensors(path, tensors);
}

}  // namespace attncheck::probes
