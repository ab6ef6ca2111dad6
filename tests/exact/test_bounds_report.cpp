// `attncheck bounds` as a function: the typed report agrees with the survey and with its JSON, and bad requests
// are refused naming the option.
#include "attncheck/exact/bounds.hpp"
#include "attncheck/theory/softmax.hpp"

#include <catch2/catch.hpp>

using namespace attncheck;
using exact::BoundsFamily;

TEST_CASE("the bounds report: ratios of each family's maxima, the verdicts over them, and its JSON") {
  exact::BoundsRequest request;
  request.n = 16;
  request.trials = 3;
  request.search_starts = 2;
  request.families = {"two-equal-top", "gaussian-10"};
  request.seed = 5;
  request.threads = 2;
  const exact::BoundsReport report = exact::run_bounds(request);
  CHECK(report.n == 16);
  CHECK(report.bounds.grad_tight == theory::softmax_bounds(16).grad_tight);
  CHECK(report.holds());
  CHECK(report.threads == 2);
  REQUIRE(report.families.size() == 2);
  CHECK(report.families[0].result.family == BoundsFamily::two_equal_top);
  CHECK(report.families[1].result.family == BoundsFamily::gaussian_10);
  // The tight case of fact 2 reaches sqrt(N)/2 and so sets the largest ratio.
  CHECK(report.families[0].ratio_grad_tight == Approx(1.0).epsilon(1e-12));
  CHECK(report.max_ratio_grad_tight == report.families[0].ratio_grad_tight);
  for (const auto& f : report.families) {
    CHECK(f.ratio_softmax == f.result.max_softmax_fro / report.bounds.softmax_paper);
    CHECK(f.ratio_grad_paper == f.result.max_grad_fro / report.bounds.grad_paper);
    CHECK(f.holds);
    CHECK(f.within_tight_bound);
  }

  const nlohmann::json json = exact::to_json(report);
  CHECK(json["N"] == 16);
  CHECK(json["holds"] == true);
  CHECK(json["input"].is_null());
  CHECK(json["seed"] == 5);
  REQUIRE(json["families"].size() == 2);
  CHECK(json["families"][0]["family"] == "two-equal-top");
  CHECK(json["families"][0]["ratio_grad_tight"].get<double>() == report.families[0].ratio_grad_tight);
  CHECK(json["families"][1]["worst_grad_matrix"]["trial"] == report.families[1].result.worst_grad.trial);
  CHECK(json["max_ratio_softmax"].get<double>() == report.max_ratio_softmax);
}

TEST_CASE("bad bounds requests are InputErrors naming the option") {
  exact::BoundsRequest request;
  CHECK_THROWS_WITH(exact::run_bounds(request), Catch::Contains("--N"));
  request.n = 8;
  request.families = {"input"};
  CHECK_THROWS_WITH(exact::run_bounds(request), Catch::Contains("unknown --family 'input'"));
  request.families.clear();
  request.trials = 0;
  CHECK_THROWS_WITH(exact::run_bounds(request), Catch::Contains("--trials: 0 is out of range"));
  request.trials = 1;
  request.threads = 5000;
  CHECK_THROWS_WITH(exact::run_bounds(request), Catch::Contains("--threads: 5000 is out of range"));
}
