#include "attncheck/theory/moments.hpp"

#include <boost/math/special_functions/factorials.hpp>
#include <boost/math/special_functions/gamma.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <vector>

namespace attncheck::theory {

namespace {

void check_model(const GaussianModel& m) {
  if (m.D < 1 || m.d < 1) throw InputError(fmt::format("D = {} and d = {} must be >= 1", m.D, m.d));
  if (!(m.sigma_x > 0) || !(m.sigma_t > 0)) {
    throw InputError(fmt::format("sigma_x = {} and sigma_t = {} must be > 0", m.sigma_x, m.sigma_t));
  }
}

double rising_even_product(double k, int terms) {  // k (k+2) ... (k + 2 terms - 2)
  double product = 1;
  for (int j = 0; j < terms; ++j) product *= k + 2.0 * j;
  return product;
}

double odd_double_factorial(int n) {  // n!! for odd n >= -1, with (-1)!! = 1
  return n <= 0 ? 1.0 : boost::math::double_factorial<double>(static_cast<unsigned>(n));
}

// exp of a logarithm, +infinity beyond the range of a double (std::exp would say so too, but with ERANGE).
double exp_or_infinity(double log_value) {
  if (log_value > std::log(std::numeric_limits<double>::max())) return std::numeric_limits<double>::infinity();
  return std::exp(log_value);
}

double log_abs(double x) { return std::log(std::abs(x)); }

}  // namespace

double log_chi_squared_moment(double k, double r) {
  // lgamma's difference loses a few digits when k is large; the ratio itself keeps them while it is finite
  // (out of range it comes back as 0 or infinity instead of throwing, and lgamma takes over).
  using namespace boost::math::policies;
  const double ratio = boost::math::tgamma_delta_ratio(k / 2, r, make_policy(overflow_error<ignore_error>()));
  if (std::isfinite(ratio) && ratio > 0 && std::isfinite(1 / ratio)) return r * std::numbers::ln2 - std::log(ratio);
  return r * std::numbers::ln2 + boost::math::lgamma(k / 2 + r) - boost::math::lgamma(k / 2);
}

double chi_squared_moment(double k, double r) { return exp_or_infinity(log_chi_squared_moment(k, r)); }

double log_abs_normal_moment(double q) {
  return q / 2 * std::numbers::ln2 + boost::math::lgamma((q + 1) / 2) - 0.5 * std::log(std::numbers::pi);
}

double abs_normal_moment(double q) { return exp_or_infinity(log_abs_normal_moment(q)); }

double log_projection_moment(const GaussianModel& model, bool diagonal, double a, double b) {
  check_model(model);
  const double D = static_cast<double>(model.D), d = static_cast<double>(model.d);
  const double log_sx = std::log(model.sigma_x), log_st = std::log(model.sigma_t);
  const double m = a + b;
  const double common = log_abs_normal_moment(2 * a) + 2 * a * log_st;
  if (diagonal) {
    return common + 2 * m * log_st + log_chi_squared_moment(d, m) + 4 * m * log_sx + log_chi_squared_moment(D, 2 * m);
  }
  const double x_moment = 2 * m * log_sx + log_chi_squared_moment(D, m);             // E||x_i||^{2m}
  const double u_moment = 2 * m * log_st + x_moment + log_chi_squared_moment(d, m);  // E||u_j||^{2m}
  return common + x_moment + u_moment;
}

double offdiagonal_abs_moment(const GaussianModel& m, double q) {
  return exp_or_infinity(q * log_abs(m.inner) + log_projection_moment(m, false, q / 2, 0));
}

double diagonal_abs_moment(const GaussianModel& m, double q) {
  return exp_or_infinity(q * log_abs(m.inner) + log_projection_moment(m, true, q / 2, 0));
}

double layernorm_score_abs_moment(const GaussianModel& m, double q) {
  check_model(m);
  if (m.d < 2) throw InputError(fmt::format("qk-layernorm needs d >= 2 (d = {} leaves nothing after centring)", m.d));
  const double d = static_cast<double>(m.d);
  const double log_cosine = boost::math::lgamma((q + 1) / 2) + boost::math::lgamma((d - 1) / 2) -
                            0.5 * std::log(std::numbers::pi) - boost::math::lgamma((q + d - 1) / 2);
  return exp_or_infinity(q * log_abs(m.inner * d) + log_cosine);
}

double offdiagonal_even_moment_product(const GaussianModel& m, int p) {
  check_model(m);
  const double big = rising_even_product(static_cast<double>(m.D), p);
  return std::pow(std::abs(m.inner), 2.0 * p) * std::pow(m.sigma_x * m.sigma_t, 4.0 * p) *
         odd_double_factorial(2 * p - 1) * big * big * rising_even_product(static_cast<double>(m.d), p);
}

double diagonal_even_moment_product(const GaussianModel& m, int p) {
  check_model(m);
  return std::pow(std::abs(m.inner), 2.0 * p) * std::pow(m.sigma_x * m.sigma_t, 4.0 * p) *
         odd_double_factorial(2 * p - 1) * rising_even_product(static_cast<double>(m.d), p) *
         rising_even_product(static_cast<double>(m.D), 2 * p);
}

double offdiagonal_parameter_weight_product(const GaussianModel& m, int p) {
  check_model(m);
  const double D = static_cast<double>(m.D), d = static_cast<double>(m.d);
  const double lambda_sq = m.inner * m.inner, sx = m.sigma_x, st = m.sigma_t;
  return lambda_sq * p * p * std::pow(lambda_sq * std::pow(sx, 4) * std::pow(st, 4), p - 1) * std::pow(sx, 4) * st *
         st * rising_even_product(D, p) * rising_even_product(d, p) * rising_even_product(D, p - 1) *
         (odd_double_factorial(2 * p - 1) + odd_double_factorial(2 * p - 3) * (D - 1));
}

double diagonal_parameter_weight_product(const GaussianModel& m, int p) {
  check_model(m);
  const double D = static_cast<double>(m.D), d = static_cast<double>(m.d);
  const double lambda_sq = m.inner * m.inner;
  return lambda_sq * p * p * std::pow(lambda_sq, p - 1) * std::pow(m.sigma_t, 4 * p - 2) * std::pow(m.sigma_x, 4 * p) *
         rising_even_product(D, 2 * p) * odd_double_factorial(2 * p - 3) * rising_even_product(d, p);
}

double score_variance(ScoreModel model, const GaussianModel& m) {
  const double lambda_sq = m.inner * m.inner, d = static_cast<double>(m.d);
  switch (model) {
    case ScoreModel::projected: return offdiagonal_abs_moment(m, 2);
    case ScoreModel::projected_layernorm: return layernorm_score_abs_moment(m, 2);
    case ScoreModel::unit_pairs: return lambda_sq * d;
    case ScoreModel::sign_coupled_pairs: return 3 * lambda_sq * d;
  }
  return std::nan("");
}

double entry_sum(Index n, double off, double diag) {
  const double nn = static_cast<double>(n);
  return nn * (nn - 1) * off + nn * diag;
}

double expected_poly_fro_sq(const GaussianModel& m, Index n, int p, double outer) {
  return outer * outer * entry_sum(n, offdiagonal_abs_moment(m, 2.0 * p), diagonal_abs_moment(m, 2.0 * p));
}

double expected_linear_parameter_jacobian_fro_sq(const GaussianModel& m, Index n, double outer) {
  check_model(m);
  const double nn = static_cast<double>(n), D = static_cast<double>(m.D), d = static_cast<double>(m.d);
  const double sx2 = m.sigma_x * m.sigma_x, st2 = m.sigma_t * m.sigma_t;
  return outer * outer * m.inner * m.inner * sx2 * sx2 * st2 * d * (nn * (nn - 1) * D * D + nn * D * (D + 2));
}

double expected_poly_parameter_jacobian_fro_sq(const GaussianModel& m, Index n, int p, double outer) {
  const Activation poly{ActivationKind::pointwise, Pointwise::poly, p};
  const auto off = entry_expectations(poly, m, ScoreModel::projected, false).q_weight;
  const auto diag = entry_expectations(poly, m, ScoreModel::projected, true).q_weight;
  return outer * outer * entry_sum(n, *off, *diag);
}

namespace {

std::vector<double> product(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> out(a.size() + b.size() - 1, 0.0);
  for (std::size_t i = 0; i < a.size(); ++i) {
    for (std::size_t j = 0; j < b.size(); ++j) out[i + j] += a[i] * b[j];
  }
  return out;
}

}  // namespace

EntryExpectations polynomial_entry_expectations(const std::vector<double>& coefficients, const GaussianModel& model,
                                                ScoreModel scores, bool diagonal) {
  EntryExpectations e;
  if (coefficients.empty()) return e;
  if (scores != ScoreModel::projected && scores != ScoreModel::projected_layernorm) return e;  // no N x N matrix
  const bool layernorm = scores == ScoreModel::projected_layernorm;
  // E[P(s)] and E[P(s) ||x_i||^(2b) ||u_j||^(2b)]: the even powers' moments, lambda^{2a} E[|t|^{2a} ...] = E|s|^{2a}
  // ...
  const auto expectation = [&](const std::vector<double>& poly) {
    double sum = 0;
    for (std::size_t k = 0; k < poly.size(); k += 2) {
      if (poly[k] == 0) continue;
      const double moment = k == 0      ? 1.0
                            : layernorm ? layernorm_score_abs_moment(model, static_cast<double>(k))
                            : diagonal  ? diagonal_abs_moment(model, static_cast<double>(k))
                                        : offdiagonal_abs_moment(model, static_cast<double>(k));
      sum += poly[k] * moment;
    }
    return sum;
  };
  const auto weighted = [&](const std::vector<double>& poly, double b) -> std::optional<double> {
    if (layernorm) return std::nullopt;  // LayerNorm's own Jacobian is not part of fact 7
    double sum = 0;
    for (std::size_t k = 0; k < poly.size(); k += 2) {
      if (poly[k] == 0) continue;
      const double a = static_cast<double>(k) / 2;
      sum += poly[k] * exp_or_infinity(2 * a * log_abs(model.inner) + log_projection_moment(model, diagonal, a, b));
    }
    return sum;
  };
  std::vector<double> derivative(std::max<std::size_t>(coefficients.size(), 2) - 1, 0.0);
  for (std::size_t k = 1; k < coefficients.size(); ++k) derivative[k - 1] = static_cast<double>(k) * coefficients[k];
  const std::vector<double> square = product(coefficients, coefficients);
  const std::vector<double> derivative_square = product(derivative, derivative);
  const std::vector<double> derivative_fourth = product(derivative_square, derivative_square);
  const double lambda_sq = model.inner * model.inner;
  e.value = expectation(coefficients);
  e.value_sq = expectation(square);
  e.value_4 = expectation(product(square, square));
  e.deriv_sq = expectation(derivative_square);
  e.deriv_4 = expectation(derivative_fourth);
  if (const auto w = weighted(derivative_square, 1)) e.q_weight = lambda_sq * *w;
  if (const auto w = weighted(derivative_fourth, 2)) e.q_weight_sq = lambda_sq * lambda_sq * *w;
  return e;
}

EntryExpectations entry_expectations(const Activation& activation, const GaussianModel& model, ScoreModel scores,
                                     bool diagonal) {
  EntryExpectations e;
  if (activation.kind != ActivationKind::pointwise) return e;
  if (scores != ScoreModel::projected && scores != ScoreModel::projected_layernorm) return e;  // no N x N matrix
  const bool layernorm = scores == ScoreModel::projected_layernorm;
  // E|s|^q, and lambda^{2a} E[|t|^{2a} ||x_i||^{2b} ||u_j||^{2b}] (projected model only).
  const auto abs_moment = [&](double q) {
    if (layernorm) return layernorm_score_abs_moment(model, q);
    return diagonal ? diagonal_abs_moment(model, q) : offdiagonal_abs_moment(model, q);
  };
  const auto weight = [&](double a, double b) -> std::optional<double> {
    if (layernorm) return std::nullopt;  // LayerNorm's own Jacobian is not part of fact 7
    return exp_or_infinity(2 * a * log_abs(model.inner) + log_projection_moment(model, diagonal, a, b));
  };
  const auto scaled = [](std::optional<double> x, double factor) -> std::optional<double> {
    if (!x) return std::nullopt;
    return *x * factor;
  };
  const double lambda_sq = model.inner * model.inner;
  switch (activation.h) {
    case Pointwise::identity:
    case Pointwise::poly: {
      const int p = activation.h == Pointwise::identity ? 1 : activation.p;
      if (p < 1) return e;
      std::vector<double> monomial(static_cast<std::size_t>(p) + 1, 0.0);
      monomial.back() = 1;
      return polynomial_entry_expectations(monomial, model, scores, diagonal);
    }
    case Pointwise::relu:
      e.value = abs_moment(1) / 2;
      e.value_sq = abs_moment(2) / 2;
      e.value_4 = abs_moment(4) / 2;
      e.deriv_sq = 0.5;
      e.deriv_4 = 0.5;
      e.q_weight = scaled(weight(0, 1), lambda_sq / 2);
      e.q_weight_sq = scaled(weight(0, 2), lambda_sq * lambda_sq / 2);
      return e;
    case Pointwise::relu2:  // h = s^2 on s > 0, h' = 2s there
      e.value = abs_moment(2) / 2;
      e.value_sq = abs_moment(4) / 2;
      e.value_4 = abs_moment(8) / 2;
      e.deriv_sq = 4 * abs_moment(2) / 2;
      e.deriv_4 = 16 * abs_moment(4) / 2;
      e.q_weight = scaled(weight(1, 1), 4 * lambda_sq / 2);
      e.q_weight_sq = scaled(weight(2, 2), 16 * lambda_sq * lambda_sq / 2);
      return e;
    case Pointwise::sigmoid: e.value = 0.5; return e;
    case Pointwise::gelu:
    case Pointwise::softplus:
    case Pointwise::relu6: return e;
  }
  return e;
}

}  // namespace attncheck::theory
