// Monte Carlo estimates against the closed forms of THEORY.md facts 3, 4 and 7 (p = 1). Fixed seeds; each
// comparison passes when |estimate - exact| <= 4 standard errors (z-score below 4).

#include "attncheck/monte_carlo/cpu_backend.hpp"
#include "attncheck/monte_carlo/statistics.hpp"
#include "attncheck/theory/moments.hpp"

#include <catch2/catch.hpp>

#include <cmath>

using namespace attncheck;
using namespace attncheck::monte_carlo;
using theory::ActivationKind;
using theory::Pointwise;

namespace {

struct Config {
  theory::Index N, D, d;
  double sigma_x, sigma_t, inner;
};
const Config kConfigs[] = {
    {12, 6, 4, 1.0, 1.0, 0.5},   // lambda = 1/sqrt(d)
    {10, 3, 5, 1.7, 0.6, 1.0},   // non-unit sigmas
    {16, 8, 2, 0.5, 1.3, 0.25},
};
constexpr std::uint64_t kSamples = 3000;
constexpr double kMaxZ = 4.0;

SweepPoint point_of(const Config& c, theory::Activation act, double outer, std::uint64_t seed) {
  SweepPoint pt;
  pt.N = c.N;
  pt.D = c.D;
  pt.d = c.d;
  pt.sigma_x = c.sigma_x;
  pt.sigma_t = c.sigma_t;
  pt.map.activation = act;
  pt.map.inner = c.inner;
  pt.map.outer = {outer, 0};
  pt.seed = seed;
  return pt;
}

theory::GaussianModel model_of(const Config& c) { return {c.D, c.d, c.sigma_x, c.sigma_t, c.inner}; }

void check_z(const MeanTracker& tracker, double exact, const char* what) {
  const MeanEstimate e = tracker.estimate();
  const double z = (e.mean - exact) / e.se;
  INFO(what << ": estimate " << e.mean << " +- " << e.se << " (" << e.samples << " samples), exact " << exact
            << ", z = " << z);
  CHECK(std::abs(z) < kMaxZ);
}

// Mean over samples of the squared estimand value, i.e. the estimate of E||.||_F^2.
MeanTracker squared_estimates(const SweepPoint& pt, Estimand estimand) {
  std::vector<SampleValues> values;
  CpuBackend(2, 8).evaluate(pt, {estimand}, 0, kSamples, values);
  MeanTracker t;
  for (const auto& v : values) t.add(v[static_cast<int>(estimand)] * v[static_cast<int>(estimand)]);
  return t;
}

}  // namespace

TEST_CASE("off-diagonal moments E[s_ij^2p] (fact 3) for p = 1, 2, within 4 standard errors") {
  std::uint64_t seed = 100;
  for (const Config& c : kConfigs) {
    for (int p : {1, 2}) {
      const SweepPoint pt = point_of(c, {ActivationKind::pointwise, Pointwise::poly, p}, 1, ++seed);
      MeanTracker t;
      SampleInputs in;
      for (std::uint64_t k = 0; k < kSamples; ++k) {
        draw_sample(pt, k, in);
        const theory::Matrix S = c.inner * ((in.X * in.Q) * (in.X * in.K).transpose());
        double sum = 0;
        for (theory::Index i = 0; i < c.N; ++i) {
          for (theory::Index j = 0; j < c.N; ++j) {
            if (i != j) sum += std::pow(S(i, j), 2 * p);
          }
        }
        t.add(sum / static_cast<double>(c.N * (c.N - 1)));
      }
      check_z(t, theory::offdiagonal_even_moment_product(model_of(c), p), p == 1 ? "E s^2" : "E s^4");
    }
  }
}

TEST_CASE("E||F||_F^2 of the elementwise power (facts 3-4, diagonal included) for p = 1, 2") {
  std::uint64_t seed = 200;
  for (const Config& c : kConfigs) {
    for (int p : {1, 2}) {
      const SweepPoint pt = point_of(c, {ActivationKind::pointwise, Pointwise::poly, p}, 0.3, ++seed);
      check_z(squared_estimates(pt, Estimand::value), theory::expected_poly_fro_sq(model_of(c), c.N, p, 0.3),
              p == 1 ? "E||F||^2, p = 1" : "E||F||^2, p = 2");
    }
    // The matrix-power reading coincides with the elementwise one at p = 1.
    const SweepPoint matpow = point_of(c, {ActivationKind::matpow, Pointwise::identity, 1}, 1, ++seed);
    check_z(squared_estimates(matpow, Estimand::value), theory::expected_poly_fro_sq(model_of(c), c.N, 1, 1),
            "E||S||^2 through the matrix-power path");
  }
}

TEST_CASE("Jacobian norms: E||dF/dQ||^2, E||dF/dK||^2 at p = 1 and E||dF/dS||^2 at p = 2") {
  std::uint64_t seed = 300;
  for (const Config& c : kConfigs) {
    const SweepPoint linear = point_of(c, {ActivationKind::pointwise, Pointwise::poly, 1}, 0.5, ++seed);
    const double exact_q = theory::expected_linear_parameter_jacobian_fro_sq(model_of(c), c.N, 0.5);
    check_z(squared_estimates(linear, Estimand::dQ), exact_q, "E||dF/dQ||^2, p = 1");
    check_z(squared_estimates(linear, Estimand::dK), exact_q, "E||dF/dK||^2, p = 1");
    const SweepPoint square = point_of(c, {ActivationKind::pointwise, Pointwise::poly, 2}, 1, ++seed);
    // dF/dS = 2 s entrywise: E||dF/dS||^2 = 4 E||S||^2.
    check_z(squared_estimates(square, Estimand::dS), theory::expected_poly_fro_sq(model_of(c), c.N, 1, 2),
            "E||dF/dS||^2, p = 2");
  }
}

TEST_CASE("score-var estimates Var(s_ij) = lambda^2 (sigma_x sigma_t)^4 D^2 d (C8)") {
  std::uint64_t seed = 400;
  for (const Config& c : kConfigs) {
    const SweepPoint pt = point_of(c, {ActivationKind::pointwise, Pointwise::identity, 1}, 1, ++seed);
    std::vector<SampleValues> values;
    CpuBackend(2, 8).evaluate(pt, {Estimand::score_var}, 0, kSamples, values);
    MeanTracker t;
    for (const auto& v : values) t.add(v[static_cast<int>(Estimand::score_var)]);
    const double exact = c.inner * c.inner * std::pow(c.sigma_x * c.sigma_t, 4) * c.D * c.D * c.d;
    CHECK(theory::offdiagonal_abs_moment(model_of(c), 2) == Approx(exact).epsilon(1e-12));
    check_z(t, exact, "Var(s_ij)");
  }
}
