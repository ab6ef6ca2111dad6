// Theorem 4.1 and fact 1: the closed forms against explicit Jacobians, the bounds as properties.

#include "test_support.hpp"

#include "attncheck/theory/softmax.hpp"

#include <catch2/catch.hpp>
#include <rapidcheck/catch.h>

#include <cmath>
#include <limits>
#include <vector>

using namespace attncheck;
using theory::Index;
using theory::Matrix;

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();

// Random shape and a scale spanning 1e-3 .. 1e3, so that flat, moderate and near one-hot rows all occur.
struct Case {
  Index rows, cols;
  double scale;
  std::uint64_t seed;
};
rc::Gen<Case> cases(int max_size) {
  return rc::gen::apply(
      [](int rows, int cols, int scale_exponent_tenths, std::uint64_t seed) {
        return Case{rows, cols, std::pow(10.0, scale_exponent_tenths / 10.0), seed};
      },
      rc::gen::inRange(1, max_size + 1), rc::gen::inRange(1, max_size + 1), rc::gen::inRange(-30, 31),
      rc::gen::arbitrary<std::uint64_t>());
}
}  // namespace

TEST_CASE("softmax rows are probability vectors, stable at +-1e308 and -inf") {
  Matrix logits(3, 4);
  logits << 1e308, -1e308, 0, 1e308,  //
      -kInf, 2, -kInf, 2,             //
      -1e308, -1e308, -1e308, -1e308;
  const Matrix s = theory::row_softmax(logits);
  CHECK(s(0, 0) == Approx(0.5));
  CHECK(s(0, 3) == Approx(0.5));
  CHECK(s(0, 1) == 0.0);
  CHECK(s(1, 0) == 0.0);
  CHECK(s(1, 1) == Approx(0.5));
  CHECK(s(2, 2) == Approx(0.25));
  for (Index i = 0; i < 3; ++i) CHECK(s.row(i).sum() == Approx(1.0).epsilon(1e-15));
}

TEST_CASE("NaN, +inf and all -inf rows are errors that name the place") {
  Matrix logits = Matrix::Zero(3, 3);
  logits(2, 1) = std::nan("");
  CHECK_THROWS_WITH(theory::softmax_norms(logits), Catch::Contains("row 2, column 1"));
  logits(2, 1) = kInf;
  CHECK_THROWS_WITH(theory::softmax_norms(logits), Catch::Contains("+inf logit at row 2, column 1"));
  logits.row(2).setConstant(-kInf);
  CHECK_THROWS_WITH(theory::softmax_norms(logits), Catch::Contains("row 2") && Catch::Contains("-inf"));
}

TEST_CASE("fact 1: the stable per-row form equals the textbook expression") {
  rc::prop("sum s^2 - 2 sum s^3 + (sum s^2)^2", [] {
    const Case c = *cases(40);
    const Matrix logits = testing::random_matrix(1, c.cols, std::min(c.scale, 5.0), c.seed);
    const Matrix s = theory::row_softmax(logits);
    const double s2 = s.array().square().sum(), s3 = s.array().cube().sum();
    const double textbook = s2 - 2 * s3 + s2 * s2;
    const auto norms = theory::row_softmax_norms({logits.data(), static_cast<std::size_t>(c.cols)});
    RC_ASSERT(std::abs(norms.jacobian_sq - textbook) <= 1e-14);
    RC_ASSERT(std::abs(norms.softmax_sq - s2) <= 1e-15);
  });
}

TEST_CASE("closed forms equal the explicit block-diagonal Jacobian") {
  rc::prop("||grad softmax(A)||_F from fact 1 == Frobenius norm of the built N^2 x N^2 Jacobian", [] {
    const Case c = *cases(8);
    const Matrix logits = testing::random_matrix(c.rows, c.cols, c.scale, c.seed);
    const Matrix jacobian = theory::explicit_softmax_jacobian(logits);
    const auto norms = theory::softmax_norms(logits);
    // The explicit entries s_j - s_j^2 carry an absolute rounding error of ~1e-16 each (they cancel on near
    // one-hot rows, where the closed form does not), hence the absolute floor beside the 1e-10 relative bound.
    RC_ASSERT(std::abs(norms.grad_fro - jacobian.norm()) <=
              1e-10 * jacobian.norm() + 1e-15 * std::sqrt(static_cast<double>(jacobian.rows())));
    RC_ASSERT(testing::relative_difference(norms.softmax_fro, theory::row_softmax(logits).norm()) <= 1e-14);
  });
}

TEST_CASE("softmax Jacobian rows and columns sum to zero") {
  rc::prop("shift invariance (rows) and conservation of mass (columns)", [] {
    const Case c = *cases(7);
    const Matrix jacobian = theory::explicit_softmax_jacobian(testing::random_matrix(c.rows, c.cols, c.scale, c.seed));
    RC_ASSERT(jacobian.rowwise().sum().cwiseAbs().maxCoeff() <= 1e-15);
    RC_ASSERT(jacobian.colwise().sum().cwiseAbs().maxCoeff() <= 1e-15);
  });
}

TEST_CASE("the explicit Jacobian agrees with finite differences") {
  const Matrix logits = testing::random_matrix(3, 4, 1.5, 7);
  const Matrix fd = testing::finite_difference_jacobian([](const Matrix& a) { return theory::row_softmax(a); }, logits);
  CHECK((fd - theory::explicit_softmax_jacobian(logits)).cwiseAbs().maxCoeff() < 1e-9);
}

TEST_CASE("Theorem 4.1 holds, with the per-row Jacobian term at most 1/4") {
  rc::prop("||softmax||_F <= sqrt(N), ||grad softmax||_F <= sqrt(N)/2 <= 2 sqrt(N)", [] {
    const Case c = *cases(64);
    const Matrix logits = testing::random_matrix(c.rows, c.cols, c.scale, c.seed);
    const auto norms = theory::softmax_norms(logits);
    const auto bounds = theory::softmax_bounds(c.rows);
    RC_ASSERT(norms.softmax_fro <= bounds.softmax_paper * (1 + 1e-14));
    RC_ASSERT(norms.grad_fro <= bounds.grad_tight * (1 + 1e-14));
    RC_ASSERT(norms.max_row_jacobian_sq <= theory::kRowJacobianSqSup * (1 + 1e-14));
  });
}

TEST_CASE("the bound constants equal the matrices that attain them, built explicitly") {
  rc::prop("sqrt(N) at one-hot rows, sqrt(N)/2 at two equal logits, 2 sqrt(N) from the papers' triangle inequality",
           [] {
             const Index rows = *rc::gen::inRange<Index>(1, 65);
             const auto bounds = theory::softmax_bounds(rows);
             // Two equal logits per row: the explicit Jacobian's norm, not the closed form, attains the tight sup.
             const Matrix two_equal = Matrix::Zero(rows, 2);
             RC_ASSERT(testing::relative_difference(theory::explicit_softmax_jacobian(two_equal).norm(),
                                                    bounds.grad_tight) <= 1e-14);
             // One-hot rows attain sqrt(N); on them the papers' per-row bound ||diag(s)||_F + ||s s^T||_F, the
             // triangle inequality on diag(s) - s s^T, is 2, so its sum over rows gives 2 sqrt(N).
             const Index cols = *rc::gen::inRange<Index>(1, 9);
             Matrix one_hot = Matrix::Constant(rows, cols, -kInf);
             for (Index i = 0; i < rows; ++i) one_hot(i, i % cols) = 0.0;
             const Matrix s = theory::row_softmax(one_hot);
             double triangle_sq = 0;
             for (Index i = 0; i < rows; ++i) {
               const Eigen::VectorXd p = s.row(i).transpose();
               const double per_row = Matrix(p.asDiagonal()).norm() + (p * p.transpose()).norm();
               triangle_sq += per_row * per_row;
             }
             RC_ASSERT(testing::relative_difference(s.norm(), bounds.softmax_paper) <= 1e-15);
             RC_ASSERT(testing::relative_difference(std::sqrt(triangle_sq), bounds.grad_paper) <= 1e-15);
           });
}

TEST_CASE("fact 2: two equal top logits approach 1/4 per row, exactly at N = 2") {
  const std::vector<double> pair{3.0, 3.0};
  CHECK(theory::row_softmax_norms(pair).jacobian_sq == 0.25);
  double previous = 0;
  for (const double gap : {1.0, 3.0, 10.0, 20.0}) {
    std::vector<double> row(256, -gap);
    row[17] = row[200] = 0;
    const double value = theory::row_softmax_norms(row).jacobian_sq;
    CHECK(value > previous);
    CHECK(value < 0.25);
    previous = value;
  }
  CHECK(previous == Approx(0.25).epsilon(1e-5));
  std::vector<double> far(256, -40.0);
  far[3] = far[4] = 0;
  CHECK(theory::row_softmax_norms(far).jacobian_sq == Approx(0.25).epsilon(1e-14));
}

TEST_CASE("known rows: one-hot gives sqrt(N) and a zero Jacobian, uniform gives 1 and sqrt(1 - 1/N)") {
  const Index n = 50;
  Matrix one_hot = Matrix::Constant(n, n, -kInf);
  for (Index i = 0; i < n; ++i) one_hot(i, (i * 7) % n) = 1.0;
  const auto hot = theory::softmax_norms(one_hot);
  CHECK(hot.softmax_fro == Approx(std::sqrt(50.0)).epsilon(1e-15));
  CHECK(hot.grad_fro == 0.0);
  const auto flat = theory::softmax_norms(Matrix::Constant(n, n, 4.0));
  CHECK(flat.softmax_fro == Approx(1.0).epsilon(1e-14));
  CHECK(flat.grad_fro == Approx(std::sqrt(1.0 - 1.0 / n)).epsilon(1e-14));
}

TEST_CASE("near one-hot rows keep relative accuracy where the textbook expression cancels") {
  // s = (1 - eps, eps): exact Jacobian term 2 eps^2 (1 - eps)^2 + 2 eps^2 (1 - eps)^2 = 4 eps^2 (1-eps)^2.
  const std::vector<double> row{0.0, -30.0};
  const double eps = std::exp(-30.0) / (1 + std::exp(-30.0));
  const double exact = 4 * eps * eps * (1 - eps) * (1 - eps);
  CHECK(testing::relative_difference(theory::row_softmax_norms(row).jacobian_sq, exact) < 1e-13);
}

TEST_CASE("softmax row entropy: -sum a log a, log n for uniform rows, digits kept near one-hot") {
  rc::prop("equals the textbook sum and lies in [0, log n]", [] {
    const Case c = *cases(40);
    const Matrix logits = testing::random_matrix(1, c.cols, std::min(c.scale, 5.0), c.seed);
    const Matrix a = theory::row_softmax(logits);
    double textbook = 0;
    for (Index j = 0; j < c.cols; ++j) textbook -= a(0, j) > 0 ? a(0, j) * std::log(a(0, j)) : 0.0;
    const double entropy = theory::softmax_row_entropy({logits.data(), static_cast<std::size_t>(c.cols)});
    RC_ASSERT(std::abs(entropy - textbook) <= 1e-13);
    RC_ASSERT(entropy >= 0);
    RC_ASSERT(entropy <= std::log(static_cast<double>(c.cols)) + 1e-14);
  });
  const std::vector<double> uniform(7, 3.5);
  CHECK(theory::softmax_row_entropy(uniform) == Approx(std::log(7.0)).epsilon(1e-15));
  // -inf logits (masked keys) carry no mass: two equal finite logits are one bit.
  CHECK(theory::softmax_row_entropy(std::vector<double>{1, -kInf, 1}) == Approx(std::log(2.0)).epsilon(1e-15));
  // {0, -40}: H = log(1 + e) + 40 e / (1 + e) with e = exp(-40), about 41 e. The textbook sum rounds the top
  // probability to 1 and returns 40 e, 2.4% low.
  const double e = std::exp(-40.0);
  const double exact = std::log1p(e) + 40 * e / (1 + e);
  CHECK(theory::softmax_row_entropy(std::vector<double>{0, -40}) == Approx(exact).epsilon(1e-14));
  Matrix rows(2, 2);
  rows << 0, 0, 5, 5;
  CHECK(theory::mean_softmax_row_entropy(rows) == Approx(std::log(2.0)).epsilon(1e-15));
  rows(1, 0) = std::nan("");
  CHECK_THROWS_WITH(theory::mean_softmax_row_entropy(rows), Catch::Contains("row 1, column 0"));
}

TEST_CASE("fact 13: ||A||_F / sqrt(N) is at least exp(-mean row entropy / 2)") {
  rc::prop("on rows from flat to near one-hot", [] {
    const Case c = *cases(30);
    const Matrix logits = testing::random_matrix(c.rows, c.cols, c.scale, c.seed);
    const double ratio = theory::softmax_norms(logits).softmax_fro / std::sqrt(static_cast<double>(c.rows));
    const double entropy = theory::mean_softmax_row_entropy(logits);
    RC_ASSERT(ratio >= std::exp(-entropy / 2) * (1 - 1e-14));
  });
  // Half the rows one-hot, half uniform over n: ratio sqrt((1 + 1/n) / 2), mean entropy log(n) / 2.
  const Index n = 64;
  Matrix logits = Matrix::Zero(2, n);
  logits(0, 0) = 1e6;
  CHECK(theory::mean_softmax_row_entropy(logits) == Approx(std::log(64.0) / 2).epsilon(1e-14));
  CHECK(theory::softmax_norms(logits).softmax_fro / std::sqrt(2.0) == Approx(std::sqrt((1 + 1.0 / n) / 2)));
}
