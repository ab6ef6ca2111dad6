#pragma once
// Live per-head attention norms of a checkpoint against the theory's bounds, the alternative activations on
// the same scores, and the i.i.d. Gaussian model's exact prediction for the layer.

#include "attncheck/probes/model.hpp"
#include "attncheck/records/probe_record.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace attncheck::probes {

// ||F||_F, ||dF/dS||_F, ||dF/dW_Q||_F, ||dF/dW_K||_F of one activation on the head's scores S = inner V U^T
// (derivatives in the weights through the biases, the query/key norms and the rotation; softmax takes the
// layer's soft-capped logits when it caps them, dF/dS then being its Jacobian in those logits, while the
// elementwise maps take S itself).
struct NormSet {
  double value = 0, grad = 0, dWq = 0, dWk = 0;
};

// ||O||_F and ||dO/dV||_F (the N d_v x N d_v Jacobian in the values) of O = A P_mix for one mix.
struct CrossNormWhatIf {
  double mix = 0;
  double output_fro = 0, grad_values_fro = 0;
};
using records::kCrossNormMixes;

struct HeadMetrics {
  int layer = 0, head = 0;
  std::int64_t N = 0;  // attended positions (causal: the keys the last query sees)
  std::int64_t D = 0, d = 0;
  bool causal = false;
  double inner = 1;          // lambda in S = lambda V U^T
  std::int64_t kv_head = 0;  // the key head this query head shares (grouped-query attention), else itself
  NormSet softmax;
  // ||d(A_h)_h / dW_K||_F over the query heads h sharing this head's key weights: the Jacobian of the group's
  // stacked attention matrices in the shared W_K, whose square is the sum of the heads' squared softmax.dWk.
  double dWk_group = 0;
  double sqrt_n = 0, grad_paper_bound = 0, grad_tight_bound = 0;  // sqrt(N), 2 sqrt(N), sqrt(N)/2
  // Score statistics over the attended entries.
  double score_mean = 0, score_std = 0, score_max_abs = 0, scores_fro = 0;
  // The softmax attention's Shannon entropy in nats, mean over rows (each row from 0, one-hot, to log of its
  // attended count, uniform): what entropy-collapse studies watch beside score_max_abs, the largest logit.
  double softmax_entropy = 0;
  NormSet linear_scaled;  // S / sqrt(N)
  NormSet poly3_scaled;   // S^3 / sqrt(N), entrywise
  NormSet poly3;          // S^3
  NormSet relu_n;         // relu(S) / N
  // The i.i.d. Gaussian model with this layer's measured scales (RMS of the entries of X and of W_Q, W_K),
  // biases ignored: the exact root mean squares sqrt(E||.||_F^2) over the same attended entries.
  double sigma_x = 0, sigma_t = 0;
  double iid_scores_fro = 0, iid_poly3_scaled_fro = 0, iid_poly3_fro = 0;
  // Cross-normalization what-if (claim C9), filled only when asked: the head's own softmax attention A (the
  // softmax of its logits, soft-capped and masked as the model does, whatever the trained activation) applied to
  // P_mix = mix softmax_col(V) + (1 - mix) V, with V = X W_V + b_V the head's values and softmax_col over all
  // N rows. One entry per mix in kCrossNormMixes; d_v = 0 and the list empty otherwise.
  std::int64_t d_v = 0;
  std::vector<CrossNormWhatIf> cross_norm;
  // The user's --what-if expressions on this head's scores, each with N (the head's rows) and d bound, as written.
  std::vector<std::pair<std::string, NormSet>> what_if;
  double cross_norm_output_bound = 0;       // sqrt(N d_v): sup ||A softmax_col(V)||_F, tight
  double cross_norm_grad_values_bound = 0;  // sqrt(N d_v / 8): sup ||dO/dV||_F at mix 1, tight
  // Measured from the scores alone: the weights are unknown, so are the norms in W_Q, W_K, D, d, lambda and
  // the i.i.d. model; to_json leaves them out.
  bool from_scores = false;
};

// Every norm except dWk_group, which needs the whole group: set_group_key_derivatives fills it for measured
// heads of one layer (measuring the group's other heads' softmax dA/dW_K where they were not selected).
// Throws InputError naming layer and head when a norm the log requires (softmax's value and gradients) is not
// finite: the checkpoint's scores overflow, and no bound can be checked on them.
// With `cross_norm`, also the cross-normalization what-if (InputError when the head has no values). The head's rows
// are measured on `threads` threads (0: every core), with the same result on any number.
// With `what_if`, also each of those elementwise expressions' norms on the head's scores (outer scale 1: write
// any scale into the expression, x^3/sqrt(N)).
HeadMetrics measure_head(const LayerInputs& layer, int layer_index, int head_index, bool cross_norm = false,
                         int threads = 1, std::span<const theory::PhiExpression> what_if = {});
void set_group_key_derivatives(const LayerInputs& layer, std::span<HeadMetrics> heads, int threads = 1);
// The heads `heads` of one layer (in that order) on `threads` threads (0: every core): the heads in parallel, or when
// there are fewer heads than threads, each head's rows. With the grouped keys' derivatives; `head_done`, when set, is
// called after each head (from one thread at a time or several). Under rotary keys the rows' Gram matrix, which every
// head's softmax dA/dW_K reads, is computed once into layer.gram and released.
std::vector<HeadMetrics> measure_layer(LayerInputs& layer, int layer_index, const std::vector<int>& heads,
                                       bool cross_norm = false, int threads = 1,
                                       const std::function<void()>& head_done = {},
                                       std::span<const theory::PhiExpression> what_if = {});

// Theorem 4.1 on this head: ||softmax(S)||_F <= sqrt(N) and ||grad softmax(S)||_F <= sqrt(N)/2 (the tight bound;
// the papers' 2 sqrt(N) is weaker). Both are deterministic, so a value above them, beyond rounding, is a violation.
bool within_theorem_bounds(const HeadMetrics& metrics);
// Fact 11 on the what-if at mix 1: ||O||_F <= sqrt(N d_v) and ||dO/dV||_F <= sqrt(N d_v / 8), deterministic too
// (true when the what-if was not measured).
bool within_cross_norm_bounds(const HeadMetrics& metrics);

// One head from its N x N scores S (lambda already applied): the norms of every activation and of their
// Jacobians in S, and the score statistics. `attended` masks as in LayerInputs; with `causal`, its entries j > i
// are masked too. With `what_if`, each expression's norms too, with N and the head size `d` bound (d = 0: not
// known from the scores, and an expression that uses d is an InputError).
HeadMetrics measure_scores(const Matrix& scores, int layer_index, int head_index, bool causal,
                           const std::optional<theory::AttendedMask>& attended = std::nullopt,
                           std::span<const theory::PhiExpression> what_if = {}, std::int64_t d = 0);

// What a layer applies beyond splitting its weights into heads: grouped keys, rotary positions, a mask that is
// neither "all" nor causal.
struct HeadSplit {
  int kv_heads = 0;  // key/value heads, each read by heads / kv_heads query heads; 0: one per query head
  std::optional<theory::Rotary> rotary;          // queries and keys rotated to positions 0 .. N-1
  std::vector<theory::Rotary> head_rotary;       // or one rotation per head (LayerInputs::head_rotary)
  std::optional<theory::AttendedMask> attended;  // N x N, true where query i attends to key j (with causal: both)
  std::optional<HeadNorm> query_norm, key_norm;  // RMSNorms over each head's queries and keys, before the rotation
  double logit_softcap = 0;                      // the softmax's logits cap tanh(S / cap); 0: S
};

// A layer's attention inputs from X (N x D) and the weights of all heads as maps of rows, q = x W_Q + b_Q with
// W_Q of D x (heads d) (head h owns columns h d .. h d + d - 1) and W_K of D x (kv_heads d); empty biases are
// zeros. W_V (D x (kv_heads d_v)) is optional: without it the heads have no values (and no cross-normalization
// what-if).
LayerInputs split_heads(Matrix X, const Matrix& W_Q, const Matrix& W_K, const Vector& b_Q, const Vector& b_K, int heads,
                        double inner, bool causal, const Matrix& W_V = {}, const Vector& b_V = {},
                        HeadSplit split = {});

// The record of what was measured on the head (records/probe_record.hpp): what the log, --json and --csv hold.
records::ProbeHeadRecord head_record(const HeadMetrics& metrics);
// Its JSON form (records::to_json) and its CSV columns and values in the same order; the cross-normalization
// columns come last, with `cross_norm` (csv_values adds them when the metrics have them).
nlohmann::json to_json(const HeadMetrics& metrics);
std::vector<std::string> csv_columns(bool cross_norm = false);
std::vector<double> csv_values(const HeadMetrics& metrics);

struct ProbeInput {
  enum class Kind { text, tokens, random, pixels, image } kind = Kind::random;
  std::string text;
  std::filesystem::path tokens_file;
  std::filesystem::path pixels_file;  // .npy of channels x height x width, normalized (vision models)
  std::filesystem::path image_file;   // PNG, JPEG, PPM, ... preprocessed as the checkpoint says (vision models)
  std::int64_t random_length = 128;
  bool random_length_chosen = true;  // false: the default, shortened to the model's positions when it has fewer
  std::int64_t max_tokens = -1;      // text or token input: keep the first max_tokens (an error when there are fewer)
  std::uint64_t seed = 0;
};

struct ProbeResult {
  ModelConfig config;
  // The config.json the model was read with and its SHA-256, so that a result names its configuration; both
  // empty for a GGUF file, whose configuration is its own metadata.
  std::filesystem::path config_file;
  std::string config_sha256;
  std::vector<std::int64_t> ids;                   // empty for random input
  std::vector<std::string> token_strings;          // the vocabulary's string of each id (empty without a vocabulary)
  double random_sigma = 0;                         // sigma of the Gaussian embeddings, for random input
  std::int64_t random_length = 0;                  // rows of Gaussian embeddings, for random input
  std::int64_t image_height = 0, image_width = 0;  // the pixels the model saw, for image input
  std::string preprocessing;                       // how an --image file became pixels, in words
  std::vector<HeadMetrics> heads;                  // in layer, head order
  std::vector<LayerInputs> layers;                 // kept only when asked (for the attention dump)
  Pixels pixels;                                   // the image as the model saw it, kept with the layers
  bool float32_products = false;                   // the forward pass's products in float32 (--precision mixed)
  std::string float_kernels;                       // then the float32 kernels they ran on: "avx512" or "portable"
  // With --precision compare: how far the same probe's numbers fell in mixed precision (precision_difference).
  std::optional<records::ProbePrecisionCheck> mixed_against_double;
};

// The ids of `text` for MODEL: a GGUF file's own byte-level BPE; beside a safetensors checkpoint, vocab.txt
// (WordPiece), vocab.json with merges.txt (byte-level BPE, GPT-2's pre-tokenizer) or tokenizer.json.
std::vector<std::int64_t> tokenize_for_model(const std::filesystem::path& model, const TransformerModel& loaded,
                                             std::string_view text);

// The vocabulary's string of each id, from the same files tokenize_for_model reads (byte-level BPE strings as
// the vocabulary writes them, e.g. 'Ġ' for a space); empty when MODEL has no vocabulary beside it.
std::vector<std::string> token_strings_for_model(const std::filesystem::path& model, const TransformerModel& loaded,
                                                 std::span<const std::int64_t> ids);

// Loads MODEL, builds the input, runs the forward pass and measures the selected layers and heads (all when
// empty), with the cross-normalization what-if when `cross_norm`. Out-of-range layers or heads are InputErrors
// naming them. Each layer is measured as soon as the forward pass has computed it and then released, so memory holds
// one layer at a time; `keep_layers` keeps every layer with its heads' attention (for write_attention). `progress`,
// when set, is told once the input is read and after each head how many of the heads to measure are done (from one
// thread at a time). Heads are measured on `threads` threads (0: every core); each head's numbers do not depend on it.
using ProbeProgress = std::function<void(std::int64_t heads_done, std::int64_t heads_total)>;
ProbeResult probe_model(const std::filesystem::path& model, const ProbeInput& input, const std::vector<int>& layers,
                        const std::vector<int>& heads, bool keep_layers = false, bool cross_norm = false,
                        const ProbeProgress& progress = {}, int threads = 1, bool float32_products = false,
                        std::span<const theory::PhiExpression> what_if = {});

// How far `mixed`'s numbers (the probe with float32_products) fall from `exact`'s, the same probe in double precision
// (the same model, input, layers and heads), with the float32 kernels `mixed` ran on.
records::ProbePrecisionCheck precision_difference(const ProbeResult& exact, const ProbeResult& mixed);

// The attention matrices of every layer up to the last measured one, one F64 tensor "layer.L" of shape
// [heads, N, N], the rows each layer's projections act on ("inputs.L", [N, D]), plus the input ids or the
// image's pixel values ("pixel_values", [channels, height, width]): for comparisons with other implementations.
void write_attention(const std::filesystem::path& path, const ProbeResult& result);

}  // namespace attncheck::probes
