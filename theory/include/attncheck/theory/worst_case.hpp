#pragma once
// Worst-case searches for the softmax bounds (C1/C2) and for the terms of cross-normalization's bounds (C9). Both norms
// are sums over rows of a function of that row alone, so the sup over N x N matrices is N times the sup over one row,
// and a matrix whose rows are each maximal is a maximizer. The search climbs one row of logits at a time; the caller
// supplies the (random) starts.

#include "attncheck/theory/common.hpp"

#include <vector>

namespace attncheck::theory {

enum class RowObjective {
  softmax_sq,   // sum_j s_j^2: sup 1 (one-hot), so ||softmax||_F -> sqrt(N)
  jacobian_sq,  // ||diag(s) - s s^T||_F^2: sup 1/4 (two equal top entries), so ||grad softmax||_F -> sqrt(N)/2
};

struct RowSearchOptions {
  int max_iterations = 400;
  double min_step = 1e-9;  // stop once the adaptive step falls below this (no ascent direction left)
};

struct RowSearchResult {
  std::vector<double> logits;
  double objective = 0;
  int iterations = 0;
};

// Gradient ascent in logit space with an adaptive step (grown on success, cut on failure), analytic gradient
// d objective / d z_k = s_k (gamma_k - sum_j s_j gamma_j) with gamma = d objective / d s.
RowSearchResult maximize_row(RowObjective objective, std::vector<double> start, const RowSearchOptions& options = {});

// C9 (THEORY.md fact 11): both Jacobian norms of O = softmax(S) softmax_col(V) are sums over (row i, column k) of
// f(x, y) = sum_j x_j^2 (y_j - x . y)^2 (cross_norm_term_sq), with x, y the pair below. The search climbs the
// logits of both probability vectors at once; the sup of either term is 1/8, so N d_v times the best term is
// the largest squared norm among matrices built from the pairs visited.
enum class CrossNormTerm {
  grad_scores,  // f(a_i, p_k): x = a row of A (softmax of score logits), y = a column of P (softmax of values)
  grad_values,  // f(p_k, a_i): the same function with the roles swapped
};

struct PairSearchResult {
  std::vector<double> score_logits;  // a row of S: a_i = softmax(score_logits)
  std::vector<double> value_logits;  // a column of V: p_k = softmax(value_logits)
  double objective = 0;              // the term at (a_i, p_k), at most kCrossNormTermSqSup
  int iterations = 0;
};

// Ascent on both logit vectors (same length, the token count N) with maximize_row's adaptive step, along the
// direction gamma - s . gamma per vector (the logit gradient divided by s), which drives vanishing entries to zero
// geometrically. Throws std::invalid_argument for empty or unequal starts.
PairSearchResult maximize_cross_norm_term(CrossNormTerm term, std::vector<double> score_logits,
                                          std::vector<double> value_logits, const RowSearchOptions& options = {});

}  // namespace attncheck::theory
