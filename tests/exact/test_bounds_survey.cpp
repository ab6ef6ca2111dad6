// The exact bounds survey as a library: families whose norms are known in closed form, Theorem 4.1 on every
// family, results independent of the thread count, and the families' names.
#include "attncheck/exact/bounds_survey.hpp"
#include "attncheck/theory/bound_check.hpp"
#include "attncheck/theory/softmax.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

using namespace attncheck;
using exact::BoundsFamily;

namespace {

exact::SurveyOptions options(theory::Index n, int threads) {
  exact::SurveyOptions o;
  o.n = n;
  o.trials = 4;
  o.seed = 7;
  o.threads = threads;
  o.search_starts = 2;
  return o;
}

}  // namespace

TEST_CASE("constant rows give the uniform softmax: ||A||_F = 1 and ||grad||_F = sqrt(1 - 1/N) exactly") {
  for (const theory::Index n : {1, 4, 37}) {
    const exact::FamilyResult r = exact::survey_family(BoundsFamily::constant, options(n, 1));
    const double nd = static_cast<double>(n);
    CHECK(r.trials == 4);
    CHECK(r.max_softmax_fro == Approx(1).epsilon(1e-14));
    CHECK(r.max_grad_fro == Approx(std::sqrt(1 - 1 / nd)).epsilon(1e-14).margin(1e-15));
    CHECK(r.worst_grad.worst_row_top1 == Approx(1 / nd).epsilon(1e-14));
  }
}

TEST_CASE("two equal top logits reach the tight gradient bound sqrt(N)/2 (fact 2) and do not exceed it") {
  const theory::Index n = 64;
  const exact::FamilyResult r = exact::survey_family(BoundsFamily::two_equal_top, options(n, 1));
  const theory::SoftmaxBounds bounds = theory::softmax_bounds(n);
  // The other N - 2 entries carry mass ~ N e^-40 ~ 3e-16: the rows are 1/2, 1/2 to rounding.
  CHECK(r.max_grad_fro == Approx(bounds.grad_tight).epsilon(1e-12));
  CHECK(theory::within(r.max_grad_fro, bounds.grad_tight));
  CHECK(r.worst_grad.worst_row_jacobian_sq == Approx(0.25).epsilon(1e-12));
  CHECK(r.worst_grad.worst_row_top1 == Approx(0.5).epsilon(1e-12));
  CHECK(r.worst_grad.worst_row_top2 == Approx(0.5).epsilon(1e-12));
}

TEST_CASE("every default family satisfies Theorem 4.1 and the tight gradient bound") {
  const theory::Index n = 48;
  const theory::SoftmaxBounds bounds = theory::softmax_bounds(n);
  for (const BoundsFamily family : exact::default_families()) {
    INFO(exact::family_name(family));
    const exact::FamilyResult r = exact::survey_family(family, options(n, 2));
    CHECK(r.family == family);
    CHECK(theory::within(r.max_softmax_fro, bounds.softmax_paper));
    CHECK(theory::within(r.max_grad_fro, bounds.grad_paper));
    CHECK(theory::within(r.max_grad_fro, bounds.grad_tight));
    CHECK(r.max_softmax_fro > 0);
  }
}

TEST_CASE("the survey's maxima and worst trials do not depend on the thread count") {
  for (const BoundsFamily family : {BoundsFamily::gaussian_1, BoundsFamily::near_one_hot, BoundsFamily::worst_case}) {
    INFO(exact::family_name(family));
    const exact::FamilyResult one = exact::survey_family(family, options(32, 1));
    const exact::FamilyResult two = exact::survey_family(family, options(32, 2));
    CHECK(one.max_softmax_fro == two.max_softmax_fro);
    CHECK(one.max_grad_fro == two.max_grad_fro);
    CHECK(one.worst_grad.trial == two.worst_grad.trial);
    CHECK(one.worst_softmax.trial == two.worst_softmax.trial);
  }
}

TEST_CASE("another seed draws other matrices") {
  exact::SurveyOptions other = options(32, 1);
  other.seed = 8;
  CHECK(exact::survey_family(BoundsFamily::gaussian_1, options(32, 1)).max_grad_fro !=
        exact::survey_family(BoundsFamily::gaussian_1, other).max_grad_fro);
}

TEST_CASE("a user's matrix: one-hot rows (other entries -inf) give ||A||_F = sqrt(N) and a zero gradient") {
  const theory::Index n = 5;
  theory::Matrix logits = theory::Matrix::Constant(n, n, -std::numeric_limits<double>::infinity());
  for (theory::Index i = 0; i < n; ++i) logits(i, (2 * i) % n) = 3.5;
  const exact::FamilyResult r = exact::survey_matrix(logits);
  CHECK(r.family == BoundsFamily::input);
  CHECK(r.max_softmax_fro == Approx(std::sqrt(5.0)).epsilon(1e-15));
  CHECK(r.max_grad_fro == 0);
  CHECK(r.worst_softmax.min_logit == 3.5);  // -inf entries are not finite extremes
}

TEST_CASE("families are named for the command line and parsed back, and bad requests are InputErrors") {
  for (const BoundsFamily family : exact::default_families()) {
    CHECK(exact::parse_family(exact::family_name(family)) == family);
  }
  CHECK(exact::parse_family("input") == BoundsFamily::input);
  CHECK_FALSE(exact::parse_family("gaussian"));
  CHECK(exact::requested_families({"constant", "gaussian-1"}) ==
        std::vector<BoundsFamily>{BoundsFamily::constant, BoundsFamily::gaussian_1});
  // --family never names the user's matrix; the refusal lists what it does name.
  for (const char* bad : {"input", "gaussian"}) {
    INFO(bad);
    CHECK_THROWS_WITH(exact::requested_families({"constant", bad}),
                      Catch::Equals(std::string("unknown --family '") + bad +
                                    "' (known: gaussian-1e-3, gaussian-1, gaussian-10, gaussian-1e3, near-one-hot, "
                                    "two-equal-top, constant, worst-case-search)"));
  }
  CHECK_THROWS_AS(exact::survey_family(BoundsFamily::gaussian_1, options(0, 1)), theory::InputError);
  CHECK_THROWS_WITH(exact::survey_family(BoundsFamily::input, options(4, 1)), Catch::Contains("survey_matrix"));
}

TEST_CASE("the survey's memory estimate grows with threads and saturates instead of wrapping") {
  CHECK(exact::survey_bytes(100, 2) > exact::survey_bytes(100, 1));
  CHECK(exact::survey_bytes(100, 1) >= 100 * 100 * sizeof(double));
  CHECK(exact::survey_bytes(theory::Index{1} << 40, 4) == UINT64_MAX);
}
