#include "attncheck/monte_carlo/fit.hpp"

#include <boost/math/statistics/linear_regression.hpp>
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

using namespace attncheck::monte_carlo;

TEST_CASE("an exact power law is fitted exactly, with a narrow interval") {
  std::vector<double> x, y, se;
  for (double n : {16.0, 32.0, 64.0, 128.0, 256.0}) {
    x.push_back(n);
    y.push_back(3 * std::pow(n, 1.5));
    se.push_back(0.01 * y.back());
  }
  const auto fit = fit_log_log(x, y, se);
  REQUIRE(fit);
  CHECK(fit->slope == Approx(1.5).epsilon(1e-12));
  CHECK(std::exp(fit->intercept) == Approx(3).epsilon(1e-10));
  CHECK(fit->points == 5);
  // No residual scatter: the interval comes from the standard errors alone, t_3 quantile.
  const double expected_half = 3.182446305284263 * 0.01 / std::sqrt(5 * 2 * std::log(2) * std::log(2));
  CHECK((fit->slope_ci_hi - fit->slope_ci_lo) / 2 == Approx(expected_half).epsilon(1e-9));
  CHECK(verdict(*fit, 1.5, 0.05) == "tight");
  CHECK(verdict(*fit, 2.0, 0.05) == "holds");
  CHECK(verdict(*fit, 1.0, 0.05) == "violated");
}

TEST_CASE("with equal weights the slope is Boost's ordinary least squares on the logs") {
  const std::vector<double> x{10, 20, 40, 80, 160, 320};
  const std::vector<double> y{5.0, 9.1, 21.0, 37.5, 90.2, 151.0};
  std::vector<double> se, lx, ly;
  for (std::size_t k = 0; k < x.size(); ++k) {
    se.push_back(0.05 * y[k]);  // equal relative errors: equal weights on the log scale
    lx.push_back(std::log(x[k]));
    ly.push_back(std::log(y[k]));
  }
  const auto fit = fit_log_log(x, y, se);
  REQUIRE(fit);
  const auto [intercept, slope] = boost::math::statistics::simple_ordinary_least_squares(lx, ly);
  CHECK(fit->slope == Approx(slope).epsilon(1e-12));
  CHECK(fit->intercept == Approx(intercept).epsilon(1e-12));
  CHECK(fit->reduced_chi_sq > 1);  // scatter beyond the standard errors widens the interval
}

TEST_CASE("verdicts follow THEORY.md") {
  LogLogFit f;
  const auto with = [&](double lo, double hi) {
    f.slope_ci_lo = lo;
    f.slope_ci_hi = hi;
    return verdict(f, 1.0, 0.05);
  };
  CHECK(with(0.97, 1.02) == "tight");
  CHECK(with(0.80, 0.90) == "holds");
  CHECK(with(0.95, 1.04) == "tight");
  CHECK(with(1.02, 1.04) == "holds");        // within the tolerance
  CHECK(with(1.10, 1.20) == "violated");
  CHECK(with(1.8, 3.5) == "violated");       // wide, but entirely above claimed + tolerance
  CHECK(with(0.5, 1.5) == "inconclusive");   // contains the claim, but says nothing
  CHECK(with(1.02, 1.10) == "inconclusive"); // straddles claimed + tolerance
}

TEST_CASE("fits need two usable points") {
  CHECK_FALSE(fit_log_log({16}, {2}, {0.1}));
  CHECK_FALSE(fit_log_log({16, 32}, {2, -1}, {0.1, 0.1}));
  CHECK_FALSE(fit_log_log({16, 16}, {2, 3}, {0.1, 0.1}));
  CHECK(fit_log_log({16, 32}, {2, 4}, {0.1, 0.1}));
}
