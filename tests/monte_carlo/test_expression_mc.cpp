// Expression activations (--phi 'EXPR') in the CPU backend: against the built-in activations on the same draws,
// and normalized rows against a dense finite-difference oracle of the whole map.
#include "attncheck/monte_carlo/commands.hpp"
#include "attncheck/monte_carlo/cpu_backend.hpp"
#include "attncheck/monte_carlo/exact_references.hpp"
#include "attncheck/monte_carlo/mc_options.hpp"
#include "attncheck/monte_carlo/proved_bounds.hpp"
#include "attncheck/monte_carlo/sweep.hpp"
#include "attncheck/theory/vocabulary.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

using namespace attncheck;
using namespace attncheck::monte_carlo;
using theory::ActivationKind;
using theory::Index;
using theory::Matrix;
using theory::Pointwise;

namespace {

const std::vector<Estimand> kAll{Estimand::value,   Estimand::dS,       Estimand::dQ,       Estimand::dK,
                                 Estimand::row_sum, Estimand::row_mean, Estimand::score_var};

SweepPoint point_of(const theory::Activation& act, Index N, Index D, Index d, double inner, double sigma_x = 1,
                    theory::ScoreModel scores = theory::ScoreModel::projected) {
  theory::AttentionMap map;
  map.activation = act;
  map.inner = inner;
  map.outer = {0.7, 0.5};
  return make_sweep_point({N, D, d, sigma_x, 1.0}, map, 4242, scores);
}

SampleValues evaluate(const SweepPoint& pt, const std::vector<Estimand>& estimands, Index tile, int threads,
                      std::uint64_t k = 3) {
  SampleInputs in;
  draw_sample(pt, k, in);
  return evaluate_inputs(pt.map, in.X, in.Q, in.K, estimands, {tile, threads, pt.scores});
}

void check_same(const SampleValues& got, const SampleValues& want, const std::vector<Estimand>& estimands,
                double tolerance) {
  for (const Estimand e : estimands) {
    const double g = got[static_cast<int>(e)], w = want[static_cast<int>(e)];
    INFO(theory::term_of(e).word << ": " << g << " vs " << w);
    CHECK(std::isfinite(g));
    CHECK(std::abs(g - w) <= tolerance * std::max(std::abs(w), 1e-300));
  }
}

// F = c phi(S) with each row divided by its sum, dense, for the finite-difference oracle.
Matrix normalized_map(const theory::PhiExpression& e, const Matrix& X, const Matrix& Q, const Matrix& K, double inner,
                      double c) {
  const Matrix S = inner * (X * Q) * (X * K).transpose();
  const theory::PhiProgram program = e.compile(static_cast<double>(S.rows()), static_cast<double>(Q.cols()));
  Matrix F(S.rows(), S.cols()), slope(S.rows(), S.cols());
  std::vector<double> work;
  program.evaluate(S.data(), S.size(), F.data(), slope.data(), work);
  for (Index r = 0; r < F.rows(); ++r) {
    const double z = F.row(r).sum();
    F.row(r) = z == 0 ? Matrix::Zero(1, F.cols()) : Matrix(F.row(r) / z);
  }
  return c * F;
}

}  // namespace

TEST_CASE("expressions equal to built-ins give the built-ins' estimates on the same draws in every estimand") {
  const struct {
    const char* text;
    theory::Activation builtin;
  } cases[] = {{"x^3", {ActivationKind::pointwise, Pointwise::poly, 3}},
               // not a monomial as written, so the expression's own program over score tiles
               {"x*x*x", {ActivationKind::pointwise, Pointwise::poly, 3}},
               {"x*x", {ActivationKind::pointwise, Pointwise::poly, 2}},
               {"x^2", {ActivationKind::pointwise, Pointwise::poly, 2}},
               {"relu(x)", {ActivationKind::pointwise, Pointwise::relu, 1}},
               {"sigmoid(x)", {ActivationKind::pointwise, Pointwise::sigmoid, 1}},
               {"gelu(x)", {ActivationKind::pointwise, Pointwise::gelu, 1}},
               {"relu2(x)", {ActivationKind::pointwise, Pointwise::relu2, 1}}};
  for (const auto& c : cases) {
    for (const auto scores : {theory::ScoreModel::projected, theory::ScoreModel::projected_layernorm}) {
      INFO(c.text << ", scores " << theory::term_of(scores).word);
      const std::vector<Estimand> estimands =
          scores == theory::ScoreModel::projected
              ? kAll
              : std::vector<Estimand>{Estimand::value, Estimand::dS, Estimand::row_sum, Estimand::score_var};
      const theory::Activation expression = parse_phi(c.text, 1);
      REQUIRE(expression.kind == ActivationKind::expression);
      const SweepPoint mine = point_of(expression, 70, 6, 4, 0.5, 1, scores);
      const SweepPoint theirs = point_of(c.builtin, 70, 6, 4, 0.5, 1, scores);
      for (const Index tile : {Index(16), Index(256)}) {
        for (const int threads : {1, 2}) {
          check_same(evaluate(mine, estimands, tile, threads), evaluate(theirs, estimands, tile, threads), estimands,
                     1e-12);
        }
      }
    }
  }
}

TEST_CASE("c x^k runs the built-in x^k's kernels with its norms scaled by |c| and its row sums by c") {
  const theory::Activation cube{ActivationKind::pointwise, Pointwise::poly, 3};
  const SampleValues base = evaluate(point_of(cube, 100, 8, 8, 0.5), kAll, 256, 2);
  const SampleValues exact = evaluate(point_of(parse_phi("x^3", 1), 100, 8, 8, 0.5), kAll, 256, 2);
  const SampleValues scaled = evaluate(point_of(parse_phi("-x^3/6", 1), 100, 8, 8, 0.5), kAll, 256, 2);
  for (const Estimand e : kAll) {
    INFO(theory::term_of(e).word);
    const int i = static_cast<int>(e);
    CHECK(exact[i] == base[i]);
    const bool signed_sum = e == Estimand::row_sum || e == Estimand::row_mean;
    const double factor = e == Estimand::score_var ? 1.0 : (signed_sum ? -1.0 / 6 : 1.0 / 6);
    CHECK(scaled[i] == Approx(factor * base[i]).epsilon(1e-15));
  }
  CHECK_FALSE(theory::PhiExpression::parse("x*x*x").monomial(100, 8));
  CHECK_FALSE(theory::PhiExpression::parse("x^3 + x").monomial(100, 8));
  CHECK(theory::PhiExpression::parse("x^d/N").monomial(100, 8)->power == 8);
}

TEST_CASE("an expression c N^n d^m x^k has x^k's exact moments and laws with its scale") {
  const theory::PhiExpression e = theory::PhiExpression::parse("2*x^3*d/sqrt(N)");
  const auto law = e.power_law();
  REQUIRE(law);
  CHECK(law->coefficient == 2);
  CHECK(law->power == 3);
  CHECK(law->n_exponent == -0.5);
  CHECK(law->d_exponent == 1);
  CHECK_FALSE(theory::PhiExpression::parse("x^3 + x").power_law());
  CHECK_FALSE(theory::PhiExpression::parse("x*x").power_law());
  CHECK_FALSE(theory::PhiExpression::parse("x^3*log(N)").power_law());
  SweepRequest mine, theirs;
  mine.phi = "2*x^3*d/sqrt(N)";
  theirs.phi = "poly";
  theirs.p = {3};
  theirs.outer_scale = "1/sqrt(N)";
  const std::vector<SeriesSpec> a = build_series(mine), b = build_series(theirs);
  for (const Index n : {Index(16), Index(256)}) {
    const PointSpec pa = make_point(a.front(), n, 8, 4, 1, 1, 1), pb = make_point(b.front(), n, 8, 4, 1, 1, 1);
    for (const Estimand est : {Estimand::value, Estimand::dS, Estimand::dQ, Estimand::row_sum}) {
      INFO(theory::term_of(est).word << " at N = " << n);
      const ExactMoments ma = exact_moments(pa, est), mb = exact_moments(pb, est);
      if (mb.second) CHECK(*ma.second == Approx(64.0 * *mb.second).epsilon(1e-14));  // (2 d)^2
      if (mb.mean) CHECK(*ma.mean == Approx(8.0 * *mb.mean).epsilon(1e-14).margin(1e-300));
      const auto la = exact_law(pa, est), lb = exact_law(pb, est);
      REQUIRE(la.has_value() == lb.has_value());
      if (la) CHECK(la->exponent == lb->exponent);
    }
  }
}

TEST_CASE("exp(x) normalized by rows is softmax also where exp(x) alone would overflow") {
  const theory::Activation softmax{ActivationKind::softmax, Pointwise::identity, 1};
  const std::vector<Estimand> estimands{Estimand::value, Estimand::dS,      Estimand::dQ,
                                        Estimand::dK,    Estimand::row_sum, Estimand::row_mean};
  for (const double sigma_x : {0.5, 1.0, 6.0}) {  // at 6 the scores reach past 709, where exp overflows
    INFO("sigma_x " << sigma_x);
    const SweepPoint mine = point_of(parse_phi("exp(x)", 1, "rows"), 90, 8, 4, 0.5, sigma_x);
    const SweepPoint theirs = point_of(softmax, 90, 8, 4, 0.5, sigma_x);
    for (const Index tile : {Index(16), Index(256)}) {
      check_same(evaluate(mine, estimands, tile, 2), evaluate(theirs, estimands, tile, 2), estimands, 1e-12);
    }
    // a temperature is the inner scale: exp(x/2) at lambda is softmax at lambda/2, and its Jacobian in the scores
    // S = lambda T half of softmax's in S/2
    const SweepPoint tempered = point_of(parse_phi("exp(x/2)", 1, "rows"), 90, 8, 4, 1.0, sigma_x);
    const std::vector<Estimand> tempered_estimands{Estimand::value, Estimand::dS, Estimand::dQ};
    SampleValues want = evaluate(theirs, tempered_estimands, 16, 1);
    want[static_cast<int>(Estimand::dS)] /= 2;
    check_same(evaluate(tempered, tempered_estimands, 16, 1), want, tempered_estimands, 1e-12);
  }
}

TEST_CASE("normalized rows of other expressions against a dense finite-difference oracle of the whole map") {
  for (const char* text : {"relu(x)^2", "x^2 + 1", "exp(x/2) + 1/(1 + x^2)", "softplus(x)"}) {
    INFO(text);
    const theory::Activation act = parse_phi(text, 1, "rows");
    const SweepPoint pt = point_of(act, 7, 3, 2, 0.8);
    SampleInputs in;
    draw_sample(pt, 1, in);
    const double c = pt.map.outer.at(pt.N);
    const SampleValues got = evaluate_inputs(pt.map, in.X, in.Q, in.K, kAll, {4, 1});
    const auto F = [&](const Matrix& Q, const Matrix& K) {
      return normalized_map(*act.expression, in.X, Q, K, pt.map.inner, c);
    };
    CHECK(got[static_cast<int>(Estimand::value)] == Approx(F(in.Q, in.K).norm()).epsilon(1e-12));
    CHECK(got[static_cast<int>(Estimand::row_sum)] == Approx(c).epsilon(1e-12));  // every row sums to 1
    // Jacobians in W_Q and W_K by central differences, entry by entry
    const double h = 1e-6;
    for (const bool in_q : {true, false}) {
      const Matrix& W = in_q ? in.Q : in.K;
      double jacobian_sq = 0;
      for (Index e = 0; e < W.size(); ++e) {
        Matrix plus = W, minus = W;
        plus.data()[e] += h;
        minus.data()[e] -= h;
        const Matrix diff = in_q ? Matrix((F(plus, in.K) - F(minus, in.K)) / (2 * h))
                                 : Matrix((F(in.Q, plus) - F(in.Q, minus)) / (2 * h));
        jacobian_sq += diff.squaredNorm();
      }
      CHECK(got[static_cast<int>(in_q ? Estimand::dQ : Estimand::dK)] == Approx(std::sqrt(jacobian_sq)).epsilon(1e-6));
    }
    // In the scores: row i of F moves only with row i of S
    const Matrix S = pt.map.inner * (in.X * in.Q) * (in.X * in.K).transpose();
    const theory::PhiProgram program = act.expression->compile(7, 2);
    const auto row_of = [&](Matrix s_row) {
      Matrix f(1, s_row.cols()), slope(1, s_row.cols());
      std::vector<double> work;
      program.evaluate(s_row.data(), s_row.cols(), f.data(), slope.data(), work);
      return Matrix(c * f / f.sum());
    };
    double ds_sq = 0;
    for (Index r = 0; r < S.rows(); ++r) {
      for (Index k = 0; k < S.cols(); ++k) {
        Matrix plus = S.row(r), minus = S.row(r);
        plus(0, k) += h;
        minus(0, k) -= h;
        ds_sq += ((row_of(plus) - row_of(minus)) / (2 * h)).squaredNorm();
      }
    }
    CHECK(got[static_cast<int>(Estimand::dS)] == Approx(std::sqrt(ds_sq)).epsilon(1e-6));
  }
}

TEST_CASE("a row whose sum is 0 is a row of zeros with no Jacobian: never a NaN") {
  // relu(x - 1000): every score of every row is far below 1000
  const SweepPoint pt = point_of(parse_phi("relu(x - 1000)^2", 1, "rows"), 40, 4, 4, 0.5);
  const SampleValues v = evaluate(pt, kAll, 16, 2);
  for (const Estimand e : {Estimand::value, Estimand::dS, Estimand::dQ, Estimand::dK, Estimand::row_sum}) {
    INFO(theory::term_of(e).word);
    CHECK(v[static_cast<int>(e)] == 0);
  }
}

TEST_CASE("an expression that overflows or leaves its domain is refused naming the score: never averaged") {
  const SweepPoint big = point_of(parse_phi("exp(x^2)", 1), 64, 16, 16, 1.0, 3.0);
  CHECK_THROWS_WITH(evaluate(big, {Estimand::value}, 16, 1), Catch::Contains("--phi 'exp(x^2)'") &&
                                                                 Catch::Contains("not finite") &&
                                                                 Catch::Contains("at the score x ="));
  const SweepPoint root = point_of(parse_phi("sqrt(x)", 1), 32, 4, 4, 1.0);
  CHECK_THROWS_WITH(evaluate(root, {Estimand::row_sum}, 16, 1), Catch::Contains("not finite"));
  // Normalized, exp(x^2) is taken relative to each row's largest exp and stays finite; x^2 exp(x^2) is not.
  const SweepPoint rescaled = point_of(parse_phi("exp(x^2)", 1, "rows"), 64, 16, 16, 1.0, 3.0);
  CHECK(std::isfinite(evaluate(rescaled, {Estimand::dS}, 16, 1)[static_cast<int>(Estimand::dS)]));
  const SweepPoint normalized = point_of(parse_phi("x^2*exp(x^2)", 1, "rows"), 64, 16, 16, 1.0, 3.0);
  CHECK_THROWS_WITH(evaluate(normalized, {Estimand::dS}, 16, 1), Catch::Contains("not finite"));
}

TEST_CASE("the phi option reads a word or an expression and normalize only an expression") {
  CHECK(parse_phi("relu", 1).kind == ActivationKind::pointwise);
  CHECK(parse_phi("relu(x)^2/N", 1).kind == ActivationKind::expression);
  CHECK_THROWS_WITH(parse_phi("reluu", 1),
                    Catch::Contains("'reluu' is not one of") && Catch::Contains("nor an expression in x"));
  CHECK_THROWS_WITH(parse_phi("relu(x", 1), Catch::Contains("--phi: 'relu(x': at character 7"));
  CHECK_THROWS_WITH(parse_phi("relu2", 1, "rows"), Catch::Contains("--phi 'relu2(x)' --normalize rows"));
  CHECK_THROWS_WITH(parse_phi("x^2", 1, "columns"), Catch::Contains("--normalize: 'columns' is not rows"));
  SweepRequest rq;
  rq.claim = "C3";
  rq.normalize = "rows";
  CHECK_THROWS_WITH(build_series(rq), Catch::Contains("--normalize"));
}

TEST_CASE("spellings of one expression name the same points (same seeds) while other maps do not") {
  SweepRequest a, b, c;
  a.phi = "x^3/6 + x";
  b.phi = "(x ** 3)/6+x";
  c.phi = "x^3/6 - x";
  const auto key = [](const SweepRequest& rq) {
    const std::vector<SeriesSpec> series = build_series(rq);
    return make_point(series.front(), 64, 8, 8, 1, 1, 1).key;
  };
  CHECK(key(a) == key(b));
  CHECK(key(a) != key(c));
  a.normalize = "rows";
  CHECK(key(a) != key(b));
}

TEST_CASE("mc with the expression x^3 gives the built-in poly 3 estimates for the same seed") {
  McRequest mine, theirs;
  mine.phi = "x^3";
  theirs.phi = "poly";
  theirs.p = "3";
  for (McRequest* r : {&mine, &theirs}) {
    r->N = "16,64";
    r->D = "8";
    r->d = "8";
    r->samples = "40";
    r->estimand = "value,dQ,row-sum";
    r->seed = 7;
    r->threads = 1;
    r->backend = "cpu";
  }
  const McOutcome a = run_mc(mine, {}), b = run_mc(theirs, {});
  REQUIRE(a.records.size() == b.records.size());
  for (std::size_t k = 0; k < a.records.size(); ++k) {
    INFO(a.records[k].key.label());
    CHECK(a.records[k].seed == b.records[k].seed);
    CHECK(a.records[k].mean == Approx(b.records[k].mean).epsilon(1e-12));
    CHECK(a.records[k].mean_sq == Approx(b.records[k].mean_sq).epsilon(1e-12));
  }
  // Its own key all the same: a folder of one is not resumed as the other.
  CHECK(a.records.front().key.activation != b.records.front().key.activation);
}

TEST_CASE("verdicts for expressions: proofs where the intervals give them and fits never prove") {
  const auto bounds_of = [](const char* text, Estimand estimand, std::optional<std::string> normalize = {}) {
    GrowthCase g;
    g.activation = parse_phi(text, 1, normalize);
    g.estimand = estimand;
    g.d = 8;
    return proved_bounds(g);
  };
  // tanh: |phi| <= 1 for every input (B5), and non-zero on an interval (B6's lower bound): exponent 1 exactly.
  const std::vector<records::ProvedBound> tanh_value = bounds_of("tanh(x)", Estimand::value);
  REQUIRE(decide_by_proof(tanh_value, 1.0));
  CHECK(decide_by_proof(tanh_value, 1.0)->rule->word == records::Verdict::tight);
  CHECK(decide_by_proof(tanh_value, 1.5)->rule->word == records::Verdict::holds);
  CHECK(decide_by_proof(tanh_value, 0.9)->rule->word == records::Verdict::violated);
  // x^3 is unbounded and its exponent is left to the fits; so is anything with N in it past what intervals prove.
  CHECK_FALSE(decide_by_proof(bounds_of("x^3/6 + x", Estimand::value), 1.0));
  CHECK_FALSE(decide_by_proof(bounds_of("x^3/6 + x", Estimand::value), 2.0));
  // tanh(x)/sqrt(N): the intervals give |phi| <= 1 (exponent 1) but no lower bound, so a claim of 1/2 (its true
  // exponent) is not decided by proof
  CHECK_FALSE(decide_by_proof(bounds_of("tanh(x)/sqrt(N)", Estimand::value), 0.5));
  CHECK(decide_by_proof(bounds_of("tanh(x)/sqrt(N)", Estimand::value), 1.0)->rule->word == records::Verdict::holds);
  // c N^n d^m x^k is x^k with c(N) N^n in front: C4's x^3/sqrt(N) gets C4's proofs, the exponent shifted
  CHECK(decide_by_proof(bounds_of("x^3/sqrt(N)", Estimand::value), 0.5)->rule->word == records::Verdict::tight);
  CHECK(decide_by_proof(bounds_of("x^3/sqrt(N)", Estimand::value), 0.4)->rule->word == records::Verdict::violated);
  CHECK(decide_by_proof(bounds_of("2*x^2*d/N", Estimand::dS), 0.0)->rule->word == records::Verdict::tight);
  CHECK_FALSE(decide_by_proof(bounds_of("-x^3", Estimand::value), 1.0));  // c < 0 is left to the fits
  // normalized rows of phi >= 0 are probability vectors: ||F||_F <= sqrt(N)
  CHECK(decide_by_proof(bounds_of("relu(x)^2", Estimand::value, "rows"), 0.5)->rule->word == records::Verdict::holds);
  CHECK_FALSE(decide_by_proof(bounds_of("x^3", Estimand::value, "rows"), 0.5));
}

TEST_CASE("a polynomial expression's coefficients at N and d, and none for anything else") {
  using Coefficients = std::vector<double>;
  CHECK(theory::PhiExpression::parse("x^3/6 + x").polynomial(100, 8) == Coefficients{0, 1, 0, 1.0 / 6});
  CHECK(theory::PhiExpression::parse("(x + 1)^2").polynomial(100, 8) == Coefficients{1, 2, 1});
  CHECK(theory::PhiExpression::parse("x^3/sqrt(N) - x/N + d").polynomial(100, 8) == Coefficients{8, -0.01, 0, 0.1});
  CHECK(theory::PhiExpression::parse("x*x*x").polynomial(4, 4) == Coefficients{0, 0, 0, 1});
  CHECK(theory::PhiExpression::parse("x^d").polynomial(4, 3) == Coefficients{0, 0, 0, 1});
  CHECK(theory::PhiExpression::parse("2").polynomial(4, 4) == Coefficients{2});
  // A number the graph does not fold, to a power past the degree cap: still that number's power.
  const auto unfolded = theory::PhiExpression::parse("((x + 0.5) - x)^100 * x^2").polynomial(4, 4);
  REQUIRE(unfolded);
  CHECK(*unfolded == Coefficients{0, 0, std::pow(0.5, 100)});
  for (const char* other : {"exp(x)", "1/x", "x^-1", "relu(x)", "x^0.5", "abs(x)^2", "x^40", "sqrt(x^2)", "x/(1+x)"}) {
    INFO(other);
    CHECK_FALSE(theory::PhiExpression::parse(other).polynomial(100, 8));
  }
}

TEST_CASE("a polynomial expression's exact second moments agree with the Monte Carlo estimates") {
  // phi = (x - 4)^2 / 2, whose square and whose derivative's square mix every power with comparable weights:
  // E||F||^2, E||dF/dS||^2 and E||dF/dQ||^2 from the score's moments, and E[row sum], against 4000 samples a point
  // (relative standard errors 1-5%); |z| < 4.5 for each of the 12 (two-sided, a false alarm about 7e-6 each).
  // Without its term -4x, E||F||^2 at N = 16 would be 240256, not 307840 (7 standard errors away), and
  // E||dF/dS||^2 4224, not 8320.
  McRequest request;
  request.phi = "(x - 4)^2/2";
  request.estimand = "value,dS,dQ,row-sum";
  request.N = "8,16,32";
  request.D = "4";
  request.d = "4";
  request.samples = "4000";
  request.threads = 2;
  const McOutcome outcome = run_mc(request, {});
  int compared = 0;
  for (const records::PointRecord& r : outcome.records) {
    INFO(theory::term_of(r.key.estimand).word << " at N = " << r.N);
    const auto& z = r.key.estimand == theory::Estimand::row_sum ? r.z_exact_mean : r.z_exact_sq;
    REQUIRE(z);
    CHECK(std::abs(*z) < 4.5);
    ++compared;
  }
  CHECK(compared == 12);
}

TEST_CASE("a polynomial free of N has a law in N from its exact moments, one with N in it has none") {
  SweepRequest free_of_n, with_n;
  free_of_n.phi = "x^3/6 + x";
  with_n.phi = "x*N + x^2";  // E||F||^2 grows like N^4: exponent 2, which one point's entries cannot tell
  const PointSpec a = make_point(build_series(free_of_n).front(), 64, 4, 4, 1, 1, 1);
  const PointSpec b = make_point(build_series(with_n).front(), 64, 4, 4, 1, 1, 1);
  for (const Estimand est : {Estimand::value, Estimand::dS, Estimand::dQ}) {
    INFO(theory::term_of(est).word);
    REQUIRE(exact_law(a, est));
    CHECK(exact_law(a, est)->exponent == 1.0);
    CHECK(exact_moments(b, est).second);  // the point's own moments are exact
    CHECK_FALSE(exact_law(b, est));
  }
  // And so its claim of exponent 1, false, is not decided by a law that is not there.
  McRequest request;
  request.phi = "x*N + x^2";
  request.estimand = "value";
  request.claimed_exponent = 1;
  request.N = "16:128:x2";
  request.D = "4";
  request.d = "4";
  request.samples = "100";
  request.threads = 2;
  const McOutcome outcome = run_mc(request, {});
  REQUIRE(outcome.series.size() == 1);
  CHECK(outcome.series[0].verdict != records::Verdict::holds);
  CHECK(outcome.series[0].verdict != records::Verdict::tight);
}
