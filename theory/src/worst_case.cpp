#include "attncheck/theory/worst_case.hpp"

#include "attncheck/theory/cross_norm.hpp"
#include "attncheck/theory/softmax.hpp"

#include <cmath>
#include <span>
#include <stdexcept>

namespace attncheck::theory {

namespace {

double evaluate(RowObjective objective, std::span<const double> probabilities) {
  const RowSoftmaxNorms norms = row_norms_from_probabilities(probabilities);
  return objective == RowObjective::softmax_sq ? norms.softmax_sq : norms.jacobian_sq;
}

void logit_gradient(RowObjective objective, std::span<const double> s, std::vector<double>& gradient) {
  double sum_sq = 0;
  for (double v : s) sum_sq += v * v;
  gradient.resize(s.size());
  double mean_gamma = 0;
  for (std::size_t k = 0; k < s.size(); ++k) {
    // d/ds_k of sum s^2 is 2 s_k; of sum s^2 - 2 sum s^3 + (sum s^2)^2 it is 2 s_k - 6 s_k^2 + 4 sum_sq s_k.
    gradient[k] = objective == RowObjective::softmax_sq ? 2 * s[k] : 2 * s[k] - 6 * s[k] * s[k] + 4 * sum_sq * s[k];
    mean_gamma += s[k] * gradient[k];
  }
  for (std::size_t k = 0; k < s.size(); ++k) gradient[k] = s[k] * (gradient[k] - mean_gamma);
}

// The logit step d_k = gamma_k - sum_j s_j gamma_j (gamma = d objective / d s): the logit gradient
// s_k (gamma_k - mean) divided by s_k, an ascent direction (the objective changes by sum_k s_k d_k^2 >= 0 to first
// order). Unlike the plain gradient it does not vanish with s_k, so the entries the maximizer sends to zero get
// there geometrically as the step doubles, instead of like 1/iterations: the C9 sups are limits of this kind.
void to_logit_direction(std::span<const double> s, std::vector<double>& gamma) {
  double mean_gamma = 0;
  for (std::size_t k = 0; k < s.size(); ++k) mean_gamma += s[k] * gamma[k];
  for (double& g : gamma) g -= mean_gamma;
}

// Gradients of f(x, y) = sum_j x_j^2 (y_j - c)^2, c = x . y, with r = sum_j x_j^2 (y_j - c):
// df/dx_m = 2 x_m (y_m - c)^2 - 2 y_m r,  df/dy_m = 2 x_m^2 (y_m - c) - 2 x_m r.
void term_gradients(std::span<const double> x, std::span<const double> y, std::vector<double>& grad_x,
                    std::vector<double>& grad_y) {
  const std::size_t n = x.size();
  double c = 0;
  for (std::size_t j = 0; j < n; ++j) c += x[j] * y[j];
  double r = 0;
  for (std::size_t j = 0; j < n; ++j) r += x[j] * x[j] * (y[j] - c);
  grad_x.resize(n);
  grad_y.resize(n);
  for (std::size_t m = 0; m < n; ++m) {
    grad_x[m] = 2 * x[m] * (y[m] - c) * (y[m] - c) - 2 * y[m] * r;
    grad_y[m] = 2 * x[m] * x[m] * (y[m] - c) - 2 * x[m] * r;
  }
}

}  // namespace

RowSearchResult maximize_row(RowObjective objective, std::vector<double> start, const RowSearchOptions& options) {
  RowSearchResult result;
  result.logits = std::move(start);
  const std::size_t n = result.logits.size();
  std::vector<double> s(n), trial_logits(n), trial_s(n), gradient;
  softmax_row(result.logits, s);
  result.objective = evaluate(objective, s);
  double step = 1.0;
  for (int it = 0; it < options.max_iterations && step >= options.min_step; ++it) {
    logit_gradient(objective, s, gradient);
    for (std::size_t k = 0; k < n; ++k) trial_logits[k] = result.logits[k] + step * gradient[k];
    softmax_row(trial_logits, trial_s);
    const double trial_objective = evaluate(objective, trial_s);
    result.iterations = it + 1;
    if (trial_objective > result.objective) {
      result.logits.swap(trial_logits);
      s.swap(trial_s);
      result.objective = trial_objective;
      // The gradient of the small entries vanishes like s_k: long steps are what drives them to -inf.
      step *= 2;
    } else {
      step /= 4;
    }
  }
  return result;
}

PairSearchResult maximize_cross_norm_term(CrossNormTerm term, std::vector<double> score_logits,
                                          std::vector<double> value_logits, const RowSearchOptions& options) {
  if (score_logits.size() != value_logits.size() || score_logits.empty()) {
    throw std::invalid_argument("maximize_cross_norm_term: the two starts need the same, nonzero length");
  }
  const std::size_t n = score_logits.size();
  PairSearchResult result;
  result.score_logits = std::move(score_logits);
  result.value_logits = std::move(value_logits);
  std::vector<double> a(n), p(n), trial_scores(n), trial_values(n), trial_a(n), trial_p(n), grad_a, grad_p;
  // The term is f(x, y) with (x, y) = (a, p) through the scores and (p, a) through the values.
  const auto evaluate_pair = [term](std::span<const double> a_row, std::span<const double> p_column) {
    return term == CrossNormTerm::grad_scores ? cross_norm_term_sq(a_row, p_column)
                                              : cross_norm_term_sq(p_column, a_row);
  };
  softmax_row(result.score_logits, a);
  softmax_row(result.value_logits, p);
  result.objective = evaluate_pair(a, p);
  double step = 1.0;
  for (int it = 0; it < options.max_iterations && step >= options.min_step; ++it) {
    if (term == CrossNormTerm::grad_scores) {
      term_gradients(a, p, grad_a, grad_p);
    } else {
      term_gradients(p, a, grad_p, grad_a);
    }
    to_logit_direction(a, grad_a);
    to_logit_direction(p, grad_p);
    for (std::size_t k = 0; k < n; ++k) {
      trial_scores[k] = result.score_logits[k] + step * grad_a[k];
      trial_values[k] = result.value_logits[k] + step * grad_p[k];
    }
    softmax_row(trial_scores, trial_a);
    softmax_row(trial_values, trial_p);
    const double trial_objective = evaluate_pair(trial_a, trial_p);
    result.iterations = it + 1;
    if (trial_objective > result.objective) {
      result.score_logits.swap(trial_scores);
      result.value_logits.swap(trial_values);
      a.swap(trial_a);
      p.swap(trial_p);
      result.objective = trial_objective;
      step *= 2;
    } else {
      step /= 4;
    }
  }
  return result;
}

}  // namespace attncheck::theory
