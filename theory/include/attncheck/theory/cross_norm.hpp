#pragma once
// Softmax cross-normalization (claim C9, THEORY.md facts 10-11): O = A P_alpha with A = softmax(S) row-wise and
// P_alpha = alpha softmax_col(V) + (1 - alpha) V, where softmax_col makes each of V's d_v columns a probability
// vector over the N tokens. alpha = 1 is the proposal softmax(S) softmax^T(V); alpha = 0 is standard attention.
// Every norm here is a closed form in O(N^2 d_v) (O(N^2 d d_v) for the parameter derivative): no Jacobian is
// formed except by the explicit_* routines, which exist for tests.

#include "attncheck/theory/common.hpp"

#include <span>

namespace attncheck::theory {

// softmax over each column: column k of the result is a probability vector over the N rows.
// Throws InputError naming row and column for a NaN or infinite entry.
Matrix column_softmax(const Matrix& values);

// Fact 10: the C1/C2 analogues for the column softmax alone.
struct ColumnSoftmaxNorms {
  double softmax_fro = 0;  // ||softmax_col(V)||_F <= sqrt(d_v), tight (one-hot columns)
  double grad_fro = 0;     // ||d softmax_col(V) / dV||_F <= sqrt(d_v)/2, tight (two equal top entries per column)
};
ColumnSoftmaxNorms column_softmax_norms(const Matrix& values);

// The value matrix that multiplies A: alpha softmax_col(V) + (1 - alpha) V.
Matrix mixed_values(const Matrix& values, double alpha);

struct CrossNormNorms {
  double output_fro = 0;       // ||O||_F
  double grad_values_fro = 0;  // ||dO/dV||_F, the N d_v x N d_v Jacobian in V
  double grad_scores_fro = 0;  // ||dO/dS||_F, the N d_v x N^2 Jacobian in the scores S (A = softmax(S))
};

// The norms of O = A P_alpha for a row-stochastic `attention` (N x N; each row sums to 1) and `values` (N x d_v).
// With o = A P_alpha, p = softmax_col(V), q = P_alpha and phat = A p:
//   ||dO/dV||_F^2 = sum_{i,j,k} (alpha p_jk (a_ij - phat_ik) + (1 - alpha) a_ij)^2
//   ||dO/dS||_F^2 = sum_{i,j,k} a_ij^2 (q_jk - o_ik)^2      (row i's softmax Jacobian applied to column k of q)
// Throws InputError when the shapes disagree, alpha is not finite, or a row of `attention` is not a probability
// vector (negative entry or sum off by more than 1e-9).
CrossNormNorms cross_norm_norms(const Matrix& attention, const Matrix& values, double alpha = 1.0);

// The same with A = row_softmax(scores).
CrossNormNorms cross_norm_norms_from_scores(const Matrix& scores, const Matrix& values, double alpha = 1.0);

// Derivatives in the projection weights, for scores s_ij = v_i . u_j with v_i = W_Q^T x_i and u_j = W_K^T x_j
// (fold any scale lambda into the rows passed). With (g_ik)_j = a_ij (q_jk - o_ik), row i of dO/dS applied to
// column k of P_alpha:
//   ||dO/dW_Q||_F^2 = sum_i ||x_i||^2 sum_k ||U^T g_ik||^2   (row_weights_i = ||x_i||^2, column_rows = U)
//   ||dO/dW_K||_F^2 = sum_i ||v_i||^2 sum_k ||X^T g_ik||^2   (row_weights_i = ||v_i||^2, column_rows = X)
// both sum_i row_weights_i sum_k ||column_rows^T g_ik||^2, O(N^2 d_v (d + 1)) with d = column_rows.cols().
double cross_norm_projection_grad_sq(const Matrix& attention, const Matrix& mixed, const Vector& row_weights,
                                     const Matrix& column_rows);

// One (row i, column k) term of fact 11, f(x, y) = sum_j x_j^2 (y_j - x . y)^2 for probability vectors x, y of
// equal length. Both Jacobian norms are sums of it over i and k (alpha = 1, a_i = row i of A, p_k = column k of P):
//   ||dO/dS||_F^2 = sum_{i,k} f(a_i, p_k)    (row i's softmax Jacobian applied to p_k)
//   ||dO/dV||_F^2 = sum_{i,k} f(p_k, a_i)    (column k's softmax Jacobian M_k applied to a_i)
// Its sup over all pairs is 1/8 (fact 11), reached at x = (1/2, 1/2, 0, ...), y = e_1.
double cross_norm_term_sq(std::span<const double> weights, std::span<const double> probabilities);
inline constexpr double kCrossNormTermSqSup = 0.125;

// The deterministic bounds of facts 10-11 for N tokens and d_v value columns (each tight; alpha = 1).
struct CrossNormBounds {
  double column_softmax;  // sqrt(d_v)
  double column_grad;     // sqrt(d_v) / 2
  double output;          // sqrt(N d_v)
  double grad_values;     // sqrt(N d_v / 8)
  double grad_scores;     // sqrt(N d_v / 8)
};
CrossNormBounds cross_norm_bounds(Index tokens, Index value_dim);

// Explicit Jacobians for tests (small N only: refuse N * d_v > 512). Row-major vec everywhere: O(i,k) -> i*d_v + k,
// V(j,k) -> j*d_v + k, S(i,j) -> i*N + j.
Matrix explicit_cross_norm_jacobian_values(const Matrix& attention, const Matrix& values, double alpha);
Matrix explicit_cross_norm_jacobian_scores(const Matrix& scores, const Matrix& values, double alpha);

}  // namespace attncheck::theory
