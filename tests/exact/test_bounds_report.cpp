// `attncheck bounds` and `bounds --cross-norm` as functions: the typed reports agree with the surveys and with
// their JSON, and bad requests are refused naming the option.
#include "attncheck/exact/bounds.hpp"
#include "attncheck/exact/cross_norm_bounds.hpp"
#include "attncheck/records/verdict.hpp"
#include "attncheck/theory/cross_norm.hpp"
#include "attncheck/theory/softmax.hpp"

#include <catch2/catch.hpp>

using namespace attncheck;
using exact::BoundsFamily;
using exact::CrossNormFamily;

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
  // Neither family reaches sqrt(N) (two equal tops: 1/sqrt(2) of it), and C2's 2 sqrt(N) is never reached.
  CHECK(report.max_ratio_softmax < records::kTightFraction);
  CHECK(json["verdicts"]["C1"] == "holds");
  CHECK(json["verdicts"]["C2"] == "holds");

  // One-hot rows reach sqrt(N): C1 is tight.
  request.families = {"near-one-hot"};
  const exact::BoundsReport one_hot = exact::run_bounds(request);
  CHECK(one_hot.max_ratio_softmax >= records::kTightFraction);
  CHECK(exact::c1_verdict(one_hot) == records::Verdict::tight);
  CHECK(exact::c2_verdict(one_hot) == records::Verdict::holds);
  CHECK(exact::to_json(one_hot)["verdicts"]["C1"] == "tight");
}

TEST_CASE("a bound checked on families: violated above it, tight within 0.999 of it, else holds") {
  CHECK(records::bound_verdict(1.5, false) == records::Verdict::violated);
  CHECK(records::bound_verdict(1.0, true) == records::Verdict::tight);
  CHECK(records::bound_verdict(0.999, true) == records::Verdict::tight);
  CHECK(records::bound_verdict(0.998, true) == records::Verdict::holds);
  CHECK(records::bound_verdict(0.25, true) == records::Verdict::holds);
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

TEST_CASE("the cross-norm report: fact 11's constructions reach their bounds, the mix, and its JSON") {
  exact::CrossNormBoundsRequest request;
  request.n = 12;
  request.dv = 3;
  request.trials = 2;
  request.families = {"tight-scores", "one-hot", "tight-values"};
  request.mix = "0.5,1";
  request.threads = 2;
  const exact::CrossNormReport report = exact::run_cross_norm_bounds(request);
  CHECK(report.holds);
  const auto bounds = theory::cross_norm_bounds(12, 3);
  CHECK(report.bounds == exact::CrossNormValues{bounds.column_softmax, bounds.column_grad, bounds.output,
                                                bounds.grad_values, bounds.grad_scores});
  REQUIRE(report.families.size() == 3);
  CHECK(report.families[0].family == CrossNormFamily::tight_scores);
  CHECK(report.families[0].trials == 1);
  CHECK_FALSE(report.families[0].search);
  // Quantities in kCrossNormKeys order: ||P||, ||dP/dV||, ||O||, ||dO/dV||, ||dO/dS||.
  CHECK(report.families[0].ratio[4] == Approx(1.0).epsilon(1e-14));
  CHECK(report.families[1].ratio[2] == Approx(1.0).epsilon(1e-14));
  CHECK(report.families[2].ratio[3] == Approx(1.0).epsilon(1e-14));
  CHECK(report.verdicts[4].largest_in_family == CrossNormFamily::tight_scores);
  CHECK(report.verdicts[2].largest_in_family == CrossNormFamily::one_hot);
  for (const auto& v : report.verdicts) CHECK(v.verdict == records::Verdict::tight);
  CHECK(exact::cross_norm_statement(2) == "||O||_F <= sqrt(N d_v)");
  REQUIRE(report.mix.size() == 2);
  CHECK_FALSE(report.mix[0].bounded);
  CHECK_FALSE(report.mix[0].output_bound);
  CHECK(report.mix[1].bounded);
  CHECK(report.mix[1].output_bound == bounds.output);
  CHECK(report.mix[0].grad_values_bound == 0.5 * bounds.grad_values + 0.5 * bounds.output);
  CHECK(report.mix[0].growth.size() == exact::kMixGrowthScales.size());
  CHECK(report.mix[0].last_step.output == Approx(10).epsilon(0.05));  // linear in t below alpha = 1

  const nlohmann::json json = exact::to_json(report);
  CHECK(json["N"] == 12);
  CHECK(json["d_v"] == 3);
  CHECK(json["holds"] == true);
  CHECK(json["families"][0]["family"] == "tight-scores");
  CHECK(json["families"][0]["ratio"]["grad_scores_fro"].get<double>() == report.families[0].ratio[4]);
  CHECK(json["verdicts"][2]["largest_in_family"] == "one-hot");
  CHECK(json["verdicts"][2]["verdict"] == "tight");
  CHECK(json["mix"][0]["output"] == "unbounded");
  CHECK(json["mix"][0]["output_bound"].is_null());
  CHECK(json["mix"][1]["output_bound"].get<double>() == bounds.output);
  CHECK(json["input"].is_null());
}

TEST_CASE("the cross-norm worst-case search reports each term against its sup 1/8") {
  exact::CrossNormBoundsRequest request;
  request.n = 6;
  request.dv = 2;
  request.search_starts = 3;
  request.families = {"worst-case-search"};
  const exact::CrossNormReport report = exact::run_cross_norm_bounds(request);
  REQUIRE(report.families.size() == 1);
  REQUIRE(report.families[0].search);
  for (const exact::TermSearch& term :
       {report.families[0].search->grad_values_term, report.families[0].search->grad_scores_term}) {
    CHECK(term.sup == theory::kCrossNormTermSqSup);
    CHECK(term.ratio == term.best / term.sup);
    CHECK(term.within_sup);
    CHECK(term.starts == 3);
  }
  const nlohmann::json search = exact::to_json(report)["families"][0]["search"];
  CHECK(search["grad_values_term"]["best"].get<double>() == report.families[0].search->grad_values_term.best);
  CHECK(search["grad_scores_term"]["starts"] == 3);
}

TEST_CASE("cross-norm families are named for the command line, and bad requests are InputErrors naming the option") {
  const std::vector<CrossNormFamily> families = exact::default_cross_norm_families();
  CHECK(families.size() == 10);
  CHECK(exact::family_name(families.front()) == "gaussian-1e-3");
  CHECK(exact::family_name(families.back()) == "worst-case-search");
  CHECK(exact::family_name(CrossNormFamily::input) == "input");
  exact::CrossNormBoundsRequest request;
  CHECK_THROWS_WITH(exact::run_cross_norm_bounds(request), Catch::Contains("--N"));
  request.n = 4;
  request.families = {"input"};
  CHECK_THROWS_WITH(exact::run_cross_norm_bounds(request),
                    Catch::Equals("unknown --family 'input' (known: gaussian-1e-3, gaussian-1, gaussian-10, "
                                  "gaussian-1e3, uniform, one-hot, tight-values, tight-scores, near-tight, "
                                  "worst-case-search)"));
  request.families.clear();
  request.mix = "0.5,2";
  CHECK_THROWS_WITH(exact::run_cross_norm_bounds(request), Catch::Contains("--mix: 2 is out of range"));
  request.mix = "1";
  request.dv = 0;
  CHECK_THROWS_WITH(exact::run_cross_norm_bounds(request), Catch::Contains("--dv: 0 is out of range"));
}
