#include "attncheck/monte_carlo/proved_bounds.hpp"

#include "attncheck/monte_carlo/exact_references.hpp"
#include "attncheck/monte_carlo/mc_options.hpp"
#include "attncheck/theory/cross_norm.hpp"
#include "attncheck/theory/pointwise.hpp"
#include "attncheck/theory/vocabulary.hpp"

#include <fmt/format.h>

#include <cmath>

namespace attncheck::monte_carlo {

using records::ProvedBound;
using theory::ActivationKind;
using theory::Pointwise;
using theory::ScoreModel;

namespace {

constexpr const char* kNotes = "docs/THEORY.md, \"Bounds in N\", ";

ProvedBound bound(ProvedBound::Side side, std::optional<double> exponent, bool deterministic, bool subpolynomial,
                  std::string statement, const char* label) {
  return {side, exponent, deterministic, subpolynomial, std::move(statement), std::string(kNotes) + label};
}

// Whether the off-diagonal score puts positive probability where f does not vanish (the lower bounds of B6 and
// B7 need it). Every h here (and h') is non-zero on an interval (0, b) with b > 0, and the projected score has a
// positive density on the reals, qk-layernorm's on (-|lambda| d, |lambda| d) for d >= 3; at d = 2 the centred
// 2-vectors are +-(1, -1) times a scale, so the score is +-2 lambda and f is read there.
template <class F>
bool off_diagonal_reaches(const GrowthCase& g, F f) {
  if (g.scores == ScoreModel::projected) return true;
  if (g.scores != ScoreModel::projected_layernorm || g.d < 2) return false;
  if (g.d >= 3) return true;
  const double s = 2 * std::abs(g.inner);
  return f(s) != 0 || f(-s) != 0;
}

std::string scaled(const std::string& norm, const GrowthCase& g) {
  return g.n_exponent == 0 ? norm : fmt::format("{} (with c(N) = c N^-{})", norm, g.n_exponent);
}

void softmax_bounds(const GrowthCase& g, std::vector<ProvedBound>& out) {
  const double a = g.n_exponent;
  switch (g.estimand) {
    case Estimand::value:
      out.push_back(bound(ProvedBound::Side::upper, 0.5 - a, true, false,
                          scaled("||F||_F <= c(N) sqrt(N) for every input (C1: rows are probability vectors; "
                                 "one-hot rows reach it)",
                                 g),
                          "B1"));
      out.push_back(bound(ProvedBound::Side::lower, -a, true, false,
                          scaled("||F||_F >= c(N) for every input (each row sums to 1)", g), "B1"));
      if (g.scores == ScoreModel::projected) {
        out.push_back(bound(ProvedBound::Side::lower, 0.5 - a, false, true,
                            scaled("E||softmax(S)||_F >= c' sqrt(N) exp(-M (log N)^(1/3)) under the Gaussian model: "
                                   "rare large scores make rows nearly one-hot",
                                   g),
                            "B3"));
      }
      break;
    case Estimand::dS:
      out.push_back(bound(ProvedBound::Side::upper, 0.5 - a, true, false,
                          scaled("||dF/dS||_F <= c(N) sqrt(N)/2 for every input (fact 2: each row's Jacobian "
                                 "has norm at most 1/2)",
                                 g),
                          "B2"));
      if (g.scores == ScoreModel::projected) {
        out.push_back(bound(ProvedBound::Side::lower, 0.5 - a, false, true,
                            scaled("E||dA/dS||_F >= c sqrt(N) exp(-M sqrt(log N)) under the Gaussian model: rows whose "
                                   "scale puts their top probabilities in (0, 1) have Jacobians of order 1",
                                   g),
                            "B9"));
      }
      break;
    case Estimand::dQ:
    case Estimand::dK:
      if (g.scores == ScoreModel::projected) {
        const char* what = g.estimand == Estimand::dQ ? "Q" : "K";
        out.push_back(bound(ProvedBound::Side::upper, 0.5 - a, false, true,
                            scaled(fmt::format("E||dA/d{}||_F <= sqrt(C N log N) under the Gaussian model", what), g),
                            "B4"));
        out.push_back(bound(ProvedBound::Side::lower, 0.5 - a, false, true,
                            scaled(fmt::format("E||dA/d{}||_F >= c sqrt(N) exp(-M sqrt(log N)) under the Gaussian "
                                               "model",
                                               what),
                                   g),
                            "B4"));
      }
      break;
    default: break;
  }
}

void pointwise_bounds(const GrowthCase& g, std::vector<ProvedBound>& out) {
  const Pointwise h = g.activation.h;
  const int p = g.activation.p;
  const double a = g.n_exponent;
  const auto value = [&](double x) { return theory::pointwise_value(h, p, x); };
  const auto derivative = [&](double x) { return theory::pointwise_derivative(h, p, x); };
  const bool layernorm_ok = g.scores != ScoreModel::projected_layernorm || g.d >= 2;
  if (!layernorm_ok || (g.scores != ScoreModel::projected && g.scores != ScoreModel::projected_layernorm)) return;
  const auto theta = [&](const char* what, bool reaches) {
    out.push_back(bound(ProvedBound::Side::upper, 1 - a, false, false,
                        scaled(fmt::format("E||{}||_F <= C N under the Gaussian model (every entry has a finite "
                                           "second moment)",
                                           what),
                               g),
                        "B6"));
    if (reaches) {
      out.push_back(bound(ProvedBound::Side::lower, 1 - a, false, false,
                          scaled(fmt::format("E||{}||_F >= (N - 1) E|t_12| with E|t_12| > 0, t_ij the entries: a "
                                             "norm is at least the sum of its N^2 entries' sizes over N",
                                             what),
                                 g),
                          "B6"));
    }
  };
  switch (g.estimand) {
    case Estimand::value:
      if (const auto sup = theory::value_sup(g.activation)) {
        out.push_back(bound(ProvedBound::Side::upper, 1 - a, true, false,
                            scaled(fmt::format("||F||_F <= c(N) {:g} N for every input (|h| <= {:g})", *sup, *sup), g),
                            "B5"));
      }
      theta("F", off_diagonal_reaches(g, value));
      break;
    case Estimand::dS:
      if (const auto sup = theory::derivative_sup(g.activation)) {
        out.push_back(
            bound(ProvedBound::Side::upper, 1 - a, true, false,
                  scaled(fmt::format("||dF/dS||_F <= c(N) {:.6g} N for every input (|h'| <= {:.6g})", *sup, *sup), g),
                  "B5"));
      }
      theta("dF/dS", off_diagonal_reaches(g, derivative));
      break;
    case Estimand::dQ:
    case Estimand::dK:
      // The derivatives through qk-layernorm are not the closed forms of fact 7.
      if (g.scores == ScoreModel::projected) theta(g.estimand == Estimand::dQ ? "dF/dQ" : "dF/dK", true);
      break;
    case Estimand::row_sum:
    case Estimand::row_mean: {
      // E[row sum] = c(N) ((N - 1) m_off + m_diag) with m_off = E h(s_12) > 0 (theory::positive_mean). Odd maps
      // (identity, odd x^p) have m_off = m_diag = 0, which their closed form already says.
      if (!theory::positive_mean(g.activation) || !off_diagonal_reaches(g, value)) break;
      const double e = 1 - a - (g.estimand == Estimand::row_mean ? 1 : 0);
      const std::string what = g.estimand == Estimand::row_sum ? "E[row sum]" : "E[row mean]";
      const std::string statement =
          scaled(fmt::format("{} = c(N) ((N - 1) m_off + m_diag){} with m_off = E h(s_12) > 0", what,
                             g.estimand == Estimand::row_mean ? " / N" : ""),
                 g);
      out.push_back(bound(ProvedBound::Side::upper, e, false, false, statement, "B7"));
      out.push_back(bound(ProvedBound::Side::lower, e, false, false, statement, "B7"));
      break;
    }
    default: break;
  }
}

// An expression (docs/THEORY.md "Expression activations"): sup |phi| and sup |phi'| where its intervals prove them
// finite (B5), B6's lower bound where phi (phi') is non-zero on an interval and the scores have a positive
// density on the reals, and for rows normalized from phi >= 0 C1's sqrt(N). Nothing else: the fits decide.
void expression_bounds(const GrowthCase& g, std::vector<ProvedBound>& out) {
  const theory::Activation& act = g.activation;
  const double a = g.n_exponent;
  if (act.normalize_rows) {
    if (g.estimand == Estimand::value && act.expression->value_inf() >= 0) {
      out.push_back(bound(ProvedBound::Side::upper, 0.5 - a, true, false,
                          scaled("||F||_F <= c(N) sqrt(N) for every input (phi >= 0: each row is a probability "
                                 "vector, or zeros)",
                                 g),
                          "B1"));
    }
    return;
  }
  const bool derivative = g.estimand != Estimand::value;
  const std::optional<double> sup = derivative ? theory::derivative_sup(act) : theory::value_sup(act);
  const std::string what = g.estimand == Estimand::value ? "F"
                           : g.estimand == Estimand::dS  ? "dF/dS"
                           : g.estimand == Estimand::dQ  ? "dF/dQ"
                                                         : "dF/dK";
  switch (g.estimand) {
    case Estimand::value:
    case Estimand::dS:
      if (sup) {
        out.push_back(bound(ProvedBound::Side::upper, 1 - a, true, false,
                            scaled(fmt::format("||{}||_F <= c(N) {:.6g} N for every input (|phi{}| <= {:.6g}, by "
                                               "interval arithmetic on the expression)",
                                               what, *sup, derivative ? "'" : "", *sup),
                                   g),
                            "B5"));
      }
      break;
    case Estimand::dQ:
    case Estimand::dK:
      if (sup && g.scores == ScoreModel::projected) {
        out.push_back(bound(ProvedBound::Side::upper, 1 - a, false, false,
                            scaled(fmt::format("E||{}||_F <= C N under the Gaussian model (|phi'| <= {:.6g}: every "
                                               "entry has a finite second moment)",
                                               what, *sup),
                                   g),
                            "B6"));
      }
      break;
    default: return;
  }
  if (g.scores == ScoreModel::projected && act.expression->nonzero_somewhere(derivative)) {
    out.push_back(bound(ProvedBound::Side::lower, 1 - a, false, false,
                        scaled(fmt::format("E||{}||_F >= (N - 1) E|t_12| with E|t_12| > 0, t_ij the entries (phi{} is "
                                           "non-zero on an interval, the score has a positive density): a norm is at "
                                           "least the sum of its N^2 entries' sizes over N",
                                           what, derivative ? "'" : ""),
                               g),
                        "B6"));
  }
}

}  // namespace

GrowthCase growth_case(const PointSpec& point, Estimand estimand) {
  const SweepPoint& pt = point.point;
  GrowthCase g;
  g.activation = pt.map.activation;
  g.estimand = estimand;
  g.n_exponent = pt.map.outer.n_exponent;
  g.scores = pt.scores;
  g.mix = pt.mix;
  g.inner = pt.map.inner;
  g.d = pt.d;
  return g;
}

std::optional<GrowthCase> growth_case(const records::PointRecord& record) {
  GrowthCase g;
  g.activation = record.key.activation;
  g.estimand = record.key.estimand;
  g.scores = record.key.scores;
  try {
    g.n_exponent = parse_outer_scale(record.key.scale).n_exponent;
  } catch (const theory::InputError&) {
    return std::nullopt;
  }
  g.mix = record.key.mix;
  g.inner = record.inner;
  g.d = record.key.d;
  return g;
}

std::vector<ProvedBound> proved_bounds(const GrowthCase& g) {
  std::vector<ProvedBound> out;
  if (g.mix) {
    // Fact 11: at mix alpha = 1 the output and both Jacobians are bounded; below 1 the output and dO/dS are
    // unbounded in V, while dO/dV stays bounded by alpha sqrt(N d_v / 8) + (1 - alpha) sqrt(N d_v).
    const bool full = *g.mix == 1;
    const std::string what = g.estimand == Estimand::dV      ? (full ? std::string("||dO/dV||_F <= sqrt(N d_v / 8)")
                                                                     : fmt::format("||dO/dV||_F <= {} sqrt(N d_v / 8) + {} "
                                                                                        "sqrt(N d_v)",
                                                                                   *g.mix, 1 - *g.mix))
                             : !full                         ? std::string()
                             : g.estimand == Estimand::value ? std::string("||O||_F <= sqrt(N d_v)")
                             : g.estimand == Estimand::dS    ? std::string("||dO/dS||_F <= sqrt(N d_v / 8)")
                                                             : std::string();
    if (!what.empty()) {
      out.push_back(bound(ProvedBound::Side::upper, 0.5, true, false,
                          fmt::format("{} for every input (fact 11{})", what, full ? ", tight" : ""),
                          "C9 (facts 10-11)"));
    }
    return out;
  }
  if (g.estimand == Estimand::score_var) return out;  // a statement about d, decided by its closed form
  if (g.activation.kind == ActivationKind::expression && !g.activation.normalize_rows) {
    const auto law = g.activation.expression->power_law();
    if (law && law->coefficient > 0) {
      // c N^n d^m x^k is x^k with c(N) N^n in front: x^k's proofs, the scale's exponent shifted
      GrowthCase builtin = g;
      builtin.activation = {ActivationKind::pointwise, Pointwise::poly, law->power};
      builtin.n_exponent = g.n_exponent - law->n_exponent;
      for (ProvedBound b : proved_bounds(builtin)) {
        b.statement = fmt::format("phi = {} is x^{} times {:g} N^{:g} d^{:g}: {}", g.activation.expression->text(),
                                  law->power, law->coefficient, law->n_exponent, law->d_exponent, b.statement);
        out.push_back(std::move(b));
      }
      return out;
    }
  }
  switch (g.activation.kind) {
    case ActivationKind::softmax: softmax_bounds(g, out); break;
    case ActivationKind::pointwise: pointwise_bounds(g, out); break;
    case ActivationKind::expression: expression_bounds(g, out); break;
    case ActivationKind::matpow:
      if (g.estimand == Estimand::value && g.scores == ScoreModel::projected) {
        const double e = g.activation.p - g.n_exponent;
        const std::string statement =
            scaled(fmt::format("E||S^{0}||_F / N^{0} -> L_{0} in (0, infinity): S^p = lambda^p X B X^T with "
                               "X^T X / N -> sigma_x^2 I",
                               g.activation.p),
                   g);
        out.push_back(bound(ProvedBound::Side::upper, e, false, false, statement, "B8"));
        out.push_back(bound(ProvedBound::Side::lower, e, false, false, statement, "B8"));
      }
      break;
  }
  return out;
}

bool proof_decides(const PointSpec& point, Estimand estimand) {
  const std::optional<double> claimed = point.series ? point.series->claimed_for(estimand) : std::nullopt;
  if (!claimed || point.series->claims_variance_equals_d || point.series->fit_over_d) return false;
  std::vector<ProvedBound> bounds = proved_bounds(growth_case(point, estimand));
  if (const std::optional<ExactLaw> law = exact_law(point, estimand)) {
    const std::vector<ProvedBound> implied = bounds_of_law(*law);
    bounds.insert(bounds.end(), implied.begin(), implied.end());
  }
  return decide_by_proof(bounds, *claimed).has_value();
}

SampleBounds sample_bounds(const PointSpec& point, Estimand estimand) {
  const SweepPoint& pt = point.point;
  SampleBounds bounds;
  if (pt.mix) {
    const theory::CrossNormBounds cross = theory::cross_norm_bounds(pt.N, pt.dv);
    const double alpha = *pt.mix;
    if (estimand == Estimand::dV) bounds.upper = alpha * cross.grad_values + (1 - alpha) * cross.output;
    if (alpha != 1) return bounds;
    if (estimand == Estimand::value) bounds.upper = cross.output;
    if (estimand == Estimand::dS) bounds.upper = cross.grad_scores;
    return bounds;
  }
  const double c = pt.map.outer.at(pt.N);
  const double n = static_cast<double>(pt.N);
  const theory::Activation& act = pt.map.activation;
  if (act.kind == ActivationKind::softmax) {
    if (estimand == Estimand::value) {
      bounds.upper = c * std::sqrt(n);
      bounds.lower = c;
    } else if (estimand == Estimand::dS) {
      bounds.upper = c * std::sqrt(n) / 2;
    }
  } else if (act.kind == ActivationKind::expression && act.normalize_rows) {
    if (estimand == Estimand::value && act.expression->value_inf() >= 0) bounds.upper = std::abs(c) * std::sqrt(n);
  } else if (act.kind == ActivationKind::pointwise || act.kind == ActivationKind::expression) {
    const auto sup = estimand == Estimand::value ? theory::value_sup(act)
                     : estimand == Estimand::dS  ? theory::derivative_sup(act)
                                                 : std::nullopt;
    if (sup) bounds.upper = std::abs(c) * *sup * n;
  }
  return bounds;
}

}  // namespace attncheck::monte_carlo
