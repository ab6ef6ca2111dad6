#pragma once
// Attention maps F = c(N) * phi(lambda * T), T = X Q K^T X^T, with every constant explicit (THEORY.md), and the
// exact Frobenius norms of F and of its derivatives in the scores, in Q and in K (fact 7).

#include "attncheck/theory/common.hpp"
#include "attncheck/theory/expression.hpp"
#include "attncheck/theory/pointwise.hpp"

#include <optional>
#include <string>
#include <vector>

namespace attncheck::theory {

enum class ActivationKind {
  softmax,     // row-wise softmax
  pointwise,   // h applied entrywise (x^p, relu, gelu, ...)
  matpow,      // the matrix power (lambda T)^p: the other reading of "(.)^p"; value only
  expression,  // the user's phi(x) (expression.hpp), entrywise or divided by each row's sum
};

struct Activation {
  ActivationKind kind = ActivationKind::softmax;
  Pointwise h = Pointwise::identity;        // for pointwise
  int p = 1;                                // exponent for Pointwise::poly and for matpow
  std::optional<PhiExpression> expression;  // for kind expression
  // Expressions only: F_ij = phi(s_ij) / sum_k phi(s_ik) (--normalize rows; exp(x) so is softmax). A row whose sum
  // is 0 is a row of zeros with a zero Jacobian (docs/THEORY.md, "Expression activations").
  bool normalize_rows = false;

  bool operator==(const Activation&) const = default;
};

// c(N) = factor * N^(-n_exponent): none (1, 0), 1/sqrt(N) (1, 0.5), 1/k (1/k, 0), the relu paper's N^-alpha.
struct OuterScale {
  double factor = 1;
  double n_exponent = 0;
  double at(Index n) const;
};

struct AttentionMap {
  Activation activation;
  double inner = 1;  // lambda, e.g. 1/sqrt(d)
  OuterScale outer;
};

// Human-readable formula, e.g. "F = N^-0.5 * (T/sqrt(4))^3 (elementwise)"; d is used to print lambda nicely.
std::string describe(const AttentionMap& map, Index d);

// lambda * X Q K^T X^T (dense; for the exact routines and tests, not for large N).
Matrix scores(const Matrix& X, const Matrix& Q, const Matrix& K, double inner);

// F itself, dense.
Matrix apply(const AttentionMap& map, const Matrix& X, const Matrix& Q, const Matrix& K);

struct AttentionNorms {
  double value_fro = 0;          // ||F||_F
  std::optional<double> dS_fro;  // ||dF/dS||_F with S = lambda T (the Jacobian in the scores); none for matpow
  std::optional<double> dQ_fro;  // ||dF/dQ||_F, the full N^2 x (D d) Jacobian; none for matpow
  std::optional<double> dK_fro;  // ||dF/dK||_F; none for matpow
};

// Closed forms of fact 7, O(N^2 d) time and O(N d) memory beyond F's rows: no Jacobian is formed.
AttentionNorms attention_norms(const AttentionMap& map, const Matrix& X, const Matrix& Q, const Matrix& K);

// Rotary position embeddings (RoPE): the query and key of position t are rotated, pair p of coordinates
// (first[p], second[p]) by the angle t * frequency[p] (R(t) = [[cos, -sin], [sin, cos]] on the pair);
// coordinates in no pair are left as they are. Then s_ij = v_i . u_j depends on the positions through t_j - t_i
// only (not so with angles given per position: with_angles). The two layouts in use differ only in which
// coordinates pair up, with frequency base^(-2p/d) for pair p = 0 .. d/2 - 1 in both:
struct Rotary {
  std::vector<Index> first, second;
  std::vector<double> frequency;
  Index dimension = 0;  // d, the coordinates of one head
  // ggml's (GGUF Llama): pairs (2p, 2p + 1).
  static Rotary interleaved(Index d, double base);
  // Hugging Face's rotate_half (and GPT-NeoX's): pairs (p, p + d/2).
  static Rotary half_split(Index d, double base);
  // GPT-NeoX's partial rotary: the first `rotated` coordinates (even) in pairs (p, p + rotated/2) at frequencies
  // base^(-2p/rotated), the others not rotated.
  static Rotary partial_half_split(Index d, Index rotated, double base);
  // Given frequencies (a model's own inv_freq), P of them for P <= d/2 pairs: (2p, 2p + 1) when `interleaved`, else
  // (p, p + P); coordinates from 2P on are not rotated (partial rotary).
  static Rotary with_frequencies(Index d, std::vector<double> frequency, bool interleaved);
  // Angles given per position rather than t * frequency[p]: row t of `angles` (positions x pairs, P = its columns)
  // turns position t's pairs, laid out as with_frequencies lays them. EVA's 2-D rotary over image patches turns
  // some pairs by a patch's row and the others by its column, and leaves the prefix tokens unturned (rows of 0).
  // The scores then depend on both positions, not on their difference alone (docs/THEORY.md, "Angles per
  // position").
  static Rotary with_angles(Index d, Matrix angles, bool interleaved);
  Matrix angles;  // empty: t * frequency[p]
  double angle(Index t, std::size_t p) const {
    return angles.size() != 0 ? angles(t, static_cast<Index>(p)) : static_cast<double>(t) * frequency[p];
  }
  std::size_t pairs() const { return first.size(); }
};

// Row k of `rows` (a query or key of one head) rotated to position first_position + k; with an angle table,
// first_position + k must be one of its rows.
void apply_rotary(const Rotary& rotary, Matrix& rows, double first_position = 0);

// Which entries (i, j) of the N x N scores take part (true) and which are masked (false), for masks that are
// neither "all" nor causal (padding, block masks).
using AttendedMask = Eigen::Array<bool, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// The same closed forms from the projections V = X W_Q + b_Q and U = X W_K + b_K (rows v_i, u_j): they need
// only X, V and U, so biases are included by passing the biased projections. The derivatives are in W_Q and
// W_K (not in the biases). With `causal`, entries j > i are masked: -inf logits for softmax, absent (0) for
// the elementwise maps. Not for matpow (value only): use attention_norms.
// With `rotary`, V and U are the rotated projections of positions 0 .. N-1 (v_i = R(i) (W_Q^T x_i + b_Q)).
// Rotations keep lengths, so every norm is that of the rotated projections except softmax's dF/dW_K, where
// the row's probabilities mix keys of different positions; it is then evaluated in O(N^3) (docs/THEORY.md,
// "Rotary positions and grouped queries").
// Softmax's dF/dW_K under rotary keys reads the Gram matrix X X^T (N x N): `gram`, when given, is that matrix, which a
// caller measuring several heads on the same rows computes once; otherwise each call computes its own.
AttentionNorms attention_norms_from_projections(const AttentionMap& map, const Matrix& X, const Matrix& V,
                                                const Matrix& U, bool causal = false, const Rotary* rotary = nullptr,
                                                const Matrix* gram = nullptr);
// Same with an explicit N x N mask (a sliding window, padding); a softmax row that attends to nothing is an
// InputError naming the row.
AttentionNorms attention_norms_from_projections(const AttentionMap& map, const Matrix& X, const Matrix& V,
                                                const Matrix& U, const AttendedMask& attended,
                                                const Rotary* rotary = nullptr, const Matrix* gram = nullptr);

// The squares behind AttentionNorms, before the map's scales: each is a sum over the rows of the scores, so a head's
// rows may be measured in parts (on several threads) and the parts added, in a fixed order for the same bits.
struct AttentionSquaredSums {
  double value_sq = 0, dS_sq = 0, dQ_sq = 0, dK_sq = 0;
  AttentionSquaredSums& operator+=(const AttentionSquaredSums& other);
};
AttentionNorms attention_norms_from_sums(const AttentionMap& map, Index n, const AttentionSquaredSums& sums);

// Rows first .. first + count - 1 of the scores (count -1: through the last row).
struct RowRange {
  Index first = 0, count = -1;
};

// Softmax's dF/dW_K under rotary keys takes causal rows in blocks of this many, starting at the range's first row:
// ranges that start at multiples of it sum the same blocks as the whole head.
inline constexpr Index kRotaryKeyBlockRows = 8;

// A norm over one head's d coordinates, shared by every head: an RMSNorm (Qwen3's and Gemma 3's query and key norms),
// each row p becoming p / sqrt(mean(p^2) + eps) * gain (Gemma's 1 + weight already added); or, centred, a LayerNorm
// (Persimmon's, timm's qk_norm), c / sqrt(mean(c^2) + eps) * gain + bias with c = p - mean(p), the bias empty when
// it has none.
struct HeadNorm {
  Vector gain;
  double eps = 1e-6;
  bool centred = false;
  Vector bias;
};

// An RMSNorm over all the layer's heads together (OLMo 2's q_norm and k_norm over H d coordinates), seen from one
// head: the other heads' raw coordinates enter its mean square, r_t = sqrt((|p_t|^2 + squares[t]) / (d +
// coordinates) + eps), and through r_t the head's map depends on the other heads' weights too.
struct OtherHeads {
  Index coordinates = 0;  // the other heads' coordinates the mean runs over
  Vector squares;         // per position, the sum of their squares (N)
  Matrix gram;            // their Gram matrix over positions (N x N): for the keys, which softmax's dF/dW_K reads
};

// Each row of `rows` normalized by an RMSNorm: x / sqrt(mean(x^2) + eps) * gain.
Matrix rms_normalized(const Matrix& rows, const Vector& gain, double eps);
// Each row of `rows` normalized by `norm`, an RMSNorm or a LayerNorm; with `others`, an RMSNorm over all the heads
// (`norm.gain` then this head's slice of the gains).
Matrix head_normalized(const Matrix& rows, const HeadNorm& norm, const OtherHeads* others = nullptr);

// What a head applies between its projections P_Q = X W_Q + b_Q, P_K = X W_K + b_K and its attention, beyond the
// map's own scale: v_i = R(i) norm_Q(p_i), u_j = R(j) norm_K(p_j), S = lambda V U^T, and for softmax the logits
// cap tanh(S / cap) (Gemma 2's soft-capping). The elementwise maps take S itself: the cap belongs to the softmax.
struct ScoreMaps {
  const Rotary* rotary = nullptr;
  const HeadNorm* query_norm = nullptr;
  const HeadNorm* key_norm = nullptr;
  // P_Q and P_K before the norms (N x d), which the norms' Jacobians are taken at: required with the norms.
  const Matrix* raw_queries = nullptr;
  const Matrix* raw_keys = nullptr;
  double logit_softcap = 0;  // 0: none
  // X X^T, when the caller has it (see the rotary overloads above); softmax's dF/dW_K reads it.
  const Matrix* gram = nullptr;
  // With norms over all the heads together: the other heads' coordinates (the keys' with their Gram matrix under
  // softmax). dF/dW_Q and dF/dW_K are then in the whole W_Q and W_K, every head's columns, which all move this
  // head's map (docs/THEORY.md, "Norms over all the heads").
  const OtherHeads* query_others = nullptr;
  const OtherHeads* key_others = nullptr;
};

// The closed forms with every map of `maps`: V and U are the final rows (normalized, rotated), and dF/dW_Q,
// dF/dW_K are the derivatives through the norms, the rotation and the cap; dF/dS stays the Jacobian of the
// activation in its own input (the capped logits for softmax). Softmax's dF/dW_K is then O(N^3 d) per head
// (docs/THEORY.md, "Query and key norms, soft-capped logits").
AttentionNorms attention_norms_from_projections(const AttentionMap& map, const Matrix& X, const Matrix& V,
                                                const Matrix& U, bool causal, const ScoreMaps& maps);
AttentionNorms attention_norms_from_projections(const AttentionMap& map, const Matrix& X, const Matrix& V,
                                                const Matrix& U, const AttendedMask& attended, const ScoreMaps& maps);

// Whether the closed forms above read X X^T (softmax's dF/dW_K under rotary keys, norms or a cap): a caller measuring
// a head in several parts passes it once in `maps.gram`, or each part forms its own.
bool key_term_reads_gram(const AttentionMap& map, const ScoreMaps& maps);

// The squared sums of the closed forms above over rows `rows` only.
AttentionSquaredSums attention_row_sums_from_projections(const AttentionMap& map, const Matrix& X, const Matrix& V,
                                                         const Matrix& U, bool causal, const ScoreMaps& maps,
                                                         RowRange rows);
AttentionSquaredSums attention_row_sums_from_projections(const AttentionMap& map, const Matrix& X, const Matrix& V,
                                                         const Matrix& U, const AttendedMask& attended,
                                                         const ScoreMaps& maps, RowRange rows);

// ||F||_F and ||dF/dS||_F from the scores S themselves (lambda already applied, so map.inner is not used), for
// callers that have no weights: dQ_fro and dK_fro stay empty. `attended` (optional) masks as above.
AttentionNorms score_map_norms(const AttentionMap& map, const Matrix& scores, const AttendedMask* attended = nullptr);

enum class Parameter { Q, K };

// d vec(F) / d vec(P) built entry by entry through the chain rule dF/dS * dS/dP, (N^2) x (D d), row-major vec.
// For tests of the closed forms on small cases; refuses more than 2^24 entries.
Matrix explicit_parameter_jacobian(const AttentionMap& map, const Matrix& X, const Matrix& Q, const Matrix& K,
                                   Parameter parameter);

}  // namespace attncheck::theory
