#pragma once
// Row-wise softmax and the exact Frobenius norms of softmax and of its Jacobian (THEORY.md fact 1).

#include "attncheck/theory/common.hpp"

#include <span>

namespace attncheck::theory {

// Per-row quantities from which both norms are sums over rows.
struct RowSoftmaxNorms {
  double softmax_sq = 0;   // sum_j s_j^2 = ||softmax(row)||^2
  double jacobian_sq = 0;  // ||diag(s) - s s^T||_F^2 = sum s^2 - 2 sum s^3 + (sum s^2)^2, at most 1/4
};

struct SoftmaxNorms {
  double softmax_fro = 0;  // ||softmax(A)||_F
  double grad_fro = 0;     // ||grad softmax(A)||_F (Jacobian of the row-wise map R^{NxM} -> R^{NxM})
  double max_row_jacobian_sq = 0;
  Index worst_row = 0;  // row with the largest per-row Jacobian term
};

// Stable row softmax: subtracts the row max; -inf logits get probability 0.
// Throws InputError naming row and column (0-based) for NaN or +inf, and naming the row when every logit is -inf.
void softmax_row(std::span<const double> logits, std::span<double> probabilities, Index row_for_errors = 0);
Matrix row_softmax(const Matrix& logits);

// The Shannon entropy in nats, -sum_j a_j log a_j, of a = softmax(logits) (0 log 0 = 0, so -inf logits add nothing):
// from 0 (one-hot) to log(count of finite logits) (uniform). Formed as log Z + sum_j a_j (top - s_j) around the top
// logit, every term >= 0, so near one-hot rows keep their digits where -sum a log a loses them. Errors as
// softmax_row.
double softmax_row_entropy(std::span<const double> logits, Index row_for_errors = 0);
// Its mean over the rows of a matrix of logits.
double mean_softmax_row_entropy(const Matrix& logits);

// Closed form of fact 1 for one row of logits, O(length). Terms are summed so that none cancels: exact to a few
// ulps even for near one-hot rows, where the textbook expression loses every digit.
RowSoftmaxNorms row_softmax_norms(std::span<const double> logits, Index row_for_errors = 0);

// Same, for a row of probabilities that already sums to one (used after the caller's own softmax).
RowSoftmaxNorms row_norms_from_probabilities(std::span<const double> probabilities);

// Both norms of a whole matrix, O(N M), no Jacobian formed.
SoftmaxNorms softmax_norms(const Matrix& logits);

// The explicit (NM) x (NM) Jacobian d vec(softmax(A)) / d vec(A), row-major vec (entry (i,j) -> i*M + j).
// Block-diagonal by rows. For tests and small N only: refuses N*M > 4096.
Matrix explicit_softmax_jacobian(const Matrix& logits);

// Bound constants of Theorem 4.1 (v1 4.1/4.2, v2 (6)/(7)) and the tight constant of fact 2.
struct SoftmaxBounds {
  double softmax_paper;  // sqrt(N): sup ||softmax(A)||_F, tight (one-hot rows)
  double grad_paper;     // 2 sqrt(N): the papers' bound on ||grad softmax(A)||_F
  double grad_tight;     // sqrt(N)/2: the exact sup (two equal top probabilities per row)
};
SoftmaxBounds softmax_bounds(Index rows);

// Largest value of the per-row Jacobian term over all probability vectors (fact 2).
inline constexpr double kRowJacobianSqSup = 0.25;

}  // namespace attncheck::theory
