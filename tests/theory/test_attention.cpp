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
