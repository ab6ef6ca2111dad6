#include "attncheck/monte_carlo/tensor_power.hpp"

#include "attncheck/monte_carlo/sample_norms.hpp"
#include "attncheck/monte_carlo/sweep.hpp"
#include "attncheck/records/memory_budget.hpp"
#include "attncheck/streams/parallel.hpp"
#include "attncheck/streams/random_stream.hpp"

#include <fmt/format.h>

#if defined(ATTNCHECK_MC_OPENBLAS)
#include <cblas.h>
#endif

#include <algorithm>
#include <cmath>

namespace attncheck::monte_carlo {

using streams::parallel_for;
using streams::PhiloxStream;
using theory::ActivationKind;
using theory::Index;
using theory::InputError;
using theory::Matrix;
using theory::Pointwise;
using ColMatrix = Eigen::MatrixXd;

namespace {

// Rows per block: the monomial table of a block stays in cache. Even, so that every block of X starts on a
// whole normal pair of the stream.
constexpr Index kBlockRows = 256;
// Rows per unit of parallel work: fixed, so the order of the partial sums does not depend on the threads.
constexpr Index kChunkRows = 64 * kBlockRows;
// Beyond this many features per row (the side of the Gram matrices) they outgrow the caches and the memory of a
// few per thread, and the direct path is the sane one.
constexpr double kMaxFeatures = 1024;

// The weights a tensor sum carries per row, on the query side (V) and on the key side (U).
enum Weight : int {
  kOnes = 0,       // 1 and 1
  kQueryJacobian,  // ||x_i||^2 and ||u_j||^2 (dQ)
  kKeyJacobian,    // ||v_i||^2 and ||x_j||^2 (dK)
};

// Which orders and weights one point needs.
struct Plan {
  int p = 1;
  bool linear = false;
  EstimandRequest request;
  struct Order {
    int m = 0;
    std::vector<int> weights;
  };
  std::vector<Order> orders;
  int top = 0;

  // Even orders m go through the Gram matrices of the order-m/2 monomials, odd ones through the order-m sums.
  static int generated(int m) { return m % 2 == 0 ? m / 2 : m; }
  void need(int m, int weight) {
    for (Order& o : orders) {
      if (o.m == m) {
        if (std::find(o.weights.begin(), o.weights.end(), weight) == o.weights.end()) o.weights.push_back(weight);
        return;
      }
    }
    orders.push_back({m, {weight}});
    top = std::max(top, generated(m));
  }
  std::size_t slot(int m) const {
    for (std::size_t k = 0; k < orders.size(); ++k) {
      if (orders[k].m == m) return k;
    }
    return orders.size();
  }
  std::size_t column(int m, int weight) const {
    const auto& w = orders[slot(m)].weights;
    return static_cast<std::size_t>(std::find(w.begin(), w.end(), weight) - w.begin());
  }
};

std::optional<std::string> unsupported(const SweepPoint& point, const std::vector<Estimand>& estimands) {
  const theory::Activation& act = point.map.activation;
  if (point.mix) return std::string("C9's cross-normalized output is not elementwise");
  if (point.scores != theory::ScoreModel::projected) {
    return fmt::format("scores {}: the tensor path forms projected scores only", theory::term_of(point.scores).word);
  }
  const bool poly = act.kind == ActivationKind::pointwise && act.h == Pointwise::poly && act.p >= 1;
  const bool identity = act.kind == ActivationKind::pointwise && act.h == Pointwise::identity;
  if (!poly && !identity) return fmt::format("phi {}: the tensor path needs x^p with p >= 1", theory::phi_label(act));
  for (const Estimand e : estimands) {
    if (e == Estimand::score_var || e == Estimand::dV) {
      return fmt::format("estimand {}: the tensor path has value, dS, dQ, dK, row-sum and row-mean",
                         theory::term_of(e).word);
    }
  }
  return std::nullopt;
}

Plan make_plan(const SweepPoint& point, const std::vector<Estimand>& estimands) {
  if (auto why = unsupported(point, estimands)) throw InputError(*why);
  Plan plan;
  plan.request = check_request(point, estimands);
  const theory::Activation& act = point.map.activation;
  plan.linear = plan.request.linear;
  plan.p = act.h == Pointwise::identity ? 1 : act.p;
  const int p = plan.p;
  const EstimandRequest& r = plan.request;
  if (r.value) plan.need(2 * p, kOnes);
  if (r.dS) plan.need(2 * p - 2, kOnes);
  if (r.dQ) plan.need(2 * p - 2, kQueryJacobian);
  if (r.dK) plan.need(2 * p - 2, kKeyJacobian);
  if (r.any_row_sum()) plan.need(p, kOnes);
  return plan;
}

// C(n, k) in double (sizes only: compared with limits, never used as an index while huge).
double binomial(double n, double k) {
  double out = 1;
  for (int i = 1; i <= static_cast<int>(k); ++i) out = out * (n - k + i) / i;
  return out;
}

// Monomials of orders 0..top in d variables, order by order: monomial c = monomial parent[c] * y[var[c]] with
// var non-decreasing along the chain, so each multiset of variables appears once.
struct MonomialTable {
  std::vector<Index> offset;  // order k occupies [offset[k], offset[k + 1])
  std::vector<Index> parent;
  std::vector<Index> var;
  std::vector<double> multinomial;  // m! / alpha! of monomial alpha of order m

  MonomialTable(Index d, int top) {
    std::vector<int> last_exponent{0};
    parent.push_back(-1);
    var.push_back(0);
    multinomial.push_back(1);
    offset = {0, 1};
    for (int k = 1; k <= top; ++k) {
      for (Index c = offset[static_cast<std::size_t>(k - 1)]; c < offset[static_cast<std::size_t>(k)]; ++c) {
        for (Index v = var[static_cast<std::size_t>(c)]; v < d; ++v) {
          const bool repeats = k > 1 && v == var[static_cast<std::size_t>(c)];
          const int exponent = repeats ? last_exponent[static_cast<std::size_t>(c)] + 1 : 1;
          parent.push_back(c);
          var.push_back(v);
          last_exponent.push_back(exponent);
          // m! / alpha! from (m - 1)! / alpha'!: times m over the new exponent (an integer throughout).
          multinomial.push_back(multinomial[static_cast<std::size_t>(c)] * k / exponent);
        }
      }
      offset.push_back(static_cast<Index>(parent.size()));
    }
    root_multinomial = Eigen::Map<const Eigen::VectorXd>(multinomial.data(), size()).cwiseSqrt();
  }
  Eigen::VectorXd root_multinomial;  // sqrt of multinomial: the scale of a feature

  Index size() const { return offset.back(); }
  Eigen::RowVectorXd multinomial_row(int m) const {
    return Eigen::Map<const Eigen::RowVectorXd>(multinomial.data() + begin(m), count(m));
  }
  Index begin(int m) const { return offset[static_cast<std::size_t>(m)]; }
  Index count(int m) const { return offset[static_cast<std::size_t>(m) + 1] - offset[static_cast<std::size_t>(m)]; }
};

// Per order of the plan, per side, per weight: for an even order m the Gram matrix sum_r w_r phi_r phi_r^T of
// the scaled order-m/2 monomials phi_r (a block of the order-m symmetric tensor: v^{(x)m} = v^{(x)m/2} (x)
// v^{(x)m/2}, so the inner product of two such sums is the Frobenius product of the Gram matrices, and the
// update is a GEMM); for an odd order the row vector sum_r w_r y_r^alpha.
struct Sums {
  std::vector<std::vector<ColMatrix>> query, key;

  Sums(const Plan& plan, const MonomialTable& table) {
    for (const auto& o : plan.orders) {
      const Index features = table.count(Plan::generated(o.m));
      const Index rows = o.m % 2 == 0 ? features : 1;
      query.emplace_back(o.weights.size(), ColMatrix::Zero(rows, features));
      key.emplace_back(o.weights.size(), ColMatrix::Zero(rows, features));
    }
  }
  Sums& operator+=(const Sums& other) {
    for (std::size_t k = 0; k < query.size(); ++k) {
      for (std::size_t w = 0; w < query[k].size(); ++w) {
        query[k][w] += other.query[k][w];
        key[k][w] += other.key[k][w];
      }
    }
    return *this;
  }
};

// Workspace of one block, reused across blocks of a chunk.
struct BlockWork {
  ColMatrix monomials, features;
};

// G += F^T F, lower triangle only (the upper stays zero): the update that dominates the path's time, through
// OpenBLAS's syrk when the build has it (as the score tiles), else Eigen's.
void add_gram_lower(const ColMatrix& F, ColMatrix& G) {
#if defined(ATTNCHECK_MC_OPENBLAS)
  cblas_dsyrk(CblasColMajor, CblasLower, CblasTrans, static_cast<blasint>(F.cols()), static_cast<blasint>(F.rows()),
              1.0, F.data(), static_cast<blasint>(F.rows()), 1.0, G.data(), static_cast<blasint>(G.rows()));
#else
  G.selfadjointView<Eigen::Lower>().rankUpdate(F.transpose());
#endif
}

// Adds the block's rows of one side (y) to that side's sums, for every order and weight of the plan.
void add_side(const Plan& plan, const MonomialTable& table, const ColMatrix& y, const Eigen::VectorXd& weight_a,
              const Eigen::VectorXd& weight_b, BlockWork& work, std::vector<std::vector<ColMatrix>>& sums) {
  const Index rows = y.rows();
  const Index needed = table.begin(plan.top) + table.count(plan.top);
  work.monomials.resize(rows, needed);
  work.monomials.col(0).setOnes();
  for (Index c = 1; c < needed; ++c) {
    work.monomials.col(c) = work.monomials.col(table.parent[static_cast<std::size_t>(c)])
                                .cwiseProduct(y.col(table.var[static_cast<std::size_t>(c)]));
  }
  const Eigen::VectorXd ones = Eigen::VectorXd::Ones(rows);
  for (std::size_t k = 0; k < plan.orders.size(); ++k) {
    const auto& o = plan.orders[k];
    const int h = Plan::generated(o.m);
    const Index first = table.begin(h), count = table.count(h);
    for (std::size_t w = 0; w < o.weights.size(); ++w) {
      const Eigen::VectorXd& weight = o.weights[w] == kOnes            ? ones
                                      : o.weights[w] == kQueryJacobian ? weight_a
                                                                       : weight_b;
      if (o.m % 2 == 1) {
        sums[k][w].noalias() += weight.transpose() * work.monomials.middleCols(first, count);
        continue;
      }
      // phi_r = sqrt(w_r) (sqrt(h! / alpha!) y_r^alpha)_alpha; the weights are squared norms, never negative.
      work.features = weight.cwiseSqrt().asDiagonal() * work.monomials.middleCols(first, count) *
                      table.root_multinomial.segment(first, count).asDiagonal();
      add_gram_lower(work.features, sums[k][w]);
    }
  }
}

// One block of rows of X: projections, row norms and both sides' tensor sums.
void add_block(const Plan& plan, const MonomialTable& table, const Matrix& X_block, const Matrix& Q, const Matrix& K,
               BlockWork& work, Sums& sums) {
  const ColMatrix v = X_block * Q, u = X_block * K;
  const Eigen::VectorXd x_sq = X_block.rowwise().squaredNorm();
  const Eigen::VectorXd v_sq = v.rowwise().squaredNorm(), u_sq = u.rowwise().squaredNorm();
  add_side(plan, table, v, x_sq, v_sq, work, sums.query);
  add_side(plan, table, u, u_sq, x_sq, work, sums.key);
}

// The inner product of the two sides' order-m tensors: <G_V, G_U>_F for even m, sum_alpha (m! / alpha!)
// A_alpha B_alpha for odd m.
double tensor_inner(const Plan& plan, const MonomialTable& table, const Sums& sums, int m, int weight) {
  const std::size_t k = plan.slot(m), w = plan.column(m, weight);
  const ColMatrix& a = sums.query[k][w];
  const ColMatrix& b = sums.key[k][w];
  // Lower triangles of symmetric matrices: the off-diagonal products count twice.
  if (m % 2 == 0) return 2 * a.cwiseProduct(b).sum() - a.diagonal().dot(b.diagonal());
  return (a.cwiseProduct(b) * table.multinomial_row(m).transpose()).value();
}

SampleValues finish(const Plan& plan, const MonomialTable& table, const Sums& sums, const theory::AttentionMap& map,
                    Index n) {
  const EstimandRequest& r = plan.request;
  const int p = plan.p;
  const double lambda = map.inner, pp = static_cast<double>(p) * p;
  SampleTotals t;
  if (plan.linear) {
    const std::size_t zero = plan.slot(0);
    if (r.value) t.gram_dot = tensor_inner(plan, table, sums, 2, kOnes);
    if (r.dQ) {
      t.x_sq = sums.query[zero][plan.column(0, kQueryJacobian)](0, 0);
      t.u_sq = sums.key[zero][plan.column(0, kQueryJacobian)](0, 0);
    }
    if (r.dK) {
      t.v_sq = sums.query[zero][plan.column(0, kKeyJacobian)](0, 0);
      t.x_sq = sums.key[zero][plan.column(0, kKeyJacobian)](0, 0);
    }
  } else {
    if (r.value) t.entries.value_sq = std::pow(lambda, 2 * p) * tensor_inner(plan, table, sums, 2 * p, kOnes);
    const double jacobian_scale = pp * std::pow(lambda, 2 * p - 2);
    if (r.dS) t.entries.dS_sq = jacobian_scale * tensor_inner(plan, table, sums, 2 * p - 2, kOnes);
    if (r.dQ) t.entries.dQ_sq = jacobian_scale * tensor_inner(plan, table, sums, 2 * p - 2, kQueryJacobian);
    if (r.dK) t.entries.dK_sq = jacobian_scale * tensor_inner(plan, table, sums, 2 * p - 2, kKeyJacobian);
  }
  if (r.any_row_sum()) t.entry_total = std::pow(lambda, p) * tensor_inner(plan, table, sums, p, kOnes);
  const double all = t.gram_dot + t.x_sq + t.u_sq + t.v_sq + t.entries.value_sq + t.entries.dS_sq + t.entries.dQ_sq +
                     t.entries.dK_sq + t.entry_total;
  if (!std::isfinite(all)) throw InputError("non-finite tensor sum (a score overflowed a double)");
  return sample_values(r, map, n, t);
}

double monomials_per_row(Index d, int top) { return binomial(static_cast<double>(d + top), top); }
// Monomials of order exactly m: the side of a Gram matrix (even orders) or the length of a sum (odd ones).
double monomials_of_order(Index d, int m) { return binomial(static_cast<double>(d + m - 1), m); }

Plan checked_plan(const SweepPoint& point, const std::vector<Estimand>& estimands) {
  Plan plan = make_plan(point, estimands);
  const double features = monomials_of_order(point.d, plan.top);
  if (features > kMaxFeatures) {
    throw InputError(
        fmt::format("--path tensor: d = {} and order {} give {:.4g} monomials per row, more than {:g}; "
                    "use --path direct",
                    point.d, plan.top, features, kMaxFeatures));
  }
  return plan;
}

// Sums over chunks of rows [0, n), each chunk's blocks from `fill_block(first row, rows, block)`, chunk totals
// added in chunk order.
template <class FillBlock>
Sums chunked_sums(const Plan& plan, const MonomialTable& table, Index n, Index D, const Matrix& Q, const Matrix& K,
                  int threads, const FillBlock& fill_block) {
  const Index chunks = (n + kChunkRows - 1) / kChunkRows;
  // Chunks run in waves of `threads`, each wave's sums added to the total in chunk order: memory for one wave
  // only, and the same additions in the same order for any thread count.
  const Index wave = std::max(threads, 1);
  std::vector<Sums> partial(static_cast<std::size_t>(std::min(wave, chunks)), Sums(plan, table));
  Sums total(plan, table);
  for (Index c0 = 0; c0 < chunks; c0 += wave) {
    const Index in_wave = std::min(wave, chunks - c0);
    parallel_for(in_wave, threads, [&](Index w) {
      const Index c = c0 + w;
      Sums& sums = partial[static_cast<std::size_t>(w)];
      sums = Sums(plan, table);
      BlockWork work;
      Matrix block;
      const Index end = std::min(n, (c + 1) * kChunkRows);
      for (Index r0 = c * kChunkRows; r0 < end; r0 += kBlockRows) {
        const Index rows = std::min(kBlockRows, end - r0);
        block.resize(rows, D);
        fill_block(c, r0, rows, block);
        add_block(plan, table, block, Q, K, work, sums);
      }
    });
    for (Index w = 0; w < in_wave; ++w) total += partial[static_cast<std::size_t>(w)];
  }
  return total;
}

}  // namespace

const char* evaluation_path_name(EvaluationPath path) {
  switch (path) {
    case EvaluationPath::automatic: return "auto";
    case EvaluationPath::direct: return "direct";
    case EvaluationPath::tensor: return "tensor";
  }
  return "?";
}

std::optional<std::string> tensor_path_unsupported(const SweepPoint& point, const std::vector<Estimand>& estimands) {
  return unsupported(point, estimands);
}

PathCosts path_flops(const SweepPoint& point, const std::vector<Estimand>& estimands) {
  const double n = static_cast<double>(point.N), D = static_cast<double>(point.D), d = static_cast<double>(point.d);
  const EstimandRequest r = check_request(point, estimands);
  const double projections = 4 * n * D * d + 2 * n * (D + 2 * d);
  PathCosts costs;
  // Direct: the Gram matrices of the linear maps, else N^2 scores by GEMM (2d each) and their per-entry terms.
  const double p = point.map.activation.p;
  if (r.linear) {
    costs.direct = projections + ((r.value || r.score_var) ? 4 * n * d * d : 0);
  } else {
    const double tiles = r.any_norm() ? n * n * (2 * d + 2 * p + 6) : 0;
    const double row_sums = r.any_row_sum() ? n * n * (2 * d + p) : 0;
    costs.direct = projections + tiles + row_sums;
  }
  if (unsupported(point, estimands)) {
    costs.tensor = std::numeric_limits<double>::infinity();
    return costs;
  }
  const Plan plan = make_plan(point, estimands);
  double per_row = monomials_per_row(point.d, plan.top) - 1;
  for (const auto& o : plan.orders) {
    const double features = monomials_of_order(point.d, Plan::generated(o.m));
    per_row +=
        static_cast<double>(o.weights.size()) * (o.m % 2 == 0 ? 2 * features * features + 2 * features : 2 * features);
  }
  costs.tensor = projections + 2 * n * per_row;
  return costs;
}

EvaluationPath choose_path(EvaluationPath requested, const SweepPoint& point, const std::vector<Estimand>& estimands) {
  if (requested == EvaluationPath::direct) return requested;
  if (requested == EvaluationPath::tensor) {
    if (auto why = unsupported(point, estimands)) throw InputError(fmt::format("--path tensor: {}", *why));
    (void)checked_plan(point, estimands);
    return requested;
  }
  if (unsupported(point, estimands)) return EvaluationPath::direct;
  if (monomials_of_order(point.d, make_plan(point, estimands).top) > kMaxFeatures) return EvaluationPath::direct;
  const PathCosts costs = path_flops(point, estimands);
  // The linear maps cost O(N d^2) on either path, but the direct one holds X whole (1.3 GB at N = 10^7, D = 16,
  // per thread) where the tensor path streams it: the tie goes to the stream.
  const bool linear = check_request(point, estimands).linear;
  return costs.tensor < costs.direct || linear ? EvaluationPath::tensor : EvaluationPath::direct;
}

std::uint64_t tensor_path_bytes(const SweepPoint& point, const std::vector<Estimand>& estimands) {
  const Plan plan = checked_plan(point, estimands);
  const auto monomials = static_cast<std::uint64_t>(monomials_per_row(point.d, plan.top));
  const auto features = static_cast<std::uint64_t>(monomials_of_order(point.d, plan.top));
  const auto rows = static_cast<std::uint64_t>(kBlockRows), D = static_cast<std::uint64_t>(point.D),
             d = static_cast<std::uint64_t>(point.d);
  using records::saturating_product;
  using records::saturating_sum;
  // A block of X, its projections, monomials and features; a chunk's sums and the total (up to 3 weights of 2
  // orders, both sides, features^2 each); Q and K.
  return saturating_product(
      {sizeof(double),
       saturating_sum({saturating_product({rows, D + 2 * d + monomials + features + 3}),
                       saturating_product({2 * 2 * 3 * 2, features, features}), saturating_product({2, D, d})})});
}

SampleValues evaluate_tensor_sample(const SweepPoint& point, const std::vector<Estimand>& estimands, std::uint64_t k,
                                    int threads) {
  const Plan plan = checked_plan(point, estimands);
  const MonomialTable table(point.d, plan.top);
  const Index n = point.N, D = point.D, d = point.d;
  // The documented order: X (N x D), then Q, then K. X is drawn per block; Q and K past it.
  const auto pairs = [](Index count) { return static_cast<std::uint64_t>((count + 1) / 2); };
  PhiloxStream weights_stream(point.seed, k);
  weights_stream.skip_blocks(pairs(n * D));
  Matrix Q(D, d), K(D, d);
  weights_stream.fill_normal(Q.data(), Q.data() + Q.size(), point.sigma_t);
  weights_stream.fill_normal(K.data(), K.data() + K.size(), point.sigma_t);
  std::vector<std::optional<PhiloxStream>> streams(static_cast<std::size_t>((n + kChunkRows - 1) / kChunkRows));
  const Sums sums =
      chunked_sums(plan, table, n, D, Q, K, threads, [&](Index chunk, Index r0, Index /*rows*/, Matrix& block) {
        auto& stream = streams[static_cast<std::size_t>(chunk)];
        if (!stream) {
          stream.emplace(point.seed, k);
          stream->skip_blocks(static_cast<std::uint64_t>(r0 * D / 2));  // r0 is even: whole pairs
        }
        stream->fill_normal(block.data(), block.data() + block.size(), point.sigma_x);
      });
  return finish(plan, table, sums, point.map, n);
}

SampleValues evaluate_tensor_inputs(const theory::AttentionMap& map, const Matrix& X, const Matrix& Q, const Matrix& K,
                                    const std::vector<Estimand>& estimands) {
  if (X.rows() == 0 || Q.rows() != X.cols() || K.rows() != X.cols() || Q.cols() != K.cols() || Q.cols() == 0) {
    throw InputError(fmt::format("shapes do not chain: X is {}x{}, Q is {}x{}, K is {}x{}", X.rows(), X.cols(),
                                 Q.rows(), Q.cols(), K.rows(), K.cols()));
  }
  SweepPoint point;
  point.N = X.rows();
  point.D = X.cols();
  point.d = Q.cols();
  point.map = map;
  const Plan plan = checked_plan(point, estimands);
  const MonomialTable table(point.d, plan.top);
  const Sums sums = chunked_sums(plan, table, point.N, point.D, Q, K, 1,
                                 [&](Index, Index r0, Index rows, Matrix& block) { block = X.middleRows(r0, rows); });
  return finish(plan, table, sums, map, point.N);
}

}  // namespace attncheck::monte_carlo
