#pragma once
// Worst-case search for the softmax bounds. Both norms are sums over rows of a function of that row alone, so
// the sup over N x N matrices is N times the sup over one row, and a matrix whose rows are each maximal is a
// maximizer. The search climbs one row of logits at a time; the caller supplies the (random) starts.

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
RowSearchResult maximize_row(RowObjective objective, std::vector<double> start,
                             const RowSearchOptions& options = {});

}  // namespace attncheck::theory
