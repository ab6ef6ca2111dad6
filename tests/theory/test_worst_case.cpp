// Fact 2 from the search side: gradient ascent finds the tight constants.

#include "test_support.hpp"

#include "attncheck/theory/cross_norm.hpp"
#include "attncheck/theory/softmax.hpp"
#include "attncheck/theory/worst_case.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <vector>

using namespace attncheck;

TEST_CASE("row search reaches 0.99 of both tight constants at N = 256") {
  const theory::Matrix start = testing::random_matrix(1, 256, 1.0, 42);
  const std::vector<double> logits(start.data(), start.data() + start.size());
  const auto jac = theory::maximize_row(theory::RowObjective::jacobian_sq, logits);
  CHECK(std::sqrt(jac.objective / theory::kRowJacobianSqSup) >= 0.99);
  CHECK(jac.objective <= theory::kRowJacobianSqSup);
  // The maximizer has two equal top probabilities near 1/2.
  std::vector<double> s(256);
  theory::softmax_row(jac.logits, s);
  std::sort(s.rbegin(), s.rend());
  CHECK(s[0] == Approx(0.5).margin(0.02));
  CHECK(s[1] == Approx(0.5).margin(0.02));
  const auto soft = theory::maximize_row(theory::RowObjective::softmax_sq, logits);
  CHECK(std::sqrt(soft.objective) >= 0.99);
  CHECK(soft.objective <= 1.0);
}

TEST_CASE("the search reports the objective of the logits it returns") {
  const theory::Matrix start = testing::random_matrix(1, 40, 3.0, 9);
  const auto result =
      theory::maximize_row(theory::RowObjective::jacobian_sq, {start.data(), start.data() + start.size()});
  CHECK(result.objective == theory::row_softmax_norms(result.logits).jacobian_sq);
  CHECK(result.iterations > 0);
}

TEST_CASE("C9: the search for fact 11's terms reaches 0.999 of the sup 1/8 and never exceeds it") {
  for (const auto term : {theory::CrossNormTerm::grad_scores, theory::CrossNormTerm::grad_values}) {
    double best = 0;
    int seed = 0;
    for (const double scale : {1.0, 3.0, 0.1, 10.0}) {
      const theory::Matrix scores = testing::random_matrix(1, 256, scale, 60 + seed);
      const theory::Matrix values = testing::random_matrix(1, 256, scale, 70 + seed++);
      const auto found = theory::maximize_cross_norm_term(term, {scores.data(), scores.data() + 256},
                                                          {values.data(), values.data() + 256});
      INFO("start scale " << scale << ", objective " << found.objective);
      // Never above the proved sup (a few ulps of rounding in the sum allowed).
      CHECK(found.objective <= theory::kCrossNormTermSqSup * (1 + 1e-12));
      // The returned logits are the point whose objective is reported.
      std::vector<double> a(256), p(256);
      theory::softmax_row(found.score_logits, a);
      theory::softmax_row(found.value_logits, p);
      const double recomputed = term == theory::CrossNormTerm::grad_scores ? theory::cross_norm_term_sq(a, p)
                                                                           : theory::cross_norm_term_sq(p, a);
      CHECK(recomputed == found.objective);
      best = std::max(best, found.objective);
      if (found.objective >= 0.999 * theory::kCrossNormTermSqSup) {
        // The maximizer is fact 11's construction: the weights vector halved between two tokens, the other
        // vector one-hot on one of them.
        auto& halved = term == theory::CrossNormTerm::grad_scores ? a : p;
        auto& peaked = term == theory::CrossNormTerm::grad_scores ? p : a;
        std::sort(halved.rbegin(), halved.rend());
        CHECK(halved[0] == Approx(0.5).margin(0.02));
        CHECK(halved[1] == Approx(0.5).margin(0.02));
        CHECK(*std::max_element(peaked.begin(), peaked.end()) == Approx(1.0).margin(0.02));
      }
    }
    CHECK(best >= 0.999 * theory::kCrossNormTermSqSup);
  }
}

TEST_CASE("C9 search: unequal starts are refused") {
  CHECK_THROWS_AS(theory::maximize_cross_norm_term(theory::CrossNormTerm::grad_scores, {0.0, 1.0}, {0.0}),
                  std::invalid_argument);
}
