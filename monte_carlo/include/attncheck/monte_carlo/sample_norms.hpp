#pragma once
// What every backend shares around its kernels: the check of what a point asks for (same conditions, same
// messages on the CPU and on the GPU) and the step from one sample's accumulated totals to its norms
// (THEORY.md facts 6 and 7: constants c and lambda applied once, linear maps through the Gram identity).

#include "attncheck/monte_carlo/backend.hpp"
#include "attncheck/monte_carlo/entry_terms.hpp"

#include <vector>

namespace attncheck::monte_carlo {

struct EstimandRequest {
  bool value = false, dS = false, dQ = false, dK = false, score_var = false, row_sum = false, row_mean = false;
  bool matpow = false;  // the matrix-power reading: value only
  bool linear = false;  // identity or x^1: constant Jacobians, value by the Gram identity
  bool softmax = false;
  bool layernorm = false;  // qk-layernorm on the projections (value, dS, row sums and score-var only)
  bool pairs = false;      // C8's pairs (q, k) drawn directly: score-var only
  bool dV = false;
  bool cross_norm = false;  // C9's O = softmax(S) P_mix: value, dV, dS and dQ only
  bool any_norm() const { return value || dS || dQ || dK || dV; }
  bool any_row_sum() const { return row_sum || row_mean; }
};

// Throws theory::InputError (naming the value) for requests no backend can answer.
EstimandRequest check_request(const theory::AttentionMap& map, theory::ScoreModel scores, theory::Index n,
                              theory::Index d, const std::vector<Estimand>& estimands);
// The same for a whole point: C9's cross-normalized points (point.mix set) have their own estimands.
EstimandRequest check_request(const SweepPoint& point, const std::vector<Estimand>& estimands);

// One sample's totals, before the constants c and lambda.
struct SampleTotals {
  NormSums<double> entries;             // per-entry sums of the non-linear maps (entry_terms.hpp)
  double gram_dot = 0;                  // <V^T V, U^T U> = ||V U^T||_F^2 (linear maps and score-var)
  double diagonal_sq = 0;               // sum_i (v_i . u_i)^2 (score-var)
  double x_sq = 0, u_sq = 0, v_sq = 0;  // sums of squared row norms of X, U, V (linear maps)
  double matpow_sq = 0;                 // ||(V U^T)^p||_F^2 (matrix power)
  double entry_total = 0;               // sum_ij phi(s_ij), before c (row sums)
  double pairs_sq_mean = 0;             // mean over the sample's pairs of (q . k)^2, before lambda (C8's pair models)
  // C9: ||O||_F^2, ||dO/dS||_F^2 and ||dO/dW_Q||_F^2 before lambda^2 in entries (value_sq, dS_sq, dQ_sq), and:
  double values_grad_sq = 0;  // ||dO/dV||_F^2
};

// The requested estimands of one sample; NaN in the others.
SampleValues sample_values(const EstimandRequest& request, const theory::AttentionMap& map, theory::Index n,
                           const SampleTotals& totals);

}  // namespace attncheck::monte_carlo
