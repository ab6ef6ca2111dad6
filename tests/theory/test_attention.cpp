// Fact 7: closed-form Jacobian norms in Q, K and the scores against explicitly built Jacobians and finite
// differences, for every activation.

#include "test_support.hpp"

#include "attncheck/theory/vocabulary.hpp"
#include "attncheck/theory/attention.hpp"
#include "attncheck/theory/softmax.hpp"

#include <catch2/catch.hpp>
#include <rapidcheck/catch.h>

#include <cmath>
#include <limits>
#include <optional>
#include <vector>

using namespace attncheck;
using theory::ActivationKind;
using theory::AttentionMap;
using theory::Index;
using theory::Matrix;
using theory::Pointwise;

namespace {

std::vector<AttentionMap> every_differentiable_map(Index d) {
  const double inner = 1 / std::sqrt(static_cast<double>(d));
  std::vector<AttentionMap> maps;
  maps.push_back({{ActivationKind::softmax}, inner, {}});
  maps.push_back({{ActivationKind::softmax}, 0.7, {1, 0.5}});
  for (int p = 1; p <= 4; ++p) maps.push_back({{ActivationKind::pointwise, Pointwise::poly, p}, inner, {1, 0.5}});
  maps.push_back({{ActivationKind::pointwise, Pointwise::poly, 3}, 1.0, {inner, 0}});  // C5: sqrt(d) outside
  for (const theory::ActivationTerm& term : theory::all_activations()) {
    if (term.kind != ActivationKind::pointwise || term.takes_p) continue;
    maps.push_back({{ActivationKind::pointwise, term.h, 1}, inner, {1, 1.0}});  // relu paper: N^-1 h(.)
  }
  return maps;
}

struct Shapes {
  Index n, D, d;
  double sd;
  std::uint64_t seed;
};
rc::Gen<Shapes> shapes() {
  return rc::gen::apply(
      [](int n, int D, int d, int sd_tenths, std::uint64_t seed) {
        return Shapes{n, D, d, sd_tenths / 10.0, seed};
      },
      rc::gen::inRange(1, 6), rc::gen::inRange(1, 5), rc::gen::inRange(1, 4), rc::gen::inRange(3, 25),
      rc::gen::arbitrary<std::uint64_t>());
}

// A head's input, projections and biases (N(0, 1), biases N(0, 0.25)) from one seed.
struct BiasedHead {
  Matrix X, Q, K;
  Eigen::RowVectorXd bq, bk;
};

BiasedHead biased_head(Index n, Index D, Index d, std::uint64_t seed) {
  const Matrix biases = testing::random_matrix(2, d, 0.5, seed, 3);
  return {testing::random_matrix(n, D, 1.0, seed, 0), testing::random_matrix(D, d, 1.0, seed, 1),
          testing::random_matrix(D, d, 1.0, seed, 2), biases.row(0), biases.row(1)};
}

// Which entries a dense reference keeps: j <= i when causal, and the explicit mask when given.
bool kept(Index i, Index j, bool causal, const theory::AttendedMask* attended) {
  return (!causal || j <= i) && (!attended || (*attended)(i, j));
}

// Dense F with an optional causal or explicit mask and biased projections, written independently of the
// closed forms.
Matrix dense_attention(const AttentionMap& map, const Matrix& X, const Matrix& Q, const Matrix& K,
                       const Eigen::RowVectorXd& bias_q, const Eigen::RowVectorXd& bias_k, bool causal,
                       const theory::AttendedMask* attended = nullptr) {
  const Matrix V = (X * Q).rowwise() + bias_q, U = (X * K).rowwise() + bias_k;
  Matrix S = map.inner * V * U.transpose();
  const Index n = X.rows();
  const double c = map.outer.at(n);
  if (map.activation.kind == ActivationKind::softmax) {
    for (Index i = 0; i < n; ++i)
      for (Index j = 0; j < n; ++j)
        if (!kept(i, j, causal, attended)) S(i, j) = -std::numeric_limits<double>::infinity();
    return c * theory::row_softmax(S);
  }
  Matrix F = S.unaryExpr([&](double s) { return c * theory::pointwise_value(map.activation.h, map.activation.p, s); });
  for (Index i = 0; i < n; ++i)
    for (Index j = 0; j < n; ++j)
      if (!kept(i, j, causal, attended)) F(i, j) = 0;
  return F;
}

}  // namespace

TEST_CASE("closed-form ||dF/dQ||, ||dF/dK||, ||dF/dS|| equal the explicit Jacobians to 1e-10") {
  rc::prop("every activation and scale", [] {
    const Shapes s = *shapes();
    const Matrix X = testing::random_matrix(s.n, s.D, s.sd, s.seed, 0);
    const Matrix Q = testing::random_matrix(s.D, s.d, 1.0, s.seed, 1);
    const Matrix K = testing::random_matrix(s.D, s.d, 1.0, s.seed, 2);
    for (const AttentionMap& map : every_differentiable_map(s.d)) {
      const auto norms = theory::attention_norms(map, X, Q, K);
      const double dq = theory::explicit_parameter_jacobian(map, X, Q, K, theory::Parameter::Q).norm();
      const double dk = theory::explicit_parameter_jacobian(map, X, Q, K, theory::Parameter::K).norm();
      // The explicit product dF/dS * dS/dP rounds at ~1e-16 of c ||dS/dP|| (and cancels on near one-hot softmax
      // rows, where the closed form does not): that is the absolute floor beside the 1e-10 relative bound.
      const AttentionMap scores_only{{ActivationKind::pointwise, Pointwise::identity, 1}, map.inner, map.outer};
      const double floor_q =
          1e-14 * theory::explicit_parameter_jacobian(scores_only, X, Q, K, theory::Parameter::Q).norm();
      const double floor_k =
          1e-14 * theory::explicit_parameter_jacobian(scores_only, X, Q, K, theory::Parameter::K).norm();
      RC_ASSERT(norms.dQ_fro.has_value());
      RC_ASSERT(std::abs(*norms.dQ_fro - dq) <= 1e-10 * dq + floor_q);
      RC_ASSERT(std::abs(*norms.dK_fro - dk) <= 1e-10 * dk + floor_k);
      RC_ASSERT(testing::relative_difference(norms.value_fro, theory::apply(map, X, Q, K).norm()) <= 1e-12);
      const Matrix S = theory::scores(X, Q, K, map.inner);
      const double c = map.outer.at(s.n);
      const double ds = map.activation.kind == ActivationKind::softmax
                            ? c * theory::softmax_norms(S).grad_fro
                            : c * S.unaryExpr([&](double v) {
                                     return theory::pointwise_derivative(map.activation.h, map.activation.p, v);
                                   }).norm();
      RC_ASSERT(testing::relative_difference(*norms.dS_fro, ds) <= 1e-12);
    }
  });
}

TEST_CASE("explicit parameter Jacobians agree with finite differences") {
  const Matrix X = testing::random_matrix(4, 3, 1.0, 11, 0);
  const Matrix Q = testing::random_matrix(3, 2, 1.0, 11, 1);
  const Matrix K = testing::random_matrix(3, 2, 1.0, 11, 2);
  for (const AttentionMap& map : every_differentiable_map(2)) {
    INFO(theory::describe(map, 2));
    const Matrix fd_q =
        testing::finite_difference_jacobian([&](const Matrix& q) { return theory::apply(map, X, q, K); }, Q);
    const Matrix fd_k =
        testing::finite_difference_jacobian([&](const Matrix& k) { return theory::apply(map, X, Q, k); }, K);
    const Matrix jq = theory::explicit_parameter_jacobian(map, X, Q, K, theory::Parameter::Q);
    const Matrix jk = theory::explicit_parameter_jacobian(map, X, Q, K, theory::Parameter::K);
    CHECK((fd_q - jq).norm() <= 1e-7 * std::max(1.0, jq.norm()));
    CHECK((fd_k - jk).norm() <= 1e-7 * std::max(1.0, jk.norm()));
  }
}

TEST_CASE("norms from biased projections with a causal mask agree with finite differences") {
  const Index d = 2;
  const auto [X, Q, K, bq, bk] = biased_head(5, 3, d, 5);
  for (const bool causal : {false, true}) {
    for (const AttentionMap& map : every_differentiable_map(d)) {
      INFO(theory::describe(map, d) << (causal ? " causal" : ""));
      const Matrix V = (X * Q).rowwise() + bq, U = (X * K).rowwise() + bk;
      const auto norms = theory::attention_norms_from_projections(map, X, V, U, causal);
      const double fd_q = testing::finite_difference_jacobian(
                              [&](const Matrix& q) { return dense_attention(map, X, q, K, bq, bk, causal); }, Q)
                              .norm();
      const double fd_k = testing::finite_difference_jacobian(
                              [&](const Matrix& k) { return dense_attention(map, X, Q, k, bq, bk, causal); }, K)
                              .norm();
      CHECK(testing::relative_difference(*norms.dQ_fro, fd_q) < 1e-7);
      CHECK(testing::relative_difference(*norms.dK_fro, fd_k) < 1e-7);
      CHECK(testing::relative_difference(norms.value_fro, dense_attention(map, X, Q, K, bq, bk, causal).norm()) <
            1e-13);
    }
  }
}

TEST_CASE("norms with an explicit mask agree with finite differences, and the causal mask written out is causal") {
  const Index n = 6, d = 2;
  const auto [X, Q, K, bq, bk] = biased_head(n, 3, d, 7);
  const Matrix V = (X * Q).rowwise() + bq, U = (X * K).rowwise() + bk;
  // Padding of the last two keys, plus one more hole, so rows attend to different sets (none to nothing).
  theory::AttendedMask padded = theory::AttendedMask::Constant(n, n, true);
  padded.rightCols(2) = false;
  padded(2, 1) = false;
  theory::AttendedMask lower = theory::AttendedMask::Constant(n, n, false);
  for (Index i = 0; i < n; ++i) lower.row(i).head(i + 1) = true;
  for (const AttentionMap& map : every_differentiable_map(d)) {
    INFO(theory::describe(map, d));
    const auto norms = theory::attention_norms_from_projections(map, X, V, U, padded);
    const double fd_q = testing::finite_difference_jacobian(
                            [&](const Matrix& q) { return dense_attention(map, X, q, K, bq, bk, false, &padded); }, Q)
                            .norm();
    const double fd_k = testing::finite_difference_jacobian(
                            [&](const Matrix& k) { return dense_attention(map, X, Q, k, bq, bk, false, &padded); }, K)
                            .norm();
    CHECK(testing::relative_difference(*norms.dQ_fro, fd_q) < 1e-7);
    CHECK(testing::relative_difference(*norms.dK_fro, fd_k) < 1e-7);
    const Matrix dense = dense_attention(map, X, Q, K, bq, bk, false, &padded);
    CHECK(testing::relative_difference(norms.value_fro, dense.norm()) < 1e-13);

    // The same entries in the same order: the explicit lower triangle gives the causal path's numbers.
    const auto causal = theory::attention_norms_from_projections(map, X, V, U, true);
    const auto written_out = theory::attention_norms_from_projections(map, X, V, U, lower);
    CHECK(written_out.value_fro == causal.value_fro);
    CHECK(*written_out.dS_fro == *causal.dS_fro);
    CHECK(*written_out.dQ_fro == *causal.dQ_fro);
    CHECK(*written_out.dK_fro == *causal.dK_fro);

    // From the scores alone: the same value and score Jacobian, no parameter Jacobians.
    const Matrix S = map.inner * V * U.transpose();
    const auto from_scores = theory::score_map_norms(map, S, &padded);
    CHECK(testing::relative_difference(from_scores.value_fro, norms.value_fro) < 1e-14);
    CHECK(testing::relative_difference(*from_scores.dS_fro, *norms.dS_fro) < 1e-14);
    CHECK_FALSE(from_scores.dQ_fro.has_value());
  }
}

TEST_CASE("a softmax row that attends to nothing, and a mask of the wrong shape, are errors naming them") {
  const Matrix X = testing::random_matrix(3, 2, 1.0, 9, 0);
  const Matrix V = testing::random_matrix(3, 2, 1.0, 9, 1), U = testing::random_matrix(3, 2, 1.0, 9, 2);
  theory::AttendedMask attended = theory::AttendedMask::Constant(3, 3, true);
  attended.row(1) = false;
  const AttentionMap softmax{{ActivationKind::softmax}, 1.0, {}};
  CHECK_THROWS_WITH(theory::attention_norms_from_projections(softmax, X, V, U, attended),
                    Catch::Contains("row 1 (0-based) attends to nothing"));
  // Elementwise maps have nothing to normalize: an empty row just contributes nothing.
  const AttentionMap cube{{ActivationKind::pointwise, Pointwise::poly, 3}, 1.0, {}};
  theory::AttendedMask without_row_1 = theory::AttendedMask::Constant(3, 3, true);
  CHECK(theory::attention_norms_from_projections(cube, X, V, U, attended).value_fro ==
        Approx(std::sqrt(std::pow(theory::attention_norms_from_projections(cube, X, V, U, without_row_1).value_fro, 2) -
                         (V.row(1) * U.transpose()).array().pow(3).square().sum())));
  CHECK_THROWS_WITH(theory::attention_norms_from_projections(softmax, X, V, U,
                                                             theory::AttendedMask::Constant(3, 2, true)),
                    Catch::Contains("the mask is 3x2, but the scores are 3x3"));
}

TEST_CASE("the matrix-power reading is the matrix power, and grows like N^p where elementwise grows like N") {
  const Matrix X = testing::random_matrix(3, 2, 1.0, 3, 0);
  const Matrix Q = testing::random_matrix(2, 2, 1.0, 3, 1), K = testing::random_matrix(2, 2, 1.0, 3, 2);
  const AttentionMap cube{{ActivationKind::matpow, Pointwise::identity, 3}, 0.5, {}};
  const Matrix S = theory::scores(X, Q, K, 0.5);
  CHECK((theory::apply(cube, X, Q, K) - S * S * S).norm() <= 1e-12 * (S * S * S).norm());
  CHECK_FALSE(theory::attention_norms(cube, X, Q, K).dQ_fro.has_value());
  // All-ones scores: the elementwise cube has ||.||_F = N, the matrix cube N^3.
  const Matrix ones_x = Matrix::Ones(8, 1), one = Matrix::Ones(1, 1);
  const AttentionMap elementwise{{ActivationKind::pointwise, Pointwise::poly, 3}, 1.0, {}};
  CHECK(theory::attention_norms(elementwise, ones_x, one, one).value_fro == Approx(8.0));
  CHECK(theory::attention_norms({{ActivationKind::matpow, Pointwise::identity, 3}, 1.0, {}}, ones_x, one, one)
            .value_fro == Approx(512.0));
}

TEST_CASE("describe writes every constant") {
  const AttentionMap c5{{ActivationKind::pointwise, Pointwise::poly, 3}, 1.0, {0.125, 0.5}};
  CHECK(theory::describe(c5, 64) == "F = 0.125/sqrt(N) * (T)^3 (elementwise)");
  const AttentionMap c3{{ActivationKind::pointwise, Pointwise::poly, 2}, 0.125, {}};
  CHECK(theory::describe(c3, 64) == "F = (T/sqrt(64))^2 (elementwise)");
}

TEST_CASE("shape mismatches are errors naming the shapes") {
  CHECK_THROWS_WITH(theory::attention_norms({}, Matrix::Ones(3, 2), Matrix::Ones(3, 2), Matrix::Ones(2, 2)),
                    Catch::Contains("Q is 3x2"));
}

namespace {

// The rotated projections of positions 0 .. N-1 and the attention map on them, written from the definition.
struct RotaryCase {
  Matrix X, Q, K, V, U;
  Eigen::RowVectorXd bq, bk;
  theory::Rotary rotary;
};

RotaryCase rotary_case(Index n, Index D, Index d, double sd, std::uint64_t seed, bool interleaved, double base) {
  RotaryCase c{testing::random_matrix(n, D, sd, seed, 0),
               testing::random_matrix(D, d, 1.0, seed, 1),
               testing::random_matrix(D, d, 1.0, seed, 2),
               {},
               {},
               testing::random_matrix(1, d, 0.5, seed, 3),
               testing::random_matrix(1, d, 0.5, seed, 4),
               interleaved ? theory::Rotary::interleaved(d, base) : theory::Rotary::half_split(d, base)};
  c.V = (c.X * c.Q).rowwise() + c.bq;
  c.U = (c.X * c.K).rowwise() + c.bk;
  theory::apply_rotary(c.rotary, c.V);
  theory::apply_rotary(c.rotary, c.U);
  return c;
}

// R(t)^T w: the rotation back by t.
Eigen::RowVectorXd rotated_back(const theory::Rotary& rotary, const Eigen::RowVectorXd& w, Index t) {
  Matrix row = w;
  theory::apply_rotary(rotary, row, -static_cast<double>(t));
  return row.row(0);
}

// ||dF/dW||_F by the chain rule entry by entry, independently of the closed forms:
// dS_ik/dW_Q[a][b] = lambda x_ia (R(i)^T u_k)_b and dS_ik/dW_K[a][b] = lambda x_ka (R(k)^T v_i)_b. With `mask`,
// row i's keys are those it attends (causal is then ignored).
double chain_rule_norm(const AttentionMap& map, const RotaryCase& c, bool causal, theory::Parameter parameter,
                       const theory::AttendedMask* mask = nullptr) {
  const Index n = c.X.rows(), D = c.X.cols(), d = c.V.cols();
  const Matrix S = map.inner * c.V * c.U.transpose();
  const double scale = map.outer.at(n);
  double sum = 0;
  for (Index i = 0; i < n; ++i) {
    std::vector<Index> keys;
    for (Index k = 0; k < n; ++k) {
      if (mask ? (*mask)(i, k) : (!causal || k <= i)) keys.push_back(k);
    }
    const auto visible = static_cast<Index>(keys.size());
    const auto key = [&](Index k) { return keys[static_cast<std::size_t>(k)]; };
    // dF_ij/dS_ik for the visible k.
    Matrix dF_dS = Matrix::Zero(visible, visible);
    if (map.activation.kind == ActivationKind::softmax) {
      const Eigen::RowVectorXd a = theory::row_softmax(S.row(i)(keys)).row(0);
      // 1 - a_j as the sum of the other probabilities, so a near one-hot row keeps its small terms.
      for (Index j = 0; j < visible; ++j) {
        double others = 0;
        for (Index k = 0; k < visible; ++k) others += k == j ? 0.0 : a[k];
        for (Index k = 0; k < visible; ++k) dF_dS(j, k) = j == k ? a[j] * others : -a[j] * a[k];
      }
    } else {
      for (Index j = 0; j < visible; ++j) {
        dF_dS(j, j) = theory::pointwise_derivative(map.activation.h, map.activation.p, S(i, key(j)));
      }
    }
    // dS_ik/dW as D x d matrices.
    std::vector<Matrix> dS(static_cast<std::size_t>(visible));
    for (Index k = 0; k < visible; ++k) {
      dS[static_cast<std::size_t>(k)] =
          parameter == theory::Parameter::Q
              ? Matrix(map.inner * c.X.row(i).transpose() * rotated_back(c.rotary, c.U.row(key(k)), i))
              : Matrix(map.inner * c.X.row(key(k)).transpose() * rotated_back(c.rotary, c.V.row(i), key(k)));
    }
    for (Index j = 0; j < visible; ++j) {
      Matrix total = Matrix::Zero(D, d);
      for (Index k = 0; k < visible; ++k) total += dF_dS(j, k) * dS[static_cast<std::size_t>(k)];
      sum += (scale * total).squaredNorm();
    }
  }
  return std::sqrt(sum);
}

}  // namespace

TEST_CASE("rotary embeddings: pairs keep their lengths and scores depend on relative positions only") {
  for (const bool interleaved : {true, false}) {
    const auto rotary = interleaved ? theory::Rotary::interleaved(6, 10000) : theory::Rotary::half_split(6, 10000);
    CHECK(rotary.first == std::vector<Index>(interleaved ? std::vector<Index>{0, 2, 4} : std::vector<Index>{0, 1, 2}));
    CHECK(rotary.second == std::vector<Index>(interleaved ? std::vector<Index>{1, 3, 5} : std::vector<Index>{3, 4, 5}));
    CHECK(rotary.frequency[1] == std::pow(10000.0, -2.0 / 6));
    const Matrix q = testing::random_matrix(1, 6, 1.0, 3, 0), k = testing::random_matrix(1, 6, 1.0, 3, 1);
    // Query at position 7, key at 3, then both shifted by 100: the same score.
    Matrix q7 = q, k3 = k, q107 = q, k103 = k;
    theory::apply_rotary(rotary, q7, 7);
    theory::apply_rotary(rotary, k3, 3);
    theory::apply_rotary(rotary, q107, 107);
    theory::apply_rotary(rotary, k103, 103);
    CHECK(q7.row(0).dot(k3.row(0)) == Approx(q107.row(0).dot(k103.row(0))).epsilon(1e-12));
    CHECK(q7.row(0).dot(k3.row(0)) != Approx(q.row(0).dot(k.row(0))).epsilon(1e-3));
    for (std::size_t p = 0; p < 3; ++p) {
      const auto f = rotary.first[p], s = rotary.second[p];
      CHECK(std::hypot(q7(0, f), q7(0, s)) == Approx(std::hypot(q(0, f), q(0, s))).epsilon(1e-14));
    }
  }
  // The pair's rotation is R(t) = [[cos, -sin], [sin, cos]]: (1, 0) at angle pi/2 becomes (0, 1).
  theory::Rotary quarter{{0}, {1}, {M_PI / 2}, 2};
  Matrix e1{{1.0, 0.0}};
  theory::apply_rotary(quarter, e1, 1);
  CHECK(e1(0, 0) == Approx(0).margin(1e-16));
  CHECK(e1(0, 1) == Approx(1).epsilon(1e-15));
  Matrix odd(1, 3);
  CHECK_THROWS_WITH(theory::apply_rotary(quarter, odd), Catch::Contains("dimension 2 applied to rows of 3"));
}

TEST_CASE("with rotary positions the closed forms equal the chain-rule Jacobians to 1e-10") {
  rc::prop("softmax and elementwise maps, both pairings, causal or not, an unrotated coordinate when d is odd", [] {
    const auto n = *rc::gen::inRange<Index>(1, 7);
    const auto D = *rc::gen::inRange<Index>(1, 5);
    const auto d = *rc::gen::inRange<Index>(2, 6);
    const double sd = *rc::gen::inRange(3, 30) / 10.0;
    const bool interleaved = *rc::gen::arbitrary<bool>(), causal = *rc::gen::arbitrary<bool>();
    const double base = *rc::gen::element(10.0, 10000.0, 100000.0);
    const RotaryCase c = rotary_case(n, D, d, sd, *rc::gen::arbitrary<std::uint64_t>(), interleaved, base);
    for (const AttentionMap& map : every_differentiable_map(d)) {
      const auto norms = theory::attention_norms_from_projections(map, c.X, c.V, c.U, causal, &c.rotary);
      const double dq = chain_rule_norm(map, c, causal, theory::Parameter::Q);
      const double dk = chain_rule_norm(map, c, causal, theory::Parameter::K);
      // As above: the explicit sums round at ~1e-16 of c ||dS/dW|| (and cancel on near one-hot rows).
      const AttentionMap scores_only{{ActivationKind::pointwise, Pointwise::identity, 1}, map.inner, map.outer};
      const double floor_q = 1e-14 * chain_rule_norm(scores_only, c, causal, theory::Parameter::Q);
      const double floor_k = 1e-14 * chain_rule_norm(scores_only, c, causal, theory::Parameter::K);
      RC_ASSERT(std::abs(*norms.dQ_fro - dq) <= 1e-10 * dq + floor_q);
      RC_ASSERT(std::abs(*norms.dK_fro - dk) <= 1e-10 * dk + floor_k);
    }
  });
}

TEST_CASE("with rotary positions under a mask the closed forms equal the chain-rule Jacobians to 1e-10") {
  rc::prop("sliding windows (keys i - w < j <= i) and random masks with the diagonal, both pairings", [] {
    const auto n = *rc::gen::inRange<Index>(1, 8);
    const auto D = *rc::gen::inRange<Index>(1, 5);
    const auto d = *rc::gen::inRange<Index>(2, 6);
    const bool interleaved = *rc::gen::arbitrary<bool>(), window = *rc::gen::arbitrary<bool>();
    const RotaryCase c = rotary_case(n, D, d, 1.5, *rc::gen::arbitrary<std::uint64_t>(), interleaved, 1000);
    const auto w = *rc::gen::inRange<Index>(1, n + 1);
    theory::AttendedMask mask(n, n);
    for (Index i = 0; i < n; ++i) {
      for (Index j = 0; j < n; ++j)
        mask(i, j) = window ? (j <= i && j > i - w) : (i == j || *rc::gen::arbitrary<bool>());
    }
    for (const AttentionMap& map : every_differentiable_map(d)) {
      const auto norms = theory::attention_norms_from_projections(map, c.X, c.V, c.U, mask, &c.rotary);
      const AttentionMap scores_only{{ActivationKind::pointwise, Pointwise::identity, 1}, map.inner, map.outer};
      for (const auto parameter : {theory::Parameter::Q, theory::Parameter::K}) {
        const double expected = chain_rule_norm(map, c, false, parameter, &mask);
        const double floor = 1e-14 * chain_rule_norm(scores_only, c, false, parameter, &mask);
        RC_ASSERT(std::abs(*(parameter == theory::Parameter::Q ? norms.dQ_fro : norms.dK_fro) - expected) <=
                  1e-10 * expected + floor);
      }
    }
  });
}

TEST_CASE("rotary softmax dA/dW_K at lengths past the vectorized sums' lanes equals the chain-rule Jacobian") {
  // The key term's inner sums run in lanes of 16 keys and pair adjacent keys, and causal rows are taken in blocks
  // of 8: odd and even lengths with partial lanes and blocks, causal and not, and a sliding window (one row at a
  // time).
  const AttentionMap softmax{{ActivationKind::softmax, Pointwise::identity, 1}, 0.5, {}};
  for (const Index n : {37, 50}) {
    const RotaryCase c = rotary_case(n, 3, 4, 1.0, 97 + static_cast<std::uint64_t>(n), n % 2 == 0, 10000);
    for (const bool causal : {true, false}) {
      const auto norms = theory::attention_norms_from_projections(softmax, c.X, c.V, c.U, causal, &c.rotary);
      CHECK(testing::relative_difference(*norms.dK_fro, chain_rule_norm(softmax, c, causal, theory::Parameter::K)) <
            1e-10);
    }
    theory::AttendedMask window(n, n);
    for (Index i = 0; i < n; ++i) {
      for (Index j = 0; j < n; ++j) window(i, j) = j <= i && j > i - 21;
    }
    const auto norms = theory::attention_norms_from_projections(softmax, c.X, c.V, c.U, window, &c.rotary);
    CHECK(testing::relative_difference(*norms.dK_fro,
                                       chain_rule_norm(softmax, c, false, theory::Parameter::K, &window)) < 1e-10);
  }
}

TEST_CASE("the norms' squared sums over parts of the rows add up to the whole head's, and a bad part is refused") {
  const AttentionMap softmax{{ActivationKind::softmax, Pointwise::identity, 1}, 0.5, {}};
  const Index n = 45;
  const RotaryCase c = rotary_case(n, 3, 4, 1.0, 5, false, 10000);
  const Matrix gram = c.X * c.X.transpose();
  theory::AttendedMask window(n, n);
  for (Index i = 0; i < n; ++i) {
    for (Index j = 0; j < n; ++j) window(i, j) = j <= i && j > i - 9;
  }
  const theory::HeadNorm norm{Eigen::VectorXd::Constant(4, 1.2), 1e-6};
  theory::ScoreMaps rotary_only;
  rotary_only.rotary = &c.rotary;
  rotary_only.gram = &gram;
  theory::ScoreMaps normed = rotary_only;  // the general rows, here on V and U standing for their own raw rows
  normed.query_norm = normed.key_norm = &norm;
  normed.raw_queries = &c.V;
  normed.raw_keys = &c.U;
  const auto check_parts = [&](const auto& whole_sums, const auto& part_sums) {
    theory::AttentionSquaredSums added;
    // Parts that do not start at multiples of the key term's blocks: the same sums, added in another order.
    for (const theory::RowRange rows : {theory::RowRange{0, 13}, theory::RowRange{13, 20}, theory::RowRange{33, -1}}) {
      added += part_sums(rows);
    }
    const theory::AttentionSquaredSums whole = whole_sums();
    CHECK(testing::relative_difference(added.value_sq, whole.value_sq) < 1e-12);
    CHECK(testing::relative_difference(added.dS_sq, whole.dS_sq) < 1e-12);
    CHECK(testing::relative_difference(added.dQ_sq, whole.dQ_sq) < 1e-12);
    CHECK(testing::relative_difference(added.dK_sq, whole.dK_sq) < 1e-12);
  };
  for (const theory::ScoreMaps* maps : {&rotary_only, &normed}) {
    for (const bool causal : {true, false}) {
      check_parts(
          [&] { return theory::attention_row_sums_from_projections(softmax, c.X, c.V, c.U, causal, *maps, {}); },
          [&](theory::RowRange rows) {
            return theory::attention_row_sums_from_projections(softmax, c.X, c.V, c.U, causal, *maps, rows);
          });
    }
    check_parts([&] { return theory::attention_row_sums_from_projections(softmax, c.X, c.V, c.U, window, *maps, {}); },
                [&](theory::RowRange rows) {
                  return theory::attention_row_sums_from_projections(softmax, c.X, c.V, c.U, window, *maps, rows);
                });
  }
  // The whole head's sums are its norms, squared and unscaled.
  const auto whole = theory::attention_row_sums_from_projections(softmax, c.X, c.V, c.U, true, rotary_only, {});
  const auto norms = theory::attention_norms_from_projections(softmax, c.X, c.V, c.U, true, rotary_only);
  CHECK(theory::attention_norms_from_sums(softmax, n, whole).dK_fro == norms.dK_fro);
  for (const theory::RowRange bad :
       {theory::RowRange{-1, 3}, theory::RowRange{40, 6}, theory::RowRange{46, -1}, theory::RowRange{5, -7}}) {
    CHECK_THROWS_WITH(theory::attention_row_sums_from_projections(softmax, c.X, c.V, c.U, true, rotary_only, bad),
                      Catch::Contains("not within the 45 rows"));
  }
}

TEST_CASE("rotary softmax dA/dW_K keeps its relative accuracy on near one-hot rows") {
  // Scores scaled up until every row puts all but ~1e-9 of its mass on one key: the term is then tiny, and an
  // expanded square would lose it to cancellation. The chain rule takes 1 - a_j as the sum of the others.
  const RotaryCase c = rotary_case(6, 3, 4, 1.0, 41, true, 10000);
  for (const double inner : {8.0, 12.0, 16.0}) {
    const AttentionMap map{{ActivationKind::softmax}, inner, {}};
    const auto norms = theory::attention_norms_from_projections(map, c.X, c.V, c.U, true, &c.rotary);
    const double dk = chain_rule_norm(map, c, true, theory::Parameter::K);
    INFO("inner " << inner << ": closed form " << *norms.dK_fro << ", chain rule " << dk);
    CHECK(dk < 1e-3 * chain_rule_norm({{ActivationKind::pointwise, Pointwise::identity, 1}, inner, {}}, c, true,
                                      theory::Parameter::K));
    CHECK(testing::relative_difference(*norms.dK_fro, dk) < 1e-9);
  }
}

TEST_CASE("rotary closed forms agree with finite differences of the rotated attention") {
  const Index n = 5, D = 3, d = 4;
  const RotaryCase c = rotary_case(n, D, d, 1.0, 9, false, 100);
  const auto attention = [&](const Matrix& Q, const Matrix& K) {
    Matrix V = (c.X * Q).rowwise() + c.bq, U = (c.X * K).rowwise() + c.bk;
    theory::apply_rotary(c.rotary, V);
    theory::apply_rotary(c.rotary, U);
    Matrix S = (V * U.transpose()) / std::sqrt(static_cast<double>(d));
    for (Index i = 0; i < n; ++i)
      for (Index j = i + 1; j < n; ++j) S(i, j) = -std::numeric_limits<double>::infinity();
    return theory::row_softmax(S);
  };
  const AttentionMap map{{ActivationKind::softmax}, 1 / std::sqrt(static_cast<double>(d)), {}};
  const auto norms = theory::attention_norms_from_projections(map, c.X, c.V, c.U, true, &c.rotary);
  const double fd_q =
      testing::finite_difference_jacobian([&](const Matrix& q) { return attention(q, c.K); }, c.Q).norm();
  const double fd_k =
      testing::finite_difference_jacobian([&](const Matrix& k) { return attention(c.Q, k); }, c.K).norm();
  CHECK(testing::relative_difference(*norms.dQ_fro, fd_q) < 1e-7);
  CHECK(testing::relative_difference(*norms.dK_fro, fd_k) < 1e-7);
  // Without the rotation in the key derivative the value would differ: the rotation matters here.
  const auto unrotated = theory::attention_norms_from_projections(map, c.X, c.V, c.U, true);
  CHECK(testing::relative_difference(*unrotated.dK_fro, fd_k) > 1e-3);
}

namespace {

// A head with optional query/key RMSNorms (before the rotation), rotary positions and a logit soft-cap, its
// rows written from the definition: v_i = R(i) norm_Q(x_i W_Q + b_Q), u_j = R(j) norm_K(x_j W_K + b_K).
struct NormedCase {
  Matrix X, Q, K, P_Q, P_K, V, U;
  Eigen::RowVectorXd bq, bk;
  std::optional<theory::HeadNorm> query_norm, key_norm;
  std::optional<theory::Rotary> rotary;
  double cap = 0;
};

// The rows a norm reads: p itself for an RMSNorm, c = p - mean(p) for a LayerNorm.
Matrix norm_inputs(const Matrix& P, const std::optional<theory::HeadNorm>& norm) {
  Matrix c = P;
  if (norm && norm->centred) c.colwise() -= P.rowwise().mean();
  return c;
}

Matrix normalized_rows(const Matrix& P, const std::optional<theory::HeadNorm>& norm) {
  if (!norm) return P;
  const Matrix c = norm_inputs(P, norm);
  Matrix out = P;
  for (Index i = 0; i < P.rows(); ++i) {
    const double mean_square = c.row(i).squaredNorm() / static_cast<double>(P.cols());
    for (Index b = 0; b < P.cols(); ++b) {
      out(i, b) =
          norm->gain[b] * c(i, b) / std::sqrt(mean_square + norm->eps) + (norm->bias.size() != 0 ? norm->bias[b] : 0.0);
    }
  }
  return out;
}

void set_rows(NormedCase& c) {
  c.P_Q = (c.X * c.Q).rowwise() + c.bq;
  c.P_K = (c.X * c.K).rowwise() + c.bk;
  c.V = normalized_rows(c.P_Q, c.query_norm);
  c.U = normalized_rows(c.P_K, c.key_norm);
  if (c.rotary) {
    theory::apply_rotary(*c.rotary, c.V);
    theory::apply_rotary(*c.rotary, c.U);
  }
}

// With `angle_table`, the rotary angles are random per position and pair (EVA's 2-D rotary is one such table)
// rather than t * frequency.
NormedCase normed_case(Index n, Index D, Index d, double sd, std::uint64_t seed, bool query_norm, bool key_norm,
                       bool rotary, double cap, bool layer_norms = false, bool angle_table = false) {
  NormedCase c;
  c.X = testing::random_matrix(n, D, sd, seed, 0);
  c.Q = testing::random_matrix(D, d, 1.0, seed, 1);
  c.K = testing::random_matrix(D, d, 1.0, seed, 2);
  c.bq = testing::random_matrix(1, d, 0.5, seed, 3).row(0);
  c.bk = testing::random_matrix(1, d, 0.5, seed, 4).row(0);
  const Matrix gains = testing::random_matrix(2, d, 0.5, seed, 5).array() + 1.0;
  const Matrix biases = testing::random_matrix(2, d, 0.7, seed, 6);
  if (query_norm) c.query_norm = theory::HeadNorm{gains.row(0).transpose(), 1e-6};
  if (key_norm) c.key_norm = theory::HeadNorm{gains.row(1).transpose(), 0.3};
  if (layer_norms) {
    for (auto* norm : {&c.query_norm, &c.key_norm}) {
      if (*norm) (*norm)->centred = true;
    }
    if (c.query_norm) c.query_norm->bias = biases.row(0).transpose();  // the key norm's LayerNorm without a bias
  }
  if (rotary) {
    c.rotary = angle_table
                   ? theory::Rotary::with_angles(d, testing::random_matrix(n, d / 2, 2.0, seed, 7), seed % 2 == 0)
                   : theory::Rotary::half_split(d, 100);
  }
  c.cap = cap;
  set_rows(c);
  return c;
}

theory::ScoreMaps maps_of(const NormedCase& c) {
  return {c.rotary ? &*c.rotary : nullptr,
          c.query_norm ? &*c.query_norm : nullptr,
          c.key_norm ? &*c.key_norm : nullptr,
          &c.P_Q,
          &c.P_K,
          c.cap};
}

// d(position t's row)/d(its raw projection), d x d, entry by entry: R(t) (diag(g)/r - g_a p_a p_b / (d r^3)) for an
// RMSNorm; for a LayerNorm, with c = p - mean(p) (so dc_a/dp_b = delta_ab - 1/d and dr/dp_b = c_b / (d r)),
// g_a ((delta_ab - 1/d) / r - c_a c_b / (d r^3)).
Matrix row_map(const NormedCase& c, const std::optional<theory::HeadNorm>& norm, const Matrix& P, Index t) {
  const Index d = P.cols();
  Matrix N = Matrix::Identity(d, d);
  if (norm) {
    const Matrix centred = norm_inputs(P, norm);
    const double r = std::sqrt(centred.row(t).squaredNorm() / static_cast<double>(d) + norm->eps);
    const double shift = norm->centred ? 1.0 / static_cast<double>(d) : 0.0;
    for (Index a = 0; a < d; ++a) {
      for (Index b = 0; b < d; ++b) {
        N(a, b) = norm->gain[a] * (((a == b ? 1.0 : 0.0) - shift) / r -
                                   centred(t, a) * centred(t, b) / (static_cast<double>(d) * r * r * r));
      }
    }
  }
  if (!c.rotary) return N;
  Matrix rotated_rows = N.transpose();  // rows (N^T)_b = column b of N, rotated as row vectors
  for (Index b = 0; b < d; ++b) {
    Matrix row = rotated_rows.row(b);
    theory::apply_rotary(*c.rotary, row, static_cast<double>(t));
    rotated_rows.row(b) = row;
  }
  return rotated_rows.transpose();
}

// ||dF/dW||_F by the chain rule entry by entry: dF_ij/dL_ik (softmax in the capped logits L, or h' on the
// diagonal), dL_ik/dS_ik = 1 - tanh^2(S_ik / cap), dS_ik/dW_Q = lambda x_i (M_i^T u_k)^T, dS_ik/dW_K =
// lambda x_k (M_k^T v_i)^T with M_t the d x d map of position t built above.
double normed_chain_rule_norm(const AttentionMap& map, const NormedCase& c, const theory::AttendedMask& mask,
                              theory::Parameter parameter) {
  const Index n = c.X.rows(), D = c.X.cols(), d = c.V.cols();
  const bool softmax = map.activation.kind == ActivationKind::softmax;
  const Matrix S = map.inner * c.V * c.U.transpose();
  double sum = 0;
  for (Index i = 0; i < n; ++i) {
    std::vector<Index> keys;
    for (Index k = 0; k < n; ++k) {
      if (mask(i, k)) keys.push_back(k);
    }
    const auto visible = static_cast<Index>(keys.size());
    Eigen::RowVectorXd logits(visible), slope = Eigen::RowVectorXd::Ones(visible);
    for (Index k = 0; k < visible; ++k) {
      const double s = S(i, keys[static_cast<std::size_t>(k)]);
      logits[k] = softmax && c.cap > 0 ? c.cap * std::tanh(s / c.cap) : s;
      if (softmax && c.cap > 0) slope[k] = 1 - std::pow(std::tanh(s / c.cap), 2);
    }
    Matrix dF_dS = Matrix::Zero(visible, visible);
    if (softmax) {
      const Eigen::RowVectorXd a = theory::row_softmax(logits).row(0);
      for (Index j = 0; j < visible; ++j) {
        double others = 0;
        for (Index k = 0; k < visible; ++k) others += k == j ? 0.0 : a[k];
        for (Index k = 0; k < visible; ++k) dF_dS(j, k) = (j == k ? a[j] * others : -a[j] * a[k]) * slope[k];
      }
    } else {
      for (Index j = 0; j < visible; ++j)
        dF_dS(j, j) = theory::pointwise_derivative(map.activation.h, map.activation.p, logits[j]);
    }
    std::vector<Matrix> dS;
    for (Index k = 0; k < visible; ++k) {
      const Index key = keys[static_cast<std::size_t>(k)];
      dS.push_back(parameter == theory::Parameter::Q
                       ? Matrix(map.inner * c.X.row(i).transpose() *
                                (row_map(c, c.query_norm, c.P_Q, i).transpose() * c.U.row(key).transpose()).transpose())
                       : Matrix(map.inner * c.X.row(key).transpose() *
                                (row_map(c, c.key_norm, c.P_K, key).transpose() * c.V.row(i).transpose()).transpose()));
    }
    for (Index j = 0; j < visible; ++j) {
      Matrix total = Matrix::Zero(D, d);
      for (Index k = 0; k < visible; ++k) total += dF_dS(j, k) * dS[static_cast<std::size_t>(k)];
      sum += (map.outer.at(n) * total).squaredNorm();
    }
  }
  return std::sqrt(sum);
}

}  // namespace

TEST_CASE("with query/key norms and soft-capped logits the closed forms equal the chain-rule Jacobians to 1e-10") {
  rc::prop(
      "softmax and elementwise maps; each norm (RMSNorm or LayerNorm), rotary (by frequencies or angles per "
      "position), cap on or off; causal, sliding window or random mask",
      [] {
        const auto n = *rc::gen::inRange<Index>(1, 7);
        const auto D = *rc::gen::inRange<Index>(1, 5);
        const auto d = *rc::gen::inRange<Index>(2, 6);
        const double sd = *rc::gen::inRange(3, 30) / 10.0;
        const bool query_norm = *rc::gen::arbitrary<bool>(), key_norm = *rc::gen::arbitrary<bool>();
        // A LayerNorm over d = 2 coordinates leaves only +-(1, -1): its Jacobian is of eps's order, all cancellation.
        const bool rotary = *rc::gen::arbitrary<bool>(), layer_norms = *rc::gen::arbitrary<bool>() && d >= 3;
        const bool angle_table = *rc::gen::arbitrary<bool>();
        const double cap = *rc::gen::element(0.0, 0.7, 5.0);
        const NormedCase c = normed_case(n, D, d, sd, *rc::gen::arbitrary<std::uint64_t>(), query_norm, key_norm,
                                         rotary, cap, layer_norms, angle_table);
        const int mask_kind = *rc::gen::inRange(0, 3);  // 0 causal, 1 window, 2 random with the diagonal
        const auto w = *rc::gen::inRange<Index>(1, n + 1);
        theory::AttendedMask mask(n, n);
        for (Index i = 0; i < n; ++i) {
          for (Index j = 0; j < n; ++j) {
            mask(i, j) = mask_kind == 0   ? j <= i
                         : mask_kind == 1 ? (j <= i && j > i - w)
                                          : (i == j || *rc::gen::arbitrary<bool>());
          }
        }
        for (const AttentionMap& map : every_differentiable_map(d)) {
          const auto norms = mask_kind == 0
                                 ? theory::attention_norms_from_projections(map, c.X, c.V, c.U, true, maps_of(c))
                                 : theory::attention_norms_from_projections(map, c.X, c.V, c.U, mask, maps_of(c));
          const AttentionMap scores_only{{ActivationKind::pointwise, Pointwise::identity, 1}, map.inner, map.outer};
          for (const auto parameter : {theory::Parameter::Q, theory::Parameter::K}) {
            const double expected = normed_chain_rule_norm(map, c, mask, parameter);
            const double floor = 1e-14 * normed_chain_rule_norm(scores_only, c, mask, parameter);
            RC_ASSERT(std::abs(*(parameter == theory::Parameter::Q ? norms.dQ_fro : norms.dK_fro) - expected) <=
                      1e-10 * expected + floor);
          }
        }
      });
}

TEST_CASE("norms, rotation and cap: closed forms agree with finite differences of the whole head") {
  const Index n = 5, D = 3, d = 4;
  NormedCase c = normed_case(n, D, d, 1.0, 17, true, true, true, 0.9);
  const double inner = 1 / std::sqrt(static_cast<double>(d));
  const auto attention = [&](const Matrix& Q, const Matrix& K) {
    NormedCase moved = c;
    moved.Q = Q;
    moved.K = K;
    set_rows(moved);
    Matrix L =
        (inner * moved.V * moved.U.transpose()).unaryExpr([&](double s) { return c.cap * std::tanh(s / c.cap); });
    for (Index i = 0; i < n; ++i)
      for (Index j = i + 1; j < n; ++j) L(i, j) = -std::numeric_limits<double>::infinity();
    return theory::row_softmax(L);
  };
  const AttentionMap map{{ActivationKind::softmax}, inner, {}};
  const auto norms = theory::attention_norms_from_projections(map, c.X, c.V, c.U, true, maps_of(c));
  CHECK(testing::relative_difference(norms.value_fro, attention(c.Q, c.K).norm()) < 1e-14);
  const double fd_q =
      testing::finite_difference_jacobian([&](const Matrix& q) { return attention(q, c.K); }, c.Q).norm();
  const double fd_k =
      testing::finite_difference_jacobian([&](const Matrix& k) { return attention(c.Q, k); }, c.K).norm();
  CHECK(testing::relative_difference(*norms.dQ_fro, fd_q) < 1e-7);
  CHECK(testing::relative_difference(*norms.dK_fro, fd_k) < 1e-7);
  // Leaving out the norms' Jacobians (the rows as given, rotated) would miss: they matter here.
  const auto without = theory::attention_norms_from_projections(map, c.X, c.V, c.U, true, &*c.rotary);
  CHECK(testing::relative_difference(*without.dK_fro, fd_k) > 1e-3);
  CHECK(testing::relative_difference(*without.dQ_fro, fd_q) > 1e-3);
  // The cap leaves dF/dS the softmax's Jacobian in its (capped) logits.
  CHECK(*norms.dS_fro <= std::sqrt(static_cast<double>(n)) / 2);
}

TEST_CASE("rotary angles per position: a table of t * frequency gives what the frequencies give") {
  // The table goes through each position's rotation (the general rows), the frequencies through the Toeplitz
  // kernel C_i(t_k - t_l): two routes to the same numbers.
  const Index n = 9, D = 3, d = 6;
  for (const bool interleaved : {false, true}) {
    const std::vector<double> frequency{1.0, 0.3, 0.05};
    const theory::Rotary by_frequency = theory::Rotary::with_frequencies(d, frequency, interleaved);
    Matrix angles(n, 3);
    for (Index t = 0; t < n; ++t)
      for (Index p = 0; p < 3; ++p) angles(t, p) = static_cast<double>(t) * frequency[static_cast<std::size_t>(p)];
    const theory::Rotary by_angle = theory::Rotary::with_angles(d, angles, interleaved);
    const Matrix X = testing::random_matrix(n, D, 1.0, 3, 0);
    Matrix V = X * testing::random_matrix(D, d, 1.0, 3, 1), U = X * testing::random_matrix(D, d, 1.0, 3, 2);
    Matrix V_table = V, U_table = U;
    theory::apply_rotary(by_frequency, V);
    theory::apply_rotary(by_frequency, U);
    theory::apply_rotary(by_angle, V_table);
    theory::apply_rotary(by_angle, U_table);
    CHECK((V - V_table).cwiseAbs().maxCoeff() < 1e-14);
    for (const bool causal : {false, true}) {
      const AttentionMap map{{ActivationKind::softmax}, 0.7, {}};
      const auto expected = theory::attention_norms_from_projections(map, X, V, U, causal, &by_frequency);
      const auto table = theory::attention_norms_from_projections(map, X, V_table, U_table, causal, &by_angle);
      CHECK(testing::relative_difference(table.value_fro, expected.value_fro) < 1e-13);
      CHECK(testing::relative_difference(*table.dQ_fro, *expected.dQ_fro) < 1e-12);
      CHECK(testing::relative_difference(*table.dK_fro, *expected.dK_fro) < 1e-12);
    }
  }
}

TEST_CASE("rotary angles per position: rows outside the table are refused, a zero row leaves its token unturned") {
  Matrix angles = Matrix::Zero(3, 1);
  angles(1, 0) = std::acos(-1.0) / 2;
  const theory::Rotary rotary = theory::Rotary::with_angles(2, angles, true);
  Matrix rows = Matrix::Identity(2, 2);
  theory::apply_rotary(rotary, rows);  // position 0 (a prefix token: angle 0), then position 1 (a quarter turn)
  CHECK((rows.row(0) - Eigen::RowVector2d(1, 0)).norm() < 1e-15);
  CHECK((rows.row(1) - Eigen::RowVector2d(-1, 0)).norm() < 1e-15);
  Matrix four(4, 2);
  CHECK_THROWS_WITH(theory::apply_rotary(rotary, four), Catch::Contains("positions 0 .. 3 for rotary angles of 3"));
  Matrix one(1, 2);
  CHECK_THROWS_WITH(theory::apply_rotary(rotary, one, 0.5), Catch::Contains("positions 0.5"));
  angles(2, 0) = std::numeric_limits<double>::quiet_NaN();
  CHECK_THROWS_WITH(theory::Rotary::with_angles(2, angles, true), Catch::Contains("not finite"));
  CHECK_THROWS_WITH(theory::Rotary::with_angles(2, Matrix::Zero(3, 2), true),
                    Catch::Contains("2 pairs for heads of 2 coordinates"));
  CHECK_THROWS_WITH(theory::Rotary::with_angles(2, Matrix(0, 1), true), Catch::Contains("for no position"));
}

TEST_CASE("a norm over all the heads: closed forms agree with finite differences in the whole W_Q and W_K") {
  // OLMo 2: one RMSNorm over both heads' 2 d query coordinates (and the keys'), then rotary; head 0's map moves
  // with head 1's weights through the shared mean square.
  const Index n = 5, D = 3, d = 4, width = 2 * d;
  const Matrix X = testing::random_matrix(n, D, 1.0, 23, 0);
  const Matrix W_Q = testing::random_matrix(D, width, 0.8, 23, 1), W_K = testing::random_matrix(D, width, 0.8, 23, 2);
  const Eigen::RowVectorXd b_Q = testing::random_matrix(1, width, 0.3, 23, 3).row(0);
  const Eigen::RowVectorXd b_K = testing::random_matrix(1, width, 0.3, 23, 4).row(0);
  const Eigen::VectorXd gain = testing::random_matrix(width, 1, 0.4, 23, 5).array() + 1.0;
  const double eps = 0.05;
  for (const bool angle_table : {false, true}) {
    const theory::Rotary rotary =
        angle_table ? theory::Rotary::with_angles(d, testing::random_matrix(n, d / 2, 2.0, 23, 6), true)
                    : theory::Rotary::half_split(d, 100);
    // Head 0's rows from the whole layer's weights, by the definition.
    const auto head_rows = [&](const Matrix& W, const Eigen::RowVectorXd& b) {
      const Matrix P = (X * W).rowwise() + b;
      Matrix rows(n, d);
      for (Index t = 0; t < n; ++t) {
        const double rms = std::sqrt(P.row(t).squaredNorm() / static_cast<double>(width) + eps);
        rows.row(t) = P.row(t).head(d).cwiseProduct(gain.head(d).transpose()) / rms;
      }
      theory::apply_rotary(rotary, rows);
      return rows;
    };
    const Matrix P_Q = (X * W_Q).rowwise() + b_Q, P_K = (X * W_K).rowwise() + b_K;
    const Matrix raw_queries = P_Q.leftCols(d), raw_keys = P_K.leftCols(d);
    const theory::OtherHeads query_others{d, P_Q.rightCols(d).rowwise().squaredNorm(), Matrix()};
    const theory::OtherHeads key_others{d, P_K.rightCols(d).rowwise().squaredNorm(),
                                        P_K.rightCols(d) * P_K.rightCols(d).transpose()};
    const theory::HeadNorm head_gain{gain.head(d), eps};
    Matrix V = theory::head_normalized(raw_queries, head_gain, &query_others);
    Matrix U = theory::head_normalized(raw_keys, head_gain, &key_others);
    theory::apply_rotary(rotary, V);
    theory::apply_rotary(rotary, U);
    CHECK((V - head_rows(W_Q, b_Q)).cwiseAbs().maxCoeff() < 1e-14);
    theory::ScoreMaps maps{&rotary, &head_gain, &head_gain, &raw_queries, &raw_keys, 0.8};
    maps.query_others = &query_others;
    maps.key_others = &key_others;
    const double inner = 1 / std::sqrt(static_cast<double>(d));
    for (const bool softmax : {true, false}) {
      INFO((angle_table ? "angles per position, " : "frequencies, ") << (softmax ? "softmax" : "x^3 / 2"));
      const AttentionMap map = softmax ? AttentionMap{{ActivationKind::softmax}, inner, {}}
                                       : AttentionMap{{ActivationKind::pointwise, Pointwise::poly, 3}, inner, {1, 0}};
      // The softmax causal and capped (0.8 tanh(S / 0.8)); x^3 over every key, its outer scale 1/2 on the map.
      const auto attention = [&](const Matrix& Wq, const Matrix& Wk) -> Matrix {
        const Matrix S = inner * head_rows(Wq, b_Q) * head_rows(Wk, b_K).transpose();
        if (!softmax) return 0.5 * S.array().cube().matrix();
        Matrix L = S.unaryExpr([](double s) { return 0.8 * std::tanh(s / 0.8); });
        for (Index i = 0; i < n; ++i)
          for (Index j = i + 1; j < n; ++j) L(i, j) = -std::numeric_limits<double>::infinity();
        return theory::row_softmax(L);
      };
      AttentionMap scaled = map;
      if (!softmax) scaled.outer = {0.5, 0};
      theory::ScoreMaps these = maps;
      if (!softmax) these.logit_softcap = 0;
      const auto norms = softmax ? theory::attention_norms_from_projections(scaled, X, V, U, true, these)
                                 : theory::attention_norms_from_projections(scaled, X, V, U, false, these);
      CHECK(testing::relative_difference(norms.value_fro, attention(W_Q, W_K).norm()) < 1e-13);
      const Matrix fd_q = testing::finite_difference_jacobian([&](const Matrix& w) { return attention(w, W_K); }, W_Q);
      const Matrix fd_k = testing::finite_difference_jacobian([&](const Matrix& w) { return attention(W_Q, w); }, W_K);
      CHECK(testing::relative_difference(*norms.dQ_fro, fd_q.norm()) < 1e-7);
      CHECK(testing::relative_difference(*norms.dK_fro, fd_k.norm()) < 1e-7);
      // Head 1's columns of W (entries r width + d .. r width + 2 d - 1 of the row-major vec) move head 0's map:
      // the whole W is what counts (a few percent of it here, far above the differences' 1e-7).
      const auto head_1_part = [&](const Matrix& jacobian) {
        double sum = 0;
        for (Index r = 0; r < D; ++r) sum += jacobian.middleCols(r * width + d, d).squaredNorm();
        return std::sqrt(sum);
      };
      CHECK(head_1_part(fd_q) > 0.01 * fd_q.norm());
      CHECK(head_1_part(fd_k) > 0.01 * fd_k.norm());
    }
  }
}

TEST_CASE("soft-capped softmax dA/dW_K keeps its relative accuracy on near one-hot rows") {
  // Normalized rows bound the scores, so it takes a larger scale than without the norms to make the rows one-hot.
  NormedCase c = normed_case(6, 3, 4, 1.0, 41, true, true, true, 2000);
  for (const double inner : {80.0, 160.0, 320.0}) {
    const AttentionMap map{{ActivationKind::softmax}, inner, {}};
    theory::AttendedMask causal(6, 6);
    for (Index i = 0; i < 6; ++i)
      for (Index j = 0; j < 6; ++j) causal(i, j) = j <= i;
    const auto norms = theory::attention_norms_from_projections(map, c.X, c.V, c.U, true, maps_of(c));
    const double dk = normed_chain_rule_norm(map, c, causal, theory::Parameter::K);
    INFO("inner " << inner << ": closed form " << *norms.dK_fro << ", chain rule " << dk);
    CHECK(dk < 1e-3 * normed_chain_rule_norm({{ActivationKind::pointwise, Pointwise::identity, 1}, inner, {}}, c,
                                             causal, theory::Parameter::K));
    CHECK(testing::relative_difference(*norms.dK_fro, dk) < 1e-9);
  }
}

TEST_CASE("norms and caps that cannot apply are refused, naming what is wrong") {
  NormedCase c = normed_case(3, 2, 4, 1.0, 5, true, false, false, 0);
  const AttentionMap map{{ActivationKind::softmax}, 0.5, {}};
  theory::ScoreMaps maps = maps_of(c);
  maps.raw_queries = nullptr;
  CHECK_THROWS_WITH(theory::attention_norms_from_projections(map, c.X, c.V, c.U, true, maps),
                    Catch::Contains("query norm needs the query projections"));
  maps = maps_of(c);
  maps.logit_softcap = -2;
  CHECK_THROWS_WITH(theory::attention_norms_from_projections(map, c.X, c.V, c.U, true, maps),
                    Catch::Contains("logit soft-cap -2"));
  theory::HeadNorm short_gain{Eigen::VectorXd::Ones(3), 1e-6};
  maps = maps_of(c);
  maps.query_norm = &short_gain;
  CHECK_THROWS_WITH(theory::attention_norms_from_projections(map, c.X, c.V, c.U, true, maps),
                    Catch::Contains("gain of 3"));
  CHECK_THROWS_WITH(theory::rms_normalized(c.P_Q, short_gain.gain, 1e-6), Catch::Contains("gain of 3 entries"));
}

TEST_CASE("a head's LayerNorm centres, scales and adds its bias, an RMSNorm only scales") {
  for (const bool layer_norm : {false, true}) {
    const NormedCase c = normed_case(5, 3, 4, 1.5, 20261129, true, true, false, 0.0, layer_norm);
    INFO((layer_norm ? "LayerNorm" : "RMSNorm"));
    CHECK((theory::head_normalized(c.P_Q, *c.query_norm) - c.V).cwiseAbs().maxCoeff() < 1e-14);
    CHECK((theory::head_normalized(c.P_K, *c.key_norm) - c.U).cwiseAbs().maxCoeff() < 1e-14);
  }
  theory::HeadNorm wrong{theory::Vector::Ones(4), 1e-6, true, theory::Vector::Ones(3)};
  CHECK_THROWS_WITH(theory::head_normalized(Matrix::Ones(2, 4), wrong), Catch::Contains("bias of 3 entries"));
}
