#include "attncheck/theory/expression.hpp"
#include "attncheck/theory/pointwise.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <string>
#include <vector>

using namespace attncheck::theory;

namespace {

struct Values {
  std::vector<double> value, derivative;
};

Values run(const PhiProgram& program, const std::vector<double>& x) {
  Values out{std::vector<double>(x.size()), std::vector<double>(x.size())};
  std::vector<double> work;
  program.evaluate(x.data(), static_cast<Index>(x.size()), out.value.data(), out.derivative.data(), work);
  return out;
}

double at(const PhiProgram& program, double x) { return run(program, {x}).value[0]; }

}  // namespace

TEST_CASE("expressions read as written with precedence and canonical text and the symbolic derivative") {
  const auto check = [](const char* text, const char* canonical, const char* derivative) {
    const PhiExpression e = PhiExpression::parse(text);
    CHECK(e.text() == canonical);
    CHECK(e.derivative_text() == derivative);
  };
  check("x^3", "x^3", "3*x^2");
  check("x ** 3 / 6 + x", "x^3/6 + x", "3*x^2/6 + 1");
  check("-x^2", "-x^2", "-(2*x)");
  check("2^-x", "2^(-x)", "-0.6931471805599453*2^(-x)");
  check("sigmoid(x - log(N))", "sigmoid(x - log(N))", "sigmoid(x - log(N))*(1 - sigmoid(x - log(N)))");
  check("relu2(x)", "relu(x)^2", "2*relu(x)*step(x)");
  check("poly(x, 4)", "x^4", "4*x^3");
  check("identity(x)/d", "x/d", "1/d");
  check("x^(N - 1)", "x^(N - 1)", "(N - 1)*x^(N - 1 - 1)");
  check("tanh(x)", "tanh(x)", "1 - tanh(x)^2");
  check("gelu(x)", "gelu(x)", "normal_cdf(x) + x*normal_pdf(x)");
  check("x*(2*x)", "x*(2*x)", "2*x + 2*x");
  check("(1 + x) + (2 + x)", "1 + x + (2 + x)", "2");
  // Spacing and parentheses do not change the canonical text, which names the sweep's points; the printed text
  // reads back as itself.
  for (const char* text : {"x*(2*x)", "x*(-x*N/3)", "x - (x - 1)/(2/x)", "-(x^2)^3", "2^(-x)^2"}) {
    INFO(text);
    const std::string printed = PhiExpression::parse(text).text();
    CHECK(PhiExpression::parse(printed).text() == printed);
  }
  // A derivative that prints far longer than its graph (nested max repeats its inner derivative) is cut.
  std::string nested = "x";
  for (int k = 0; k < 40; ++k) nested = "max(" + nested + ", 0)";
  CHECK(PhiExpression::parse(nested).derivative_text().size() < 4100);
  CHECK(PhiExpression::parse("((x)^(3))").text() == PhiExpression::parse("x^3").text());
}

TEST_CASE("the built-in names as functions give the built-in activations' values and derivatives bit for bit") {
  std::mt19937_64 rng(20261128);
  std::normal_distribution<double> normal(0, 3);
  std::vector<double> x(257);
  for (double& v : x) v = normal(rng);
  x[0] = 0;
  x[1] = 6;
  const struct {
    const char* text;
    Pointwise h;
    int p;
  } cases[] = {
      {"relu(x)", Pointwise::relu, 1},         {"relu2(x)", Pointwise::relu2, 1}, {"gelu(x)", Pointwise::gelu, 1},
      {"softplus(x)", Pointwise::softplus, 1}, {"relu6(x)", Pointwise::relu6, 1}, {"sigmoid(x)", Pointwise::sigmoid, 1},
      {"identity(x)", Pointwise::identity, 1}, {"x^2", Pointwise::poly, 2},       {"x^3", Pointwise::poly, 3},
      {"poly(x, 5)", Pointwise::poly, 5}};
  for (const auto& c : cases) {
    INFO(c.text);
    const Values got = run(PhiExpression::parse(c.text).compile(64, 8), x);
    for (std::size_t k = 0; k < x.size(); ++k) {
      INFO("x = " << x[k]);
      if (c.h == Pointwise::poly) {
        // x^p as products in another order: the last bit may differ
        CHECK(got.value[k] == Approx(pointwise_value(c.h, c.p, x[k])).epsilon(1e-15).margin(1e-300));
        CHECK(got.derivative[k] == Approx(pointwise_derivative(c.h, c.p, x[k])).epsilon(1e-15).margin(1e-300));
      } else {
        CHECK(got.value[k] == pointwise_value(c.h, c.p, x[k]));
        CHECK(got.derivative[k] == pointwise_derivative(c.h, c.p, x[k]));
      }
    }
  }
}

TEST_CASE("every derivative agrees with central differences at random points") {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> uniform(-3, 3);
  const char* expressions[] = {
      "x^3/6 + x",     "sigmoid(x - log(N))", "relu(x)^2/N",    "tanh(x)*erf(x/2)", "exp(x/2)/(1 + x^2)", "abs(x)^1.5",
      "sqrt(1 + x^2)", "log(1 + exp(x))",     "min(x, x^2)",    "max(x^3, 0.5*x)",  "softplus(2*x)/d",    "gelu(x)*x",
      "x^d",           "(1 + x^2)^(0.5*x)",   "relu6(3*x + 1)", "x/(2 + tanh(x))"};
  for (const char* text : expressions) {
    INFO(text);
    const PhiProgram program = PhiExpression::parse(text).compile(64, 3);
    for (int trial = 0; trial < 40; ++trial) {
      const double x = uniform(rng);
      const double h = 1e-6 * std::max(1.0, std::abs(x));
      const double slope = run(program, {x}).derivative[0];
      const double numeric = (at(program, x + h) - at(program, x - h)) / (2 * h);
      INFO("x = " << x);
      CHECK(slope == Approx(numeric).epsilon(1e-6).margin(1e-8));
    }
  }
}

TEST_CASE("bad expressions are refused with the position and what was expected") {
  const auto refused = [](const char* text, const char* what) {
    INFO(text);
    CHECK_THROWS_WITH(PhiExpression::parse(text), Catch::Contains(what));
  };
  refused("x^", "at character 3: expected a number, a name or '(', found the end");
  refused("x^3 x", "at character 5: unexpected 'x'");
  refused("foo(x)", "unknown name 'foo'");
  refused("2*y", "at character 3: unknown name 'y'");
  refused("min(x)", "min takes 2 arguments, got 1");
  refused("relu", "relu is a function: write relu(x)");
  refused("softmax(x)", "write exp(x) and add --normalize rows");
  refused("(x + 1", "expected ')'");
  refused("", "the expression is empty");
  refused("x $ 2", "unexpected '$'");
  refused("poly(x, 2.5)", "poly(u, p) needs p a whole number");
  refused("1e999*x", "is not a finite number");
  refused(std::string(300, '(').c_str(), "nested more than");
  refused(std::string(5000, 'x').c_str(), "at most 4096");
  refused("log(0)*x", "a part without x evaluates to -inf");
  CHECK_THROWS_WITH(PhiExpression::parse("x^", "--what-if"), Catch::StartsWith("--what-if: 'x^'"));
}

TEST_CASE("interval arithmetic proves the bounds of bounded expressions and none for unbounded ones") {
  // The bounds are widened by 1e-12 relative, far beyond the intervals' rounding (so never below the true sup).
  const auto sup = [](const char* text) { return PhiExpression::parse(text).value_sup(); };
  const auto slope_sup = [](const char* text) { return PhiExpression::parse(text).derivative_sup(); };
  CHECK(*sup("sigmoid(x)") == Approx(1.0).epsilon(1e-11));
  CHECK(*sup("sigmoid(x - log(N))") == Approx(1.0).epsilon(1e-11));  // for every N >= 1
  CHECK(*sup("tanh(x)") == Approx(1.0).epsilon(1e-11));
  CHECK(*sup("2*erf(x)") == Approx(2.0).epsilon(1e-11));
  CHECK(*sup("relu6(x)") == Approx(6.0).epsilon(1e-11));
  CHECK(*sup("min(max(x, 0), 6)") == Approx(6.0).epsilon(1e-11));
  CHECK(*sup("1/(1 + x^2)") == Approx(1.0).epsilon(1e-11));
  CHECK(*sup("exp(-x^2)") == Approx(1.0).epsilon(1e-11));
  CHECK(*sup("sigmoid(x)*(1 - sigmoid(x))") >= 0.25);  // a valid bound, not the least (intervals miss cancellation)
  CHECK_FALSE(sup("gelu(x) - relu(x)"));               // bounded, but not by intervals: no proof, which is safe
  CHECK_THROWS_WITH(sup("abs(min(sqrt(-1), x))"), Catch::Contains("evaluates to"));  // NaN: refused
  CHECK_FALSE(sup("x^3"));
  CHECK_FALSE(sup("relu(x)^2/N"));  // N >= 1 does not bound relu^2
  CHECK_FALSE(sup("1/x"));
  CHECK_FALSE(sup("log(x)"));
  CHECK_FALSE(sup("x*N"));
  CHECK(*slope_sup("tanh(x)") == Approx(1.0).epsilon(1e-11));
  CHECK(*slope_sup("sigmoid(x)") >= 0.25);
  CHECK(*slope_sup("relu(x)") == Approx(1.0).epsilon(1e-11));
  CHECK(*slope_sup("2*erf(x)") == Approx(4 / std::sqrt(3.14159265358979323846)).epsilon(1e-11));
  CHECK_FALSE(slope_sup("x^2"));
  CHECK(PhiExpression::parse("relu(x)^2").value_inf() == 0);
  CHECK(PhiExpression::parse("exp(x/2)").value_inf() == 0);
  CHECK(PhiExpression::parse("x^3").value_inf() == -INFINITY);
  // Non-zero somewhere (the lower bounds' premise), read only where N and d are absent.
  CHECK(PhiExpression::parse("relu(x - 3)").nonzero_somewhere(false));
  CHECK_FALSE(PhiExpression::parse("x - x").nonzero_somewhere(false));
  CHECK_FALSE(PhiExpression::parse("relu(-abs(x))").nonzero_somewhere(false));
  CHECK_FALSE(PhiExpression::parse("x/N").nonzero_somewhere(false));
  CHECK_FALSE(PhiExpression::parse("3 + 0*x").nonzero_somewhere(true));
  // Non-zero at a single point (one of those looked at) is not non-zero on an interval.
  CHECK_FALSE(PhiExpression::parse("1 - abs(sign(x - 0.5772156649))").nonzero_somewhere(false));
  CHECK(PhiExpression::parse("relu(x)").nonzero_somewhere(true));
  CHECK(PhiExpression::parse("tanh(x)/N").nonzero_somewhere(false) == false);  // -> 0 as N grows
}

TEST_CASE("values outside the domain are left non-finite for the caller to report: never a crash") {
  const Values one_over = run(PhiExpression::parse("1/x").compile(8, 8), {0.0, 2.0});
  CHECK(std::isinf(one_over.value[0]));
  CHECK(one_over.value[1] == 0.5);
  const Values big = run(PhiExpression::parse("exp(x^2)").compile(8, 8), {30.0});
  CHECK(std::isinf(big.value[0]));
  const Values root = run(PhiExpression::parse("sqrt(x)").compile(8, 8), {-1.0});
  CHECK(std::isnan(root.value[0]));
}

TEST_CASE("N and d take the sweep point's values") {
  const PhiExpression e = PhiExpression::parse("x*N + d");
  CHECK(e.uses_sizes());
  CHECK(at(e.compile(16, 4), 2.0) == 36.0);
  CHECK(at(e.compile(1024, 64), 0.5) == 576.0);
  CHECK_FALSE(PhiExpression::parse("x^3").uses_sizes());
  // exp's exponent alone, for the rows' rescaling under --normalize rows
  const auto exponent = PhiExpression::parse("exp(x/2 - log(N))").compile_exponent(16, 4);
  REQUIRE(exponent);
  const Values u = run(*exponent, {3.0});
  CHECK(u.value[0] == Approx(1.5 - std::log(16.0)).epsilon(1e-15));
  CHECK(u.derivative[0] == 0.5);
  CHECK_FALSE(PhiExpression::parse("relu(x)^2").compile_exponent(16, 4));
}
