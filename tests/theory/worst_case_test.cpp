// Fact 2 from the search side: gradient ascent finds the tight constants.

#include "test_support.hpp"

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
