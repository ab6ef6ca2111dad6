#include "attncheck/monte_carlo/sample_norms.hpp"

#include "attncheck/monte_carlo/sweep.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace attncheck::monte_carlo {

using theory::ActivationKind;
using theory::InputError;
using theory::Pointwise;

EstimandRequest check_request(const theory::AttentionMap& map, theory::ScoreModel scores, theory::Index n,
                              theory::Index d, const std::vector<Estimand>& estimands) {
  const auto wants = [&](Estimand e) { return std::find(estimands.begin(), estimands.end(), e) != estimands.end(); };
  EstimandRequest r;
  r.value = wants(Estimand::value);
  r.dS = wants(Estimand::dS);
  r.dQ = wants(Estimand::dQ);
  r.dK = wants(Estimand::dK);
  r.score_var = wants(Estimand::score_var);
  r.row_sum = wants(Estimand::row_sum);
  r.row_mean = wants(Estimand::row_mean);
  if (wants(Estimand::dV)) {
    throw InputError("estimand dV is the derivative in the values of C9's cross-normalized output (--claim C9)");
  }
  const theory::Activation& act = map.activation;
  r.matpow = act.kind == ActivationKind::matpow;
  r.softmax = act.kind == ActivationKind::softmax;
  r.linear = act.kind == ActivationKind::pointwise &&
             (act.h == Pointwise::identity || (act.h == Pointwise::poly && act.p == 1));
  r.layernorm = scores == theory::ScoreModel::projected_layernorm;
  r.pairs = scores == theory::ScoreModel::unit_pairs || scores == theory::ScoreModel::sign_coupled_pairs;
  if (r.pairs && (r.any_norm() || r.any_row_sum())) {
    throw InputError(fmt::format("scores {}: pairs (q, k) drawn directly have only the score-var estimand",
                                 theory::term_of(scores).word));
  }
  if (r.layernorm && (r.dQ || r.dK)) {
    throw InputError(
        "qk-layernorm: the Q and K Jacobians would need LayerNorm's own Jacobian; estimands value, dS, "
        "row-sum, row-mean and score-var only");
  }
  if (r.layernorm && d < 2)
    throw InputError(fmt::format("qk-layernorm needs d >= 2 (d = {} leaves nothing after centring)", d));
  if (r.matpow && r.any_row_sum()) throw InputError("the matrix-power reading has no row sums (value estimand only)");
  if (r.score_var && n < 2 && !r.pairs) throw InputError("score-var needs N >= 2 (it averages over i != j)");
  if (r.any_norm() && r.matpow) {
    if (r.dS || r.dQ || r.dK) throw InputError("the matrix-power reading is supported for the value estimand only");
    if (act.p < 1) throw InputError(fmt::format("matrix power p = {} must be >= 1", act.p));
  }
  if (r.any_norm() && act.kind == ActivationKind::pointwise && act.h == Pointwise::poly && act.p < 0) {
    throw InputError(fmt::format("power p = {} must be >= 0", act.p));
  }
  return r;
}

EstimandRequest check_request(const SweepPoint& point, const std::vector<Estimand>& estimands) {
  if (!point.mix) return check_request(point.map, point.scores, point.N, point.d, estimands);
  EstimandRequest r;
  r.cross_norm = true;
  r.softmax = true;
  for (const Estimand e : estimands) {
    switch (e) {
      case Estimand::value: r.value = true; break;
      case Estimand::dV: r.dV = true; break;
      case Estimand::dS: r.dS = true; break;
      case Estimand::dQ: r.dQ = true; break;
      default:
        throw InputError(fmt::format("estimand {}: C9's cross-normalized output has the estimands value, dV, dS and dQ",
                                     theory::term_of(e).word));
    }
  }
  if (!(*point.mix >= 0 && *point.mix <= 1)) {
    throw InputError(fmt::format("--mix {}: the mix alpha must lie in [0, 1]", *point.mix));
  }
  if (point.dv < 1) throw InputError(fmt::format("--dv {}: C9 needs at least one value column", point.dv));
  if (point.map.activation.kind != ActivationKind::softmax || point.scores != theory::ScoreModel::projected) {
    throw InputError("C9's cross-normalized output is defined for softmax attention on projected scores only");
  }
  return r;
}

SampleValues sample_values(const EstimandRequest& r, const theory::AttentionMap& map, theory::Index n,
                           const SampleTotals& t) {
  SampleValues out;
  out.fill(std::numeric_limits<double>::quiet_NaN());
  const double lambda = map.inner, c = map.outer.at(n);
  const double nn = static_cast<double>(n);
  if (r.score_var) {
    // E s_ij = 0, so the mean of s_ij^2 over i != j estimates Var(s_ij) without bias.
    out[static_cast<int>(Estimand::score_var)] =
        lambda * lambda * (r.pairs ? t.pairs_sq_mean : (t.gram_dot - t.diagonal_sq) / (nn * (nn - 1)));
  }
  // Every row of F carries the same law, so the mean over the rows estimates E[row sum] with N rows per sample.
  if (r.row_sum) out[static_cast<int>(Estimand::row_sum)] = c * t.entry_total / nn;
  if (r.row_mean) out[static_cast<int>(Estimand::row_mean)] = c * t.entry_total / (nn * nn);
  if (!r.any_norm()) return out;
  if (r.cross_norm) {  // no outer constant: the row-stochastic A is the claim's whole attention
    if (r.value) out[static_cast<int>(Estimand::value)] = std::sqrt(t.entries.value_sq);
    if (r.dV) out[static_cast<int>(Estimand::dV)] = std::sqrt(t.values_grad_sq);
    if (r.dS) out[static_cast<int>(Estimand::dS)] = std::sqrt(t.entries.dS_sq);
    if (r.dQ) out[static_cast<int>(Estimand::dQ)] = std::abs(lambda) * std::sqrt(t.entries.dQ_sq);
    return out;
  }
  if (r.matpow) {
    const int p = map.activation.p;
    out[static_cast<int>(Estimand::value)] = c * std::pow(std::abs(lambda), p) * std::sqrt(t.matpow_sq);
    return out;
  }
  NormSums<double> sums = t.entries;
  if (r.linear) {  // phi' = 1 everywhere: the Jacobians are constant and ||S||_F^2 is the Gram identity (fact 6)
    sums.value_sq = lambda * lambda * t.gram_dot;
    sums.dS_sq = nn * nn;
    sums.dQ_sq = t.x_sq * t.u_sq;
    sums.dK_sq = t.x_sq * t.v_sq;
  }
  if (r.value) out[static_cast<int>(Estimand::value)] = c * std::sqrt(sums.value_sq);
  if (r.dS) out[static_cast<int>(Estimand::dS)] = c * std::sqrt(sums.dS_sq);
  if (r.dQ) out[static_cast<int>(Estimand::dQ)] = c * std::abs(lambda) * std::sqrt(sums.dQ_sq);
  if (r.dK) out[static_cast<int>(Estimand::dK)] = c * std::abs(lambda) * std::sqrt(sums.dK_sq);
  return out;
}

}  // namespace attncheck::monte_carlo
