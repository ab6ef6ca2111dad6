#include "attncheck/theory/worst_case.hpp"

#include "attncheck/theory/softmax.hpp"

#include <cmath>
#include <span>

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

}  // namespace attncheck::theory
