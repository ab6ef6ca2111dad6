#include "attncheck/monte_carlo/sweep.hpp"
#include "attncheck/monte_carlo/exact_references.hpp"
#include "attncheck/monte_carlo/mc_options.hpp"
#include "attncheck/theory/vocabulary.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

using namespace attncheck;
using namespace attncheck::monte_carlo;

TEST_CASE("grids parse as lists and as start:stop:xfactor") {
  CHECK(parse_index_grid("16:4096:x2", "--N") ==
        std::vector<theory::Index>{16, 32, 64, 128, 256, 512, 1024, 2048, 4096});
  CHECK(parse_index_grid("10:100:x3", "--N") == std::vector<theory::Index>{10, 30, 90});
  CHECK(parse_index_grid("8,64, 32", "--D") == std::vector<theory::Index>{8, 64, 32});
  CHECK(parse_index_grid("7", "--d") == std::vector<theory::Index>{7});
  CHECK_THROWS_WITH(parse_index_grid("16:8:x2", "--N"), Catch::Contains("--N") && Catch::Contains("below start"));
  CHECK_THROWS_WITH(parse_index_grid("16:64:2", "--N"), Catch::Contains("start:stop:xFACTOR"));
  CHECK_THROWS_WITH(parse_index_grid("16:64:x1", "--N"), Catch::Contains("x1"));
  CHECK_THROWS_WITH(parse_index_grid("0,4", "--N"), Catch::Contains("must be >= 1"));
  CHECK_THROWS_WITH(parse_index_grid("12,abc", "--D"), Catch::Contains("'abc'"));
}

TEST_CASE("grids end at 2^31: values beyond are refused naming the option, and no grid runs on forever") {
  const std::vector<theory::Index> top = parse_index_grid("1073741824:2147483648:x2", "--N");
  CHECK(top == std::vector<theory::Index>{1073741824, 2147483648});
  // Each of these once rounded past 2^63 and never reached stop.
  for (const char* grid : {"16:4611686018427387904:x2", "16:4611686018427387904:x3", "16:4611686018427387904:x1.5",
                           "16:9223372036854775807:x2"}) {
    for (const char* option : {"--N", "--D", "--d", "--dv"}) {
      CHECK_THROWS_WITH(parse_index_grid(grid, option), Catch::StartsWith(std::string(option) + ": ") &&
                                                            Catch::Contains("beyond what attncheck can run"));
    }
  }
  CHECK_THROWS_WITH(parse_index_grid("2147483649", "--N"), Catch::Contains("2147483649") && Catch::Contains("2^31"));
  CHECK_THROWS_WITH(parse_index_grid("99999999999999999999", "--D"), Catch::Contains("beyond"));
  // A factor that rounds next * factor back to next would never arrive.
  CHECK_THROWS_WITH(parse_index_grid("2:100:x1.0000000000000002", "--N"), Catch::Contains("too close to 1"));
  CHECK(parse_index_grid("1:20:x1.001", "--N").size() == 20);
}

TEST_CASE("sizes not given come from the preset, sizes given win, and an unknown preset is refused naming it") {
  McRequest request;
  const McSizes quick = sizes_of(request);
  CHECK(quick.N == "16:2048:x2");
  CHECK(quick.D == "32");
  CHECK(quick.d == "32");
  CHECK(quick.max_seconds == 4);
  request.preset = "paper";
  const McSizes paper = sizes_of(request);
  CHECK(paper.N == "16:1024:x2");
  CHECK(paper.D == "64");
  CHECK(paper.d == "64");
  CHECK(paper.max_seconds == 600);
  request.D = "8";
  request.max_seconds = 5;
  const McSizes given = sizes_of(request);
  CHECK(given.D == "8");
  CHECK(given.d == "64");
  CHECK(given.max_seconds == 5);
  request.preset = "fast";
  CHECK_THROWS_WITH(sizes_of(request), "--preset fast: not one of quick, paper");
  // The command line's --help lists both presets with their sizes.
  const auto preset = std::find_if(mc_options().begin(), mc_options().end(),
                                   [](const McOption& option) { return option.name == "preset"; });
  REQUIRE(preset != mc_options().end());
  CHECK(preset->choices == std::vector<std::string>{"quick", "paper"});
  CHECK(preset->help.find("paper: --N 16:1024:x2 --D 64 --d 64 --max-seconds 600") != std::string::npos);
}

TEST_CASE("outer and inner scales parse into explicit constants") {
  CHECK(parse_outer_scale("none").n_exponent == 0);
  CHECK(parse_outer_scale("1/sqrt(N)").n_exponent == 0.5);
  CHECK(parse_outer_scale("1/k:8").factor == 0.125);
  CHECK(parse_outer_scale("N^-0.75").n_exponent == 0.75);
  CHECK(parse_outer_scale("N^-0.75").text == "N^-0.75");
  CHECK_THROWS_WITH(parse_outer_scale("sqrt(N)"), Catch::Contains("'sqrt(N)'"));
  CHECK(parse_inner_scale("1/sqrt(d)").at(16) == 0.25);
  CHECK(parse_inner_scale("2.5").at(16) == 2.5);
  CHECK_THROWS_WITH(parse_estimands("value,dX"), Catch::Contains("'dX'"));
  CHECK_THROWS_WITH(parse_phi("tanh", 1), Catch::Contains("'tanh'"));
}

TEST_CASE("claim presets set the constants exactly as each theorem states them") {
  SweepRequest rq;
  rq.claim = "C3";
  rq.p = {2};
  auto c3 = build_series(rq);
  REQUIRE(c3.size() == 2);  // both readings
  CHECK(theory::reading_of(c3[0].activation) == "elementwise");
  CHECK(theory::reading_of(c3[1].activation) == "matrix");
  CHECK(c3[0].counts_for_exit);
  CHECK_FALSE(c3[1].counts_for_exit);
  const PointSpec pt = make_point(c3[0], 100, 16, 16, 1, 1, 1);
  CHECK(pt.point.map.inner == 0.25);  // sqrt(d) inside the power
  CHECK(pt.point.map.outer.at(100) == 1);
  CHECK(*c3[0].claimed_exponent == 1);

  rq.claim = "C6";
  auto c6 = build_series(rq);
  REQUIRE(c6.size() == 1);
  const PointSpec q = make_point(c6[0], 100, 16, 16, 1, 1, 1);
  CHECK(q.point.map.inner == 1);
  CHECK(q.point.map.outer.at(100) == Approx(0.25 * 0.1).epsilon(1e-15));  // 1/sqrt(d) outside, 1/sqrt(N)
  CHECK(c6[0].estimands == std::vector<Estimand>{Estimand::dQ, Estimand::dK});
  CHECK(*c6[0].claimed_exponent == 0.5);

  rq.claim = "C7";
  rq.alpha = std::vector<double>{1.0, 0.5};
  auto c7 = build_series(rq);
  REQUIRE(c7.size() == 4);  // each alpha with and without qk-layernorm
  CHECK(c7[0].scores == theory::ScoreModel::projected_layernorm);
  CHECK(c7[1].scores == theory::ScoreModel::projected);
  CHECK(c7[0].outer.text == "N^-1");
  CHECK(*c7[2].claimed_for(Estimand::row_sum) == 0.5);
  CHECK(*c7[2].claimed_for(Estimand::row_mean) == -0.5);  // the row mean is the row sum over N
  CHECK(*c7[2].claimed_for(Estimand::value) == 0.5);
  CHECK(c7[0].estimands == std::vector<Estimand>{Estimand::row_sum, Estimand::row_mean, Estimand::value});
  CHECK(c7[0].counts_for_exit_of(Estimand::row_sum));
  CHECK_FALSE(c7[0].counts_for_exit_of(Estimand::value));  // the Frobenius norm is a secondary series
  rq.alpha.reset();
  CHECK(build_series(rq).size() == 6);  // alpha 0, 0.5, 1 by default

  rq.claim = "C8";
  const auto c8 = build_series(rq);
  REQUIRE(c8.size() == 3);
  CHECK(c8[0].scores == theory::ScoreModel::unit_pairs);
  CHECK(c8[1].scores == theory::ScoreModel::sign_coupled_pairs);
  CHECK(c8[2].scores == theory::ScoreModel::projected);
  CHECK(c8[0].claims_variance_equals_d);
  CHECK(c8[1].counts_for_exit);
  CHECK_FALSE(c8[2].claims_variance_equals_d);
  CHECK_FALSE(c8[2].counts_for_exit);  // the projected model is reported as what it is
  rq.claim = "C7";
  // C7's h are the vocabulary's pointwise maps of one map each; the refusal names every one of them.
  for (const char* other : {"softmax", "poly", "matpow", "tanh"}) {
    rq.phi = other;
    const std::string message = [&] {
      try {
        build_series(rq);
      } catch (const theory::InputError& e) {
        return std::string(e.what());
      }
      return std::string("accepted");
    }();
    CHECK_THAT(message, Catch::StartsWith(fmt::format("--phi {}: C7 is about h in", other)));
    const std::string listed = message.substr(std::min(message.size(), message.find(" h in ")));
    for (const theory::ActivationTerm& term : theory::all_activations()) {
      const bool one_pointwise_map = term.kind == theory::ActivationKind::pointwise && !term.takes_p;
      CHECK(one_pointwise_map == (listed.find(std::string(term.word)) != std::string::npos));
    }
  }
  rq.phi.reset();

  rq.outer_scale = "none";
  CHECK_THROWS_WITH(build_series(rq), Catch::Contains("--outer-scale none"));
  rq.outer_scale.reset();
  rq.claim = "C9";
  const auto c9 = build_series(rq);
  REQUIRE(c9.size() == 1);  // mix alpha = 1 unless --mix is given
  CHECK(c9[0].mix == 1.0);
  CHECK(c9[0].claimed_exponent == 0.5);
  CHECK(c9[0].estimands == std::vector<Estimand>{Estimand::value, Estimand::dV, Estimand::dS, Estimand::dQ});
  rq.mix = std::vector<double>{0, 0.5, 1};
  CHECK(build_series(rq).size() == 3);
}

TEST_CASE("a custom claimed exponent is of each estimand itself, the row mean's included") {
  SweepRequest rq;
  rq.phi = "relu";
  rq.estimands = "row-sum,row-mean,value";
  rq.claimed_exponent = 0;
  const auto series = build_series(rq);
  REQUIRE(series.size() == 1);
  for (const Estimand e : {Estimand::row_sum, Estimand::row_mean, Estimand::value}) {
    INFO(theory::term_of(e).word);
    CHECK(*series[0].claimed_for(e) == 0);  // as --claimed-exponent's help says: E||F|| = O(N^a) of what is asked
  }
}

TEST_CASE("point seeds depend on the point, not on its position in the grid") {
  SweepRequest rq;
  rq.claim = "C4";
  const auto series = build_series(rq);
  const PointSpec a = make_point(series[0], 64, 8, 8, 1, 1, 42);
  const PointSpec b = make_point(series[0], 64, 8, 8, 1, 1, 42);
  const PointSpec c = make_point(series[0], 128, 8, 8, 1, 1, 42);
  const PointSpec e = make_point(series[0], 64, 8, 8, 1, 1, 43);
  CHECK(a.point.seed == b.point.seed);
  CHECK(a.point.seed != c.point.seed);
  CHECK(a.point.seed != e.point.seed);
}

TEST_CASE("exact references exist exactly where a closed form is known") {
  SweepRequest rq;
  rq.claim = "C3";
  rq.p = {1, 3};
  const auto series = build_series(rq);
  const PointSpec elementwise3 = make_point(series[2], 32, 6, 4, 1, 1, 1);
  CHECK(exact_norm_sq(elementwise3, Estimand::value).has_value());
  const PointSpec matrix3 = make_point(series[3], 32, 6, 4, 1, 1, 1);
  CHECK_FALSE(exact_norm_sq(matrix3, Estimand::value).has_value());
  const PointSpec matrix1 = make_point(series[1], 32, 6, 4, 1, 1, 1);
  CHECK(*exact_norm_sq(matrix1, Estimand::value) ==
        Approx(*exact_norm_sq(make_point(series[0], 32, 6, 4, 1, 1, 1), Estimand::value)));
  // THEORY.md fact 4 with lambda = 1/sqrt(d): E||S||^2 = N(N-1) D^2 + N (D^2 + 2D), unit sigmas.
  CHECK(*exact_norm_sq(matrix1, Estimand::value) == Approx(32.0 * 31 * 36 + 32 * (36 + 12)).epsilon(1e-12));
}

TEST_CASE("the papers' model keeps its point keys: other score models get their own") {
  SweepRequest rq;
  rq.claim = "C7";
  rq.alpha = std::vector<double>{1.0};
  const auto c7 = build_series(rq);
  const PointSpec with_ln = make_point(c7[0], 64, 8, 8, 1, 1, 42);
  const PointSpec without = make_point(c7[1], 64, 8, 8, 1, 1, 42);
  CHECK(without.key.find("scores") == std::string::npos);
  CHECK(with_ln.key.find(";scores=qk-layernorm") != std::string::npos);
  CHECK(with_ln.point.seed != without.point.seed);
  CHECK(with_ln.point.scores == theory::ScoreModel::projected_layernorm);
}

TEST_CASE("exact laws: the exponent of each closed form as N grows, computed") {
  SweepRequest rq;
  rq.claim = "C4";
  rq.p = {3};
  const auto c4 = build_series(rq);
  const PointSpec pt = make_point(c4[0], 64, 8, 1, 1, 1, 1);
  const auto law = exact_law(pt, Estimand::value);
  REQUIRE(law);
  CHECK(*law->exponent == 0.5);
  CHECK(law->bound);
  // sqrt(E||F||^2) -> sqrt(m_off) N^0.5 with m_off = (2p-1)!! [D]_p^2 [d]_p / d^p = 15 * 960^2 * 15 for D = 8, d = 1.
  CHECK(law->constant == Approx(std::sqrt(15.0 * 960 * 960 * 15)).epsilon(1e-12));
  CHECK_FALSE(exact_law(make_point(c4[1], 64, 8, 1, 1, 1, 1), Estimand::value));  // matrix power: none

  rq.claim = "C6";
  const auto c6 = build_series(rq);
  const auto jacobian = exact_law(make_point(c6[0], 64, 8, 4, 1, 1, 1), Estimand::dK);
  REQUIRE(jacobian);
  CHECK(*jacobian->exponent == 0.5);

  rq.claim = "C7";
  rq.alpha = std::vector<double>{1.0, 0.0};
  const auto c7 = build_series(rq);
  const auto row = exact_law(make_point(c7[0], 64, 8, 8, 1, 1, 1), Estimand::row_sum);
  REQUIRE(row);
  CHECK_FALSE(row->bound);
  CHECK(*row->exponent == 0);  // relu, alpha = 1: O(1)
  CHECK(*exact_law(make_point(c7[0], 64, 8, 8, 1, 1, 1), Estimand::row_mean)->exponent == -1);
  CHECK(*exact_law(make_point(c7[2], 64, 8, 8, 1, 1, 1), Estimand::row_sum)->exponent == 1);  // alpha = 0
  rq.phi = "identity";
  const auto identity = build_series(rq);
  CHECK_FALSE(exact_law(make_point(identity[0], 64, 8, 8, 1, 1, 1), Estimand::row_sum)->exponent);  // E = 0
  rq.phi = "gelu";
  CHECK_FALSE(exact_law(make_point(build_series(rq)[0], 64, 8, 8, 1, 1, 1), Estimand::row_sum));

  rq.phi.reset();
  rq.alpha.reset();
  rq.claim = "C8";
  const auto c8 = build_series(rq);
  const PointSpec sign = make_point(c8[1], 32, 4, 16, 1, 1, 1);
  CHECK(*exact_norm_sq(sign, Estimand::score_var) == 48);  // 3 d_k
  CHECK(*exact_norm_sq(make_point(c8[0], 32, 4, 16, 1, 1, 1), Estimand::score_var) == 16);
  CHECK(*exact_norm_sq(make_point(c8[2], 32, 4, 16, 1, 1, 1), Estimand::score_var) == Approx(16.0 * 16));  // D^2 d
  CHECK(*exact_law(sign, Estimand::score_var)->exponent == 1);
}

TEST_CASE("the variance floor of the second-moment estimator, and values beyond a double") {
  SweepRequest rq;
  rq.claim = "C3";
  rq.p = {4};
  const auto c3 = build_series(rq);
  const ExactMoments m = exact_moments(make_point(c3[0], 8, 16, 4, 1, 1, 1), Estimand::value);
  REQUIRE(m.second);
  REQUIRE(m.second_variance_floor);
  // At N = 8, D = 16, d = 4, p = 4 the same-entry terms alone give Var(||F||^2) >= 6646 (E||F||^2)^2.
  CHECK(*m.second_variance_floor / (*m.second * *m.second) == Approx(6646.19).epsilon(1e-5));
  rq.p = {64};
  const ExactMoments huge = exact_moments(make_point(build_series(rq)[0], 64, 64, 64, 1, 1, 1), Estimand::value);
  CHECK_FALSE(huge.second);
  CHECK(huge.out_of_range);
}
