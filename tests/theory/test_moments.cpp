// Facts 3, 4 and 9: exact score and Jacobian-weight moments, by two independent routes; qk-layernorm and relu.

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

TEST_CASE("fact 9: the Jacobian weights by the Gamma route equal the product forms of the notes") {
  for (Index D : {1, 2, 7, 64}) {
    for (Index d : {1, 3, 64}) {
      for (double sigma_x : {0.6, 1.0, 1.7}) {
        const GaussianModel model{D, d, sigma_x, 1.3, 1 / std::sqrt(static_cast<double>(d))};
        for (int p = 1; p <= 6; ++p) {
          const Activation poly{ActivationKind::pointwise, Pointwise::poly, p};
          INFO("D = " << D << ", d = " << d << ", sigma_x = " << sigma_x << ", p = " << p);
          CHECK(*entry_expectations(poly, model, ScoreModel::projected, false).q_weight ==
                Approx(offdiagonal_parameter_weight_product(model, p)).epsilon(1e-11));
          CHECK(*entry_expectations(poly, model, ScoreModel::projected, true).q_weight ==
                Approx(diagonal_parameter_weight_product(model, p)).epsilon(1e-11));
        }
      }
    }
  }
}

TEST_CASE("fact 9 at p = 1 is fact 7's linear Jacobian, with lambda^2 (the 1/d of fact 7) counted once") {
  for (const GaussianModel& model : {GaussianModel{6, 4, 1, 1, 0.5}, GaussianModel{10, 3, 0.7, 1.4, 2.0}}) {
    for (Index n : {1, 2, 17}) {
      CHECK(expected_poly_parameter_jacobian_fro_sq(model, n, 1, 0.3) ==
            Approx(expected_linear_parameter_jacobian_fro_sq(model, n, 0.3)).epsilon(1e-13));
    }
  }
}

TEST_CASE("fact 9 with D = d = 1, where every factor is a Gaussian moment") {
  // t_ij = x_i Q K x_j and u_j = K x_j, so E[t^{2p-2} x_i^2 u_j^2] = E x^{2p} E Q^{2p-2} E K^{2p} E x^{2p} off the
  // diagonal and E x^{4p} E Q^{2p-2} E K^{2p} on it; E z^{2k} = (2k-1)!!.
  const auto dfact = [](int n) {
    double r = 1;
    for (int k = n; k > 1; k -= 2) r *= k;
    return r;
  };
  const GaussianModel model{1, 1, 1, 1, 1};
  for (int p = 1; p <= 5; ++p) {
    const Activation poly{ActivationKind::pointwise, Pointwise::poly, p};
    const double off = p * p * dfact(2 * p - 1) * dfact(2 * p - 3) * dfact(2 * p - 1) * dfact(2 * p - 1);
    const double diag = p * p * dfact(4 * p - 1) * dfact(2 * p - 3) * dfact(2 * p - 1);
    CHECK(*entry_expectations(poly, model, ScoreModel::projected, false).q_weight == Approx(off).epsilon(1e-13));
    CHECK(*entry_expectations(poly, model, ScoreModel::projected, true).q_weight == Approx(diag).epsilon(1e-13));
  }
}

TEST_CASE("relu halves every second moment of the identity, on and off the diagonal") {
  const GaussianModel model{8, 4, 1.2, 0.9, 0.5};
  const Activation relu{ActivationKind::pointwise, Pointwise::relu, 1},
      identity{ActivationKind::pointwise, Pointwise::identity, 1};
  for (bool diagonal : {false, true}) {
    const auto r = entry_expectations(relu, model, ScoreModel::projected, diagonal);
    const auto s = entry_expectations(identity, model, ScoreModel::projected, diagonal);
    CHECK(*r.value_sq == Approx(*s.value_sq / 2).epsilon(1e-14));
    CHECK(*r.q_weight == Approx(*s.q_weight / 2).epsilon(1e-14));
    CHECK(*r.deriv_sq == 0.5);
    CHECK(*s.value == 0);
    CHECK(*r.value == Approx((diagonal ? diagonal_abs_moment(model, 1) : offdiagonal_abs_moment(model, 1)) / 2));
  }
}

TEST_CASE("qk-layernorm scores: s = lambda d cos(theta) between uniform directions in d - 1 dimensions") {
  // d = 2: the centred vectors lie on a line, so the cosine is +-1 and |s| = |lambda| d.
  CHECK(layernorm_score_abs_moment({5, 2, 1, 1, 0.5}, 3) == Approx(1.0).epsilon(1e-14));
  // E cos^2 = 1 / (d - 1), so E s^2 = lambda^2 d^2 / (d - 1); with lambda = 1/sqrt(d): d / (d - 1).
  for (Index d : {3, 4, 16, 64}) {
    const double lambda = 1 / std::sqrt(static_cast<double>(d));
    CHECK(layernorm_score_abs_moment({7, d, 2.0, 0.3, lambda}, 2) == Approx(d / (d - 1.0)).epsilon(1e-13));
  }
  // d = 4: the cosine of uniform directions in R^3 is uniform on [-1, 1], E|c|^q = 1 / (q + 1).
  CHECK(layernorm_score_abs_moment({3, 4, 1, 1, 0.25}, 5) == Approx(1.0 / 6).epsilon(1e-13));
  CHECK_THROWS_WITH(layernorm_score_abs_moment({3, 1, 1, 1, 1}, 2), Catch::Contains("d >= 2"));
}

TEST_CASE("large p stays finite in log space and saturates to infinity beyond a double") {
  const GaussianModel model{64, 64, 1, 1, 0.125};
  CHECK(std::isfinite(log_projection_moment(model, false, 128, 0)));
  CHECK(std::isinf(offdiagonal_abs_moment(model, 256)));
  CHECK(std::isfinite(offdiagonal_abs_moment(model, 20)));
  CHECK(std::log(offdiagonal_abs_moment(model, 20)) ==
        Approx(20 * std::log(0.125) + log_projection_moment(model, false, 10, 0)).epsilon(1e-13));
}
