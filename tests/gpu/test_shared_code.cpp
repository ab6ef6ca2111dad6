// The code the CUDA kernels share with the CPU, compiled here by the host compiler: the per-entry terms as
// the kernels split a row over the lanes of a group, the normal-pair layout, and the batch plan.

#include "attncheck/theory/vocabulary.hpp"
#include "attncheck/gpu/batch_plan.hpp"
#include "attncheck/gpu/normal_layout.hpp"
#include "attncheck/monte_carlo/cpu_backend.hpp"
#include "attncheck/monte_carlo/entry_terms.hpp"
#include "attncheck/monte_carlo/sweep.hpp"
#include "attncheck/streams/random_stream.hpp"
#include "attncheck/theory/attention.hpp"

#include <catch2/catch.hpp>
#include <rapidcheck/catch.h>

#include <cmath>
#include <optional>
#include <limits>
#include <string>
#include <vector>

using namespace attncheck;
using monte_carlo::NormSums;
using monte_carlo::PointwiseRowSums;
using monte_carlo::SoftmaxRowSums;
using theory::ActivationKind;
using theory::Index;
using theory::Matrix;
using theory::Pointwise;

namespace {

Matrix gaussian(Index rows, Index cols, std::uint64_t seed, double sd) {
  Matrix m(rows, cols);
  streams::PhiloxStream stream(seed, 0);
  stream.fill_normal(m.data(), m.data() + m.size(), sd);
  return m;
}

// The kernels' split of a row: lane l of a group of G takes columns l, l + G, ..., accumulates its own row
// sums with the shared entry terms, and the group adds the lanes' sums field by field (the top probability
// sits in exactly one lane, so the sum carries it unchanged). Then finish_*_row, once per row.
NormSums<double> lane_split_sums(const theory::AttentionMap& map, const Matrix& X, const Matrix& Q, const Matrix& K,
                                 int G) {
  const Matrix Vraw = X * Q, U = X * K;
  const Matrix S = map.inner * Vraw * U.transpose();
  const Index n = X.rows();
  const auto& act = map.activation;
  NormSums<double> total;
  for (Index i = 0; i < n; ++i) {
    const double x_sq_i = X.row(i).squaredNorm(), v_sq_i = Vraw.row(i).squaredNorm();
    if (act.kind == ActivationKind::softmax) {
      Index top = 0;
      for (Index j = 1; j < n; ++j) {
        if (S(i, j) > S(i, top)) top = j;
      }
      double norm = 0;
      for (Index j = 0; j < n; ++j) norm += std::exp(S(i, j) - S(i, top));
      Eigen::RowVectorXd a(n);
      for (Index j = 0; j < n; ++j) a[j] = std::exp(S(i, j) - S(i, top)) / norm;
      const Eigen::RowVectorXd u_bar = a * U, x_bar = a * X;
      SoftmaxRowSums<double> merged;
      for (int lane = 0; lane < G; ++lane) {
        SoftmaxRowSums<double> row;
        for (Index j = lane; j < n; j += G) {
          monte_carlo::add_softmax_probability(row, a[j], j == top);
          row.dq_inner += a[j] * a[j] * monte_carlo::squared_distance(U.row(j).data(), u_bar.data(), int(U.cols()));
          row.dk_inner += a[j] * a[j] * monte_carlo::squared_distance(X.row(j).data(), x_bar.data(), int(X.cols()));
        }
        merged.top += row.top;
        merged.rest_mass += row.rest_mass;
        merged.rest_sq += row.rest_sq;
        merged.rest_4 += row.rest_4;
        merged.rest_one_minus += row.rest_one_minus;
        merged.dq_inner += row.dq_inner;
        merged.dk_inner += row.dk_inner;
      }
      monte_carlo::finish_softmax_row(total, merged, x_sq_i, v_sq_i);
    } else {
      PointwiseRowSums<double> merged;
      for (int lane = 0; lane < G; ++lane) {
        PointwiseRowSums<double> row;
        for (Index j = lane; j < n; j += G) {
          monte_carlo::add_entry(row, monte_carlo::pointwise_entry_terms(act.h, act.p, S(i, j)), U.row(j).squaredNorm(),
                                 X.row(j).squaredNorm());
        }
        merged.value_sq += row.value_sq;
        merged.deriv_sq += row.deriv_sq;
        merged.dq_inner += row.dq_inner;
        merged.dk_inner += row.dk_inner;
      }
      monte_carlo::finish_pointwise_row(total, merged, x_sq_i, v_sq_i);
    }
  }
  return total;
}

void check_close(double got, double want, const std::string& what) {
  INFO(what << ": lane-split entry terms " << got << ", dense closed form " << want);
  CHECK(std::abs(got - want) <= 1e-11 * std::abs(want));
}

}  // namespace

TEST_CASE("entry terms split over warp-sized and block-sized lane groups equal the dense closed forms") {
  std::vector<theory::Activation> activations{{ActivationKind::softmax, Pointwise::identity, 1}};
  for (int p = 2; p <= 5; ++p) activations.push_back({ActivationKind::pointwise, Pointwise::poly, p});
  for (const theory::ActivationTerm& term : theory::all_activations()) {
    if (term.kind == ActivationKind::pointwise && !term.takes_p) activations.push_back({term.kind, term.h, 1});
  }
  // N = 45 leaves some lanes of a 32-lane group with one column more than others and most of a 256-lane
  // group idle; sigma 1.3 puts relu6's and sigmoid's interesting ranges under the scores.
  const Matrix X = gaussian(45, 7, 11, 1.3), Q = gaussian(7, 5, 12, 1.3), K = gaussian(7, 5, 13, 1.3);
  for (const auto& act : activations) {
    theory::AttentionMap map;
    map.activation = act;
    map.inner = 1 / std::sqrt(5.0);
    const theory::AttentionNorms exact = theory::attention_norms(map, X, Q, K);
    for (int G : {32, 256}) {
      const NormSums<double> sums = lane_split_sums(map, X, Q, K, G);
      const std::string what =
          std::string(theory::term_of(act).word) + " p=" + std::to_string(act.p) + " G=" + std::to_string(G);
      check_close(std::sqrt(sums.value_sq), exact.value_fro, what + " value");
      check_close(std::sqrt(sums.dS_sq), *exact.dS_fro, what + " dS");
      check_close(std::abs(map.inner) * std::sqrt(sums.dQ_sq), *exact.dQ_fro, what + " dQ");
      check_close(std::abs(map.inner) * std::sqrt(sums.dK_sq), *exact.dK_fro, what + " dK");
    }
  }
}

TEST_CASE("the compile-time powers of the kernels equal the run-time power to rounding") {
  for (double s : {-3.7, -1.0, -0.25, 0.0, 1e-3, 0.5, 2.0, 11.0}) {
    const auto check = [s](auto terms, int p) {
      const auto generic = monte_carlo::pointwise_entry_terms(Pointwise::poly, p, s);
      INFO("p = " << p << ", s = " << s);
      CHECK(std::abs(terms.value_sq - generic.value_sq) <= 1e-14 * std::abs(generic.value_sq));
      CHECK(std::abs(terms.deriv_sq - generic.deriv_sq) <= 1e-14 * std::abs(generic.deriv_sq));
    };
    check(monte_carlo::poly_entry_terms<2>(s), 2);
    check(monte_carlo::poly_entry_terms<3>(s), 3);
    check(monte_carlo::poly_entry_terms<4>(s), 4);
    check(monte_carlo::poly_entry_terms<5>(s), 5);
    check(monte_carlo::poly_entry_terms<6>(s), 6);
  }
}

TEST_CASE("normal pairs placed by NormalLayout, one pair per stream position, rebuild draw_sample bit for bit") {
  rc::prop("any N, D, d, d_v (C9's W_V or none), odd or even", [] {
    const Index N = *rc::gen::inRange<Index>(1, 12), D = *rc::gen::inRange<Index>(1, 7),
                d = *rc::gen::inRange<Index>(1, 7), dv = *rc::gen::inRange<Index>(0, 6);
    const std::uint64_t seed = *rc::gen::arbitrary<std::uint64_t>(), k = *rc::gen::inRange<std::uint64_t>(0, 1000);
    const monte_carlo::SweepPoint point =
        monte_carlo::make_sweep_point({N, D, d, 1.7, 0.3}, {}, seed, theory::ScoreModel::projected,
                                      dv > 0 ? std::optional<double>(1) : std::nullopt, dv);
    monte_carlo::SampleInputs cpu;
    monte_carlo::draw_sample(point, k, cpu);

    const gpu::NormalLayout layout{N * D, D * d, D * d, D * dv};
    const double nan = std::numeric_limits<double>::quiet_NaN();
    Matrix X = Matrix::Constant(N, D, nan), Q = Matrix::Constant(D, d, nan), K = Matrix::Constant(D, d, nan);
    Matrix W = Matrix::Constant(D, dv, nan);
    streams::PhiloxStream stream(seed, k);  // position `pair` of the stream, as curand_init(seed, k, 4 pair)
    for (std::int64_t pair = 0; pair < layout.total_pairs(); ++pair) {
      const auto z = stream.next_normal_pair();
      const gpu::NormalSlot slot = layout.slot(pair);
      Matrix& target = slot.target == gpu::DrawTarget::X   ? X
                       : slot.target == gpu::DrawTarget::Q ? Q
                       : slot.target == gpu::DrawTarget::K ? K
                                                           : W;
      const double sd = slot.target == gpu::DrawTarget::X ? point.sigma_x : point.sigma_t;
      RC_ASSERT(slot.element + slot.count <= target.size());
      RC_ASSERT(std::isnan(target.data()[slot.element]));  // no element written twice
      target.data()[slot.element] = sd * z[0];
      if (slot.count == 2) target.data()[slot.element + 1] = sd * z[1];
    }
    // Bit for bit: NaN (never written) would also fail these.
    RC_ASSERT(X == cpu.X);
    RC_ASSERT(Q == cpu.Q);
    RC_ASSERT(K == cpu.K);
    RC_ASSERT(W.size() == cpu.W_V.size());
    if (dv > 0) RC_ASSERT(W == cpu.W_V);
  });
}

TEST_CASE("the batch plan fills the score buffer without overflowing it, the memory or the request") {
  rc::prop("plans stay within every bound", [] {
    const std::int64_t n = *rc::gen::inRange<std::int64_t>(1, 70000);
    const std::int64_t count = *rc::gen::inRange<std::int64_t>(1, 5000);
    const std::int64_t entries = *rc::gen::inRange<std::int64_t>(1, 1 << 24);
    const std::int64_t memory = *rc::gen::inRange<std::int64_t>(1, 100000);
    const gpu::BatchPlan plan = gpu::plan_batch(n, count, entries, memory);
    RC_ASSERT(plan.samples >= 1);
    RC_ASSERT(plan.strip_rows >= 1);
    RC_ASSERT(plan.strip_rows <= n);
    RC_ASSERT(plan.samples <= count);
    RC_ASSERT(plan.samples <= memory);
    RC_ASSERT(plan.samples <= gpu::kMaxBatchSamples);
    // The buffer holds the plan, unless even one row does not fit (then one row is the least possible).
    if (n <= entries) RC_ASSERT(plan.samples * plan.strip_rows * n <= entries);
    if (n * n <= entries) {
      RC_ASSERT(plan.strip_rows == n);  // whole matrices: no strip bookkeeping at small N
      const bool at_a_limit = plan.samples == count || plan.samples == memory || plan.samples == gpu::kMaxBatchSamples;
      RC_ASSERT(at_a_limit || (plan.samples + 1) * n * n > entries);  // as many samples as fit
    } else {
      RC_ASSERT(plan.samples == 1);
      RC_ASSERT(plan.strip_rows == std::max<std::int64_t>(1, entries / n));  // as many rows as fit
    }
  });
}

TEST_CASE("the default score buffer is half the L2 cache, and at least 8 MiB") {
  CHECK(gpu::default_score_buffer_bytes(50 << 20) == std::size_t{25} << 20);  // an H100's 50 MiB
  CHECK(gpu::default_score_buffer_bytes(4 << 20) == std::size_t{8} << 20);
  CHECK(gpu::default_score_buffer_bytes(0) == std::size_t{8} << 20);  // an attribute that reads 0
}
