#include "attncheck/monte_carlo/cpu_backend.hpp"
#include "attncheck/monte_carlo/mc_options.hpp"
#include "attncheck/monte_carlo/sweep.hpp"
#include "attncheck/monte_carlo/tensor_power.hpp"
#include "attncheck/theory/attention.hpp"

#include "../theory/test_support.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

using namespace attncheck;
using namespace attncheck::monte_carlo;
using theory::ActivationKind;
using theory::Matrix;
using theory::Pointwise;

namespace {

const std::vector<Estimand> kTensorEstimands{Estimand::value, Estimand::dS,      Estimand::dQ,
                                             Estimand::dK,    Estimand::row_sum, Estimand::row_mean};

void check_same(const SampleValues& tensor, const SampleValues& direct, const std::vector<Estimand>& estimands,
                double rel, const std::string& what) {
  for (const Estimand e : estimands) {
    const int k = static_cast<int>(e);
    const double scale = std::abs(direct[k]);
    INFO(what << " estimand " << theory::term_of(e).word << ": tensor " << tensor[k] << ", direct " << direct[k]);
    CHECK(std::abs(tensor[k] - direct[k]) <= rel * scale);
  }
}

}  // namespace

TEST_CASE("tensor powers give the direct path's norms of x^p to 1e-10 on random inputs") {
  std::uint64_t stream = 0;
  for (int p = 1; p <= 4; ++p) {
    for (const theory::Index d : {1, 2, 5, 8}) {
      const theory::Index N = 37 + 11 * p, D = d + 3;
      theory::AttentionMap map;
      map.activation = {ActivationKind::pointwise, Pointwise::poly, p};
      map.inner = 1 / std::sqrt(static_cast<double>(d));
      map.outer = {0.7, 0.5};
      const Matrix X = testing::random_matrix(N, D, 1.3, 20261123, stream++);
      const Matrix Q = testing::random_matrix(D, d, 0.8, 20261123, stream++);
      const Matrix K = testing::random_matrix(D, d, 0.9, 20261123, stream++);
      const SampleValues direct = evaluate_inputs(map, X, Q, K, kTensorEstimands);
      const SampleValues tensor = evaluate_tensor_inputs(map, X, Q, K, kTensorEstimands);
      // Row sums of odd powers cancel (mean zero): compared below on their own scale, not relative to ~0.
      const std::vector<Estimand> norms{Estimand::value, Estimand::dS, Estimand::dQ, Estimand::dK};
      check_same(tensor, direct, norms, 1e-10, "p = " + std::to_string(p) + ", d = " + std::to_string(d));
      // sum_ij s_ij^p against sum_ij |s_ij|^p: the roundoff scale of either evaluation.
      const Matrix S = theory::scores(X, Q, K, map.inner);
      const double magnitude = 0.7 / std::sqrt(static_cast<double>(N)) * S.array().abs().pow(p).sum() / N;
      INFO("row-sum, p = " << p << ", d = " << d);
      CHECK(std::abs(tensor[static_cast<int>(Estimand::row_sum)] - direct[static_cast<int>(Estimand::row_sum)]) <=
            1e-12 * magnitude);
    }
  }
}

TEST_CASE("the identity map on the tensor path agrees with the Gram identity") {
  theory::AttentionMap map;
  map.activation = {ActivationKind::pointwise, Pointwise::identity, 1};
  map.inner = 0.37;
  const Matrix X = testing::random_matrix(64, 6, 1, 7, 0), Q = testing::random_matrix(6, 4, 1, 7, 1),
               K = testing::random_matrix(6, 4, 1, 7, 2);
  const std::vector<Estimand> norms{Estimand::value, Estimand::dS, Estimand::dQ, Estimand::dK};
  check_same(evaluate_tensor_inputs(map, X, Q, K, norms), evaluate_inputs(map, X, Q, K, norms), norms, 1e-12,
             "identity");
}

TEST_CASE("a tensor-path sample drawn in row blocks is the direct path's sample k") {
  // N * D odd and N past one chunk of rows: the blocks must resume the stream where the whole matrix would,
  // and drop the last spare draw as the whole matrix does.
  SweepPoint point;
  point.N = 16385;
  point.D = 3;
  point.d = 2;
  point.sigma_x = 1.1;
  point.sigma_t = 0.9;
  point.map.activation = {ActivationKind::pointwise, Pointwise::poly, 2};
  point.map.inner = 1 / std::sqrt(2.0);
  point.seed = 424242;
  const std::vector<Estimand> estimands{Estimand::value, Estimand::dQ};
  SampleInputs in;
  draw_sample(point, 3, in);
  const SampleValues direct = evaluate_inputs(point.map, in.X, in.Q, in.K, estimands, {256, 2});
  for (const int threads : {1, 2}) {
    const SampleValues tensor = evaluate_tensor_sample(point, estimands, 3, threads);
    check_same(tensor, direct, estimands, 1e-10, "threads " + std::to_string(threads));
  }
  // Bit-identical for any thread count: the chunks are fixed and summed in order.
  const SampleValues one = evaluate_tensor_sample(point, estimands, 3, 1),
                     two = evaluate_tensor_sample(point, estimands, 3, 2);
  for (const Estimand e : estimands) CHECK(one[static_cast<int>(e)] == two[static_cast<int>(e)]);
}

TEST_CASE("the path choice follows the flop estimate and refuses what the tensor path cannot do") {
  SweepPoint point;
  point.N = 1 << 20;
  point.D = 16;
  point.d = 8;
  point.map.activation = {ActivationKind::pointwise, Pointwise::poly, 2};
  const std::vector<Estimand> value{Estimand::value};
  const PathCosts large = path_flops(point, value);
  CHECK(large.tensor < large.direct);
  CHECK(choose_path(EvaluationPath::automatic, point, value) == EvaluationPath::tensor);
  point.N = 16;  // 16 scores per row (2d + 10 flops each) cost less than a row's 36 x 36 Gram update
  CHECK(choose_path(EvaluationPath::automatic, point, value) == EvaluationPath::direct);
  CHECK(choose_path(EvaluationPath::tensor, point, value) == EvaluationPath::tensor);
  point.map.activation.p = 1;  // O(N d^2) either way: the path that streams X wins the tie
  CHECK(choose_path(EvaluationPath::automatic, point, value) == EvaluationPath::tensor);
  point.d = 64;
  point.map.activation.p = 6;  // C(76, 12) monomials per row
  point.N = 1 << 20;
  CHECK(choose_path(EvaluationPath::automatic, point, value) == EvaluationPath::direct);
  CHECK_THROWS_WITH(choose_path(EvaluationPath::tensor, point, value), Catch::Contains("monomials per row"));
  point.map.activation = {ActivationKind::softmax, Pointwise::identity, 1};
  CHECK(choose_path(EvaluationPath::automatic, point, value) == EvaluationPath::direct);
  CHECK_THROWS_WITH(choose_path(EvaluationPath::tensor, point, value), Catch::Contains("phi softmax"));
  CHECK_THROWS_WITH(parse_evaluation_path("fast"), Catch::Contains("--path fast: not one of auto, direct, tensor"));
}
