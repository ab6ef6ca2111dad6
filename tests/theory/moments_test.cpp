// Facts 3 and 4: exact score moments, by two independent routes.

#include "attncheck/theory/moments.hpp"

#include <catch2/catch.hpp>

#include <cmath>

using namespace attncheck::theory;

TEST_CASE("fact 3 worked example: D = 6, d = 4, unit sigmas") {
  const GaussianModel model{6, 4, 1, 1, 1 / std::sqrt(4.0)};
  CHECK(offdiagonal_abs_moment(model, 2) == Approx(36).epsilon(1e-13));
  CHECK(offdiagonal_abs_moment(model, 4) == Approx(10368).epsilon(1e-13));
  CHECK(offdiagonal_abs_moment(model, 6) == Approx(10368000).epsilon(1e-13));
  CHECK(offdiagonal_even_moment_product(model, 3) == Approx(10368000).epsilon(1e-14));
}

TEST_CASE("Gamma-function moments equal the product forms for integer p") {
  for (Index D : {1, 3, 64, 500}) {
    for (Index d : {1, 4, 64}) {
      for (double sigma_x : {0.5, 1.0, 2.0}) {
        const GaussianModel model{D, d, sigma_x, 1.3, 1 / std::sqrt(static_cast<double>(d))};
        for (int p = 1; p <= 5; ++p) {
          CHECK(offdiagonal_abs_moment(model, 2.0 * p) ==
                Approx(offdiagonal_even_moment_product(model, p)).epsilon(1e-11));
          CHECK(diagonal_abs_moment(model, 2.0 * p) == Approx(diagonal_even_moment_product(model, p)).epsilon(1e-11));
        }
      }
    }
  }
}

TEST_CASE("fact 4: diagonal second moment and exact E||S||_F^2 for p = 1") {
  const GaussianModel model{10, 5, 0.7, 1.4, 1 / std::sqrt(5.0)};
  const double s4 = std::pow(0.7 * 1.4, 4);
  CHECK(diagonal_abs_moment(model, 2) == Approx(s4 * (100 + 20)).epsilon(1e-13));
  const Index n = 33;
  CHECK(expected_poly_fro_sq(model, n, 1, 1.0) == Approx(s4 * (n * (n - 1) * 100.0 + n * 120.0)).epsilon(1e-13));
}

TEST_CASE("chi-square and normal absolute moments") {
  CHECK(chi_squared_moment(7, 1) == Approx(7));
  CHECK(chi_squared_moment(7, 2) == Approx(7 * 9));
  CHECK(chi_squared_moment(5, 0.5) == Approx(std::sqrt(2.0) * std::tgamma(3.0) / std::tgamma(2.5)));
  CHECK(abs_normal_moment(2) == Approx(1));
  CHECK(abs_normal_moment(4) == Approx(3));
  CHECK(abs_normal_moment(1) == Approx(std::sqrt(2 / M_PI)));
}

TEST_CASE("invalid models are errors naming the values") {
  CHECK_THROWS_WITH(offdiagonal_abs_moment({0, 4, 1, 1, 1}, 2), Catch::Contains("D = 0"));
  CHECK_THROWS_WITH(diagonal_abs_moment({3, 4, -1, 1, 1}, 2), Catch::Contains("sigma_x = -1"));
}
