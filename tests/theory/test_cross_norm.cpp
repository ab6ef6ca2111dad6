// Facts 10-11 (claim C9): the closed forms against explicit Jacobians and finite differences, the bounds as
// properties over random inputs, and the tight families reaching them.

#include "test_support.hpp"

#include "attncheck/theory/cross_norm.hpp"
#include "attncheck/theory/softmax.hpp"

#include <catch2/catch.hpp>
#include <rapidcheck/catch.h>

#include <cmath>
#include <span>
#include <vector>

using namespace attncheck;
using testing::finite_difference_jacobian;
using testing::random_matrix;
using testing::relative_difference;
using theory::Index;
using theory::Matrix;

TEST_CASE("column softmax: every column is a probability vector: fact 10's norms per column") {
  const Matrix values = random_matrix(7, 3, 2.0, 11);
  const Matrix p = theory::column_softmax(values);
  for (Index k = 0; k < 3; ++k) CHECK(p.col(k).sum() == Approx(1).epsilon(1e-15));
  const Matrix transposed_softmax = theory::row_softmax(Matrix(values.transpose()));
  CHECK((p - transposed_softmax.transpose()).cwiseAbs().maxCoeff() < 1e-16);
  const auto norms = theory::column_softmax_norms(values);
  CHECK(norms.softmax_fro == Approx(p.norm()).epsilon(1e-14));
  // The Jacobian of the column map, by finite differences, against the closed form.
  const Matrix jacobian = finite_difference_jacobian([](const Matrix& v) { return theory::column_softmax(v); }, values);
  CHECK(relative_difference(norms.grad_fro, jacobian.norm()) < 1e-8);
}

TEST_CASE("fact 10 is tight: one-hot columns reach sqrt(d_v), two equal tops reach sqrt(d_v)/2") {
  const Index n = 6, dv = 4;
  Matrix one_hot = Matrix::Zero(n, dv), two_tops = Matrix::Zero(n, dv);
  for (Index k = 0; k < dv; ++k) {
    one_hot(k, k) = 800;  // exp(-800) underflows: the column is exactly one-hot
    two_tops(k, k) = two_tops(k + 1, k) = 800;
  }
  const auto bounds = theory::cross_norm_bounds(n, dv);
  CHECK(theory::column_softmax_norms(one_hot).softmax_fro == Approx(bounds.column_softmax).epsilon(1e-15));
  CHECK(theory::column_softmax_norms(two_tops).grad_fro == Approx(bounds.column_grad).epsilon(1e-15));
}

TEST_CASE("fact 11 closed forms equal the explicit Jacobians, for every alpha") {
  for (const double alpha : {1.0, 0.0, 0.3, 1.7}) {
    CAPTURE(alpha);
    const Matrix scores = random_matrix(5, 5, 1.5, 21);
    const Matrix values = random_matrix(5, 3, 1.2, 22);
    const Matrix attention = theory::row_softmax(scores);
    const auto norms = theory::cross_norm_norms(attention, values, alpha);
    const Matrix output = attention * theory::mixed_values(values, alpha);
    CHECK(norms.output_fro == Approx(output.norm()).epsilon(1e-14));
    const Matrix jv = theory::explicit_cross_norm_jacobian_values(attention, values, alpha);
    const Matrix js = theory::explicit_cross_norm_jacobian_scores(scores, values, alpha);
    CHECK(relative_difference(norms.grad_values_fro, jv.norm()) < 1e-13);
    CHECK(relative_difference(norms.grad_scores_fro, js.norm()) < 1e-13);
    // The explicit Jacobians themselves against central differences of O.
    const Matrix fd_values =
        finite_difference_jacobian([&](const Matrix& v) { return Matrix(attention * theory::mixed_values(v, alpha)); },
                                   values);
    const Matrix fd_scores = finite_difference_jacobian(
        [&](const Matrix& s) { return Matrix(theory::row_softmax(s) * theory::mixed_values(values, alpha)); }, scores);
    CHECK((jv - fd_values).cwiseAbs().maxCoeff() < 1e-8);
    CHECK((js - fd_scores).cwiseAbs().maxCoeff() < 1e-8);
  }
}

TEST_CASE("the projection derivatives equal the chain rule through the explicit score Jacobian") {
  const Index n = 6, model = 4, head = 3, dv = 2;
  const Matrix x = random_matrix(n, model, 1.0, 31);
  const Matrix wq = random_matrix(model, head, 0.7, 32), wk = random_matrix(model, head, 0.7, 33);
  const Matrix values = random_matrix(n, dv, 1.0, 34);
  const Matrix q = x * wq, u = x * wk;
  const Matrix scores = q * u.transpose();
  for (const double alpha : {1.0, 0.4}) {
    CAPTURE(alpha);
    const Matrix attention = theory::row_softmax(scores);
    const Matrix mixed = theory::mixed_values(values, alpha);
    const auto o_of_wq = [&](const Matrix& w) {
      return Matrix(theory::row_softmax(Matrix(x * w * u.transpose())) * mixed);
    };
    const auto o_of_wk = [&](const Matrix& w) {
      return Matrix(theory::row_softmax(Matrix(q * (x * w).transpose())) * mixed);
    };
    const double fd_q = finite_difference_jacobian(o_of_wq, wq).squaredNorm();
    const double fd_k = finite_difference_jacobian(o_of_wk, wk).squaredNorm();
    const theory::Vector x_sq = x.rowwise().squaredNorm();
    const theory::Vector q_sq = q.rowwise().squaredNorm();
    CHECK(relative_difference(theory::cross_norm_projection_grad_sq(attention, mixed, x_sq, u), fd_q) < 1e-8);
    CHECK(relative_difference(theory::cross_norm_projection_grad_sq(attention, mixed, q_sq, x), fd_k) < 1e-8);
  }
}

TEST_CASE("fact 11's bounds hold for every row-stochastic A and every V (alpha = 1)") {
  rc::prop("||O||, ||dO/dV||, ||dO/dS|| within sqrt(N d_v), sqrt(N d_v / 8), sqrt(N d_v / 8)", [](std::uint64_t seed) {
    const Index n = *rc::gen::inRange(1, 12), dv = *rc::gen::inRange(1, 6);
    const double score_sd = std::pow(10.0, *rc::gen::inRange(-20, 30) / 10.0);
    const double value_sd = std::pow(10.0, *rc::gen::inRange(-20, 30) / 10.0);
    const auto norms = theory::cross_norm_norms_from_scores(random_matrix(n, n, score_sd, seed, 1),
                                                            random_matrix(n, dv, value_sd, seed, 2));
    const auto bounds = theory::cross_norm_bounds(n, dv);
    RC_ASSERT(norms.output_fro <= bounds.output * (1 + 1e-14));
    RC_ASSERT(norms.grad_values_fro <= bounds.grad_values * (1 + 1e-14));
    RC_ASSERT(norms.grad_scores_fro <= bounds.grad_scores * (1 + 1e-14));
  });
}

TEST_CASE("fact 11 is tight: the constructions reach each bound") {
  const Index n = 5, dv = 3;
  const auto bounds = theory::cross_norm_bounds(n, dv);
  // ||O||: every row of A one-hot on token 0, every column of P one-hot on token 0.
  Matrix one_hot_rows = Matrix::Zero(n, n);
  one_hot_rows.col(0).setOnes();
  Matrix peaked = Matrix::Zero(n, dv);
  peaked.row(0).setConstant(800);
  CHECK(theory::cross_norm_norms(one_hot_rows, peaked).output_fro == Approx(bounds.output).epsilon(1e-15));
  // ||dO/dV||: A one-hot on token 0, each column of P with 1/2 on token 0 and 1/2 on token 1.
  Matrix halves = Matrix::Zero(n, dv);
  halves.row(0).setConstant(800);
  halves.row(1).setConstant(800);
  CHECK(theory::cross_norm_norms(one_hot_rows, halves).grad_values_fro == Approx(bounds.grad_values).epsilon(1e-15));
  // ||dO/dS||: each row of A = (1/2, 1/2, 0, ...), every column of P one-hot on token 0.
  Matrix half_rows = Matrix::Zero(n, n);
  half_rows.col(0).setConstant(0.5);
  half_rows.col(1).setConstant(0.5);
  CHECK(theory::cross_norm_norms(half_rows, peaked).grad_scores_fro == Approx(bounds.grad_scores).epsilon(1e-15));
}

TEST_CASE("for alpha < 1 the output and its score derivative are unbounded in V, the V derivative is not") {
  const Matrix scores = random_matrix(6, 6, 1.0, 41);
  const Matrix direction = random_matrix(6, 2, 1.0, 42);
  const auto at = [&](double t) { return theory::cross_norm_norms_from_scores(scores, t * direction, 0.5); };
  const auto small = at(10), large = at(1000);
  // Linear growth in t for alpha < 1: a hundredfold scale gives about a hundredfold norm.
  CHECK(large.output_fro / small.output_fro > 50);
  CHECK(large.grad_scores_fro / small.grad_scores_fro > 50);
  CHECK(large.grad_values_fro < 2 * small.grad_values_fro);
  // At alpha = 1 the same family stays within fact 11's bounds.
  const auto bounds = theory::cross_norm_bounds(6, 2);
  CHECK(theory::cross_norm_norms_from_scores(scores, 1000 * direction, 1.0).output_fro <= bounds.output);
}

TEST_CASE("bad inputs to the cross-normalization routines name the bad value") {
  Matrix attention = Matrix::Constant(3, 3, 1.0 / 3), values = Matrix::Zero(3, 2);
  values(1, 1) = std::nan("");
  CHECK_THROWS_WITH(theory::column_softmax(values), Catch::Contains("V[1][1]"));
  values(1, 1) = 0;
  attention(2, 0) = 0.5;
  CHECK_THROWS_WITH(theory::cross_norm_norms(attention, values), Catch::Contains("row 2"));
  CHECK_THROWS_WITH(theory::cross_norm_norms(Matrix::Constant(3, 3, 1.0 / 3), Matrix::Zero(4, 2)),
                    Catch::Contains("shapes disagree"));
  CHECK_THROWS_WITH(theory::mixed_values(values, std::nan("")), Catch::Contains("alpha"));
}

TEST_CASE("fact 11's per-(row, column) term: its sums over rows and columns are the two squared Jacobian norms") {
  const Index n = 7, dv = 3;
  const Matrix scores = random_matrix(n, n, 2.0, 51), values = random_matrix(n, dv, 2.0, 52);
  const Matrix attention = theory::row_softmax(scores), probabilities = theory::column_softmax(values);
  double through_scores = 0, through_values = 0;
  for (Index i = 0; i < n; ++i) {
    const Eigen::VectorXd a = attention.row(i).transpose();
    for (Index k = 0; k < dv; ++k) {
      const Eigen::VectorXd p = probabilities.col(k);
      const std::span<const double> a_span(a.data(), n), p_span(p.data(), n);
      through_scores += theory::cross_norm_term_sq(a_span, p_span);
      through_values += theory::cross_norm_term_sq(p_span, a_span);
    }
  }
  const auto norms = theory::cross_norm_norms(attention, values);
  CHECK(relative_difference(std::sqrt(through_scores), norms.grad_scores_fro) < 1e-13);
  CHECK(relative_difference(std::sqrt(through_values), norms.grad_values_fro) < 1e-13);
  // The sup 1/8, at x = (1/2, 1/2, 0), y = e_1.
  const std::vector<double> halves{0.5, 0.5, 0.0}, first{1.0, 0.0, 0.0};
  CHECK(theory::cross_norm_term_sq(halves, first) == theory::kCrossNormTermSqSup);
  CHECK_THROWS_WITH(theory::cross_norm_term_sq(halves, std::vector<double>{1.0, 0.0}),
                    Catch::Contains("3 weights and 2 probabilities"));
}
