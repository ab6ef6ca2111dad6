#pragma once
// The exact reference values of a sweep point: what closed forms say of each estimand there, against which the
// Monte Carlo means are checked and the fits' laws are judged.

#include "attncheck/monte_carlo/sweep.hpp"

#include <optional>

namespace attncheck::monte_carlo {

// What is known exactly about one estimand at one point (THEORY.md facts 3-4, 7, 9, the relu and qk-layernorm
// moments; C9 has no closed-form moment, only the deterministic bounds of proved_bounds.hpp). A closed form whose
// value exceeds a double is absent with out_of_range set.
struct ExactMoments {
  std::optional<double> mean;    // E[value] where the expectation itself is known: row sums, row means
  std::optional<double> second;  // E||F||_F^2; for score-var, Var(s_ij) (i != j)
  // A lower bound on Var(||F||_F^2) (the variance of one sample of the second-moment estimator): all N^4 pair
  // terms E[f_ij^2 f_kl^2] are >= 0, so E||F||^4 >= sum_ij E f_ij^4, whence Var >= sum_ij E f_ij^4 - (E||F||^2)^2.
  std::optional<double> second_variance_floor;
  bool out_of_range = false;
};
ExactMoments exact_moments(const PointSpec& point, Estimand estimand);

// An expression c N^n d^m x^k with c > 0 (theory::PhiExpression::power_law), not normalized, as the built-in x^k
// with the outer scale multiplied by c N^n d^m (d given): x^k's closed forms and proofs then apply. None otherwise.
std::optional<theory::AttentionMap> builtin_form(const theory::AttentionMap& map, theory::Index d);
// exact_moments(point, estimand).second.
std::optional<double> exact_norm_sq(const PointSpec& point, Estimand estimand);

// How the exactly known quantity of the point's series grows in its swept variable (N, or d for C8), from the
// closed form.
std::optional<ExactLaw> exact_law(const PointSpec& point, Estimand estimand);

}  // namespace attncheck::monte_carlo
