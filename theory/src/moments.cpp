#include "attncheck/theory/moments.hpp"

#include <boost/math/special_functions/factorials.hpp>
#include <boost/math/special_functions/gamma.hpp>
#include <fmt/format.h>

#include <cmath>
#include <numbers>

namespace attncheck::theory {

namespace {
void check_model(const GaussianModel& m) {
  if (m.D < 1 || m.d < 1) throw InputError(fmt::format("D = {} and d = {} must be >= 1", m.D, m.d));
  if (!(m.sigma_x > 0) || !(m.sigma_t > 0)) {
    throw InputError(fmt::format("sigma_x = {} and sigma_t = {} must be > 0", m.sigma_x, m.sigma_t));
  }
}
double scale_power(const GaussianModel& m, double q) {
  return std::pow(std::abs(m.inner), q) * std::pow(m.sigma_x * m.sigma_t, 2 * q);
}
double rising_even_product(double k, int terms) {  // k (k+2) ... (k + 2 terms - 2)
  double product = 1;
  for (int j = 0; j < terms; ++j) product *= k + 2.0 * j;
  return product;
}
}  // namespace

double chi_squared_moment(double k, double r) {
  // tgamma_ratio keeps large k (D in the thousands) from overflowing Gamma itself.
  return std::pow(2.0, r) * boost::math::tgamma_ratio(k / 2 + r, k / 2);
}

double abs_normal_moment(double q) {
  return std::pow(2.0, q / 2) * boost::math::tgamma((q + 1) / 2) / std::sqrt(std::numbers::pi);
}

double offdiagonal_abs_moment(const GaussianModel& m, double q) {
  check_model(m);
  const double a = chi_squared_moment(static_cast<double>(m.D), q / 2);
  return scale_power(m, q) * abs_normal_moment(q) * a * a * chi_squared_moment(static_cast<double>(m.d), q / 2);
}

double diagonal_abs_moment(const GaussianModel& m, double q) {
  check_model(m);
  return scale_power(m, q) * abs_normal_moment(q) * chi_squared_moment(static_cast<double>(m.d), q / 2) *
         chi_squared_moment(static_cast<double>(m.D), q);
}

double offdiagonal_even_moment_product(const GaussianModel& m, int p) {
  check_model(m);
  const double big = rising_even_product(static_cast<double>(m.D), p);
  return scale_power(m, 2.0 * p) * boost::math::double_factorial<double>(2 * p - 1) * big * big *
         rising_even_product(static_cast<double>(m.d), p);
}

double diagonal_even_moment_product(const GaussianModel& m, int p) {
  check_model(m);
  return scale_power(m, 2.0 * p) * boost::math::double_factorial<double>(2 * p - 1) *
         rising_even_product(static_cast<double>(m.d), p) * rising_even_product(static_cast<double>(m.D), 2 * p);
}

double expected_poly_fro_sq(const GaussianModel& m, Index n, int p, double outer) {
  const double nn = static_cast<double>(n);
  return outer * outer *
         (nn * (nn - 1) * offdiagonal_abs_moment(m, 2.0 * p) + nn * diagonal_abs_moment(m, 2.0 * p));
}

double expected_linear_parameter_jacobian_fro_sq(const GaussianModel& m, Index n, double outer) {
  check_model(m);
  const double nn = static_cast<double>(n), D = static_cast<double>(m.D), d = static_cast<double>(m.d);
  const double sx2 = m.sigma_x * m.sigma_x, st2 = m.sigma_t * m.sigma_t;
  return outer * outer * m.inner * m.inner * sx2 * sx2 * st2 * d * (nn * (nn - 1) * D * D + nn * D * (D + 2));
}

}  // namespace attncheck::theory
