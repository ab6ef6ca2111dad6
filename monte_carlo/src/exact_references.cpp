#include "attncheck/monte_carlo/exact_references.hpp"

#include "attncheck/theory/cross_norm.hpp"
#include "attncheck/theory/moments.hpp"
#include "attncheck/theory/vocabulary.hpp"

#include <fmt/format.h>

#include <cmath>

namespace attncheck::monte_carlo {

using theory::ActivationKind;
using theory::Index;
using theory::Pointwise;

namespace {

theory::GaussianModel model_of(const SweepPoint& pt) { return {pt.D, pt.d, pt.sigma_x, pt.sigma_t, pt.map.inner}; }

// The off-diagonal and diagonal expectations of one entry; for the matrix power they exist at p = 1 only,
// where it is the identity; for an expression, where it is a polynomial in x at this N and d.
std::pair<theory::EntryExpectations, theory::EntryExpectations> entry_pair(const SweepPoint& pt) {
  theory::Activation a = pt.map.activation;
  if (a.kind == ActivationKind::matpow && a.p == 1) a = {ActivationKind::pointwise, Pointwise::identity, 1};
  const theory::GaussianModel model = model_of(pt);
  if (a.kind == ActivationKind::expression && !a.normalize_rows) {
    const auto coefficients = a.expression->polynomial(static_cast<double>(pt.N), static_cast<double>(pt.d));
    if (!coefficients) return {};
    return {theory::polynomial_entry_expectations(*coefficients, model, pt.scores, false),
            theory::polynomial_entry_expectations(*coefficients, model, pt.scores, true)};
  }
  return {theory::entry_expectations(a, model, pt.scores, false),
          theory::entry_expectations(a, model, pt.scores, true)};
}

std::optional<double> both(const std::optional<double>& off, const std::optional<double>& diag,
                           const std::function<double(double, double)>& combine) {
  if (!off || !diag) return std::nullopt;
  return combine(*off, *diag);
}

}  // namespace

std::optional<theory::AttentionMap> builtin_form(const theory::AttentionMap& map, theory::Index d) {
  const theory::Activation& act = map.activation;
  if (act.kind != ActivationKind::expression || act.normalize_rows) return std::nullopt;
  const std::optional<theory::PhiExpression::PowerLaw> law = act.expression->power_law();
  if (!law || !(law->coefficient > 0)) return std::nullopt;
  theory::AttentionMap builtin = map;
  builtin.activation = {ActivationKind::pointwise, Pointwise::poly, law->power};
  builtin.outer.factor *= law->coefficient * std::pow(static_cast<double>(d), law->d_exponent);
  builtin.outer.n_exponent -= law->n_exponent;
  return builtin;
}

namespace {

// The point with an expression replaced by its built-in form, where it has one.
std::optional<PointSpec> as_builtin(const PointSpec& ps) {
  const std::optional<theory::AttentionMap> builtin = builtin_form(ps.point.map, ps.point.d);
  if (!builtin) return std::nullopt;
  PointSpec copy = ps;
  copy.point.map = *builtin;
  return copy;
}

}  // namespace

ExactMoments exact_moments(const PointSpec& ps, Estimand estimand) {
  if (const auto builtin = as_builtin(ps)) return exact_moments(*builtin, estimand);
  const SweepPoint& pt = ps.point;
  ExactMoments out;
  if (pt.mix || estimand == Estimand::dV) return out;
  const double c = pt.map.outer.at(pt.N);
  const double n = static_cast<double>(pt.N);
  const bool softmax = pt.map.activation.kind == ActivationKind::softmax;
  if (estimand == Estimand::score_var) {
    out.second = theory::score_variance(pt.scores, model_of(pt));
  } else if (softmax && (estimand == Estimand::row_sum || estimand == Estimand::row_mean)) {
    out.mean = estimand == Estimand::row_sum ? c : c / n;  // every row of probabilities sums to 1
  } else {
    const auto [off, diag] = entry_pair(pt);
    const auto sum = [&](double o, double g) { return theory::entry_sum(pt.N, o, g); };
    const auto second = [&](const std::optional<double>& o, const std::optional<double>& g,
                            const std::optional<double>& o4, const std::optional<double>& g4) {
      out.second = both(o, g, sum);
      if (out.second) *out.second *= c * c;
      const auto fourth = both(o4, g4, sum);
      if (out.second && fourth)
        out.second_variance_floor = std::max(0.0, c * c * c * c * *fourth - *out.second * *out.second);
    };
    switch (estimand) {
      case Estimand::value: second(off.value_sq, diag.value_sq, off.value_4, diag.value_4); break;
      case Estimand::dS: second(off.deriv_sq, diag.deriv_sq, off.deriv_4, diag.deriv_4); break;
      case Estimand::dQ:
      case Estimand::dK: second(off.q_weight, diag.q_weight, off.q_weight_sq, diag.q_weight_sq); break;
      case Estimand::row_sum:
      case Estimand::row_mean:
        // One row holds N - 1 off-diagonal entries and its diagonal one.
        out.mean = both(off.value, diag.value, [&](double o, double g) { return c * ((n - 1) * o + g); });
        if (out.mean && estimand == Estimand::row_mean) *out.mean /= n;
        break;
      case Estimand::score_var:
      case Estimand::dV: break;
    }
  }
  for (std::optional<double>* x : {&out.mean, &out.second, &out.second_variance_floor}) {
    if (*x && !std::isfinite(**x)) {
      out.out_of_range = true;
      x->reset();
    }
  }
  if (!out.second) out.second_variance_floor.reset();
  return out;
}

std::optional<double> exact_norm_sq(const PointSpec& ps, Estimand estimand) {
  return exact_moments(ps, estimand).second;
}

std::optional<ExactLaw> exact_law(const PointSpec& ps, Estimand estimand) {
  if (const auto builtin = as_builtin(ps)) return exact_law(*builtin, estimand);
  const SweepPoint& pt = ps.point;
  if (pt.mix) return std::nullopt;            // C9 has bounds (proved_bounds.hpp), no closed form
  const double factor = pt.map.outer.factor;  // c(N) = factor N^-n_exponent
  const double n_exponent = pt.map.outer.n_exponent;
  ExactLaw law;
  if (estimand == Estimand::score_var) {
    const double var = theory::score_variance(pt.scores, model_of(pt));
    if (!std::isfinite(var) || pt.scores == theory::ScoreModel::projected_layernorm) return std::nullopt;
    law.of = "Var(s)";
    law.bound = false;
    // Var(s) = lambda^2 K d for the projected and pair models (K free of d): in d, lambda = 1/sqrt(d) cancels d.
    if (ps.series && ps.series->fit_over_d) {
      law.exponent = ps.series->inner.inverse_sqrt_d ? 0.0 : 1.0;
      law.constant = var / std::pow(static_cast<double>(pt.d), *law.exponent);
    } else {
      law.exponent = 0.0;
      law.constant = var;
    }
    return law;
  }
  if (pt.map.activation.kind == ActivationKind::softmax) {
    if (estimand != Estimand::row_sum && estimand != Estimand::row_mean) return std::nullopt;
    law.of = estimand == Estimand::row_sum ? "E[row sum]" : "E[row mean]";
    law.bound = false;
    law.exponent = -n_exponent - (estimand == Estimand::row_mean ? 1 : 0);
    law.constant = factor;
    return law;
  }
  // A law in N from one point's entries needs them free of N: a polynomial such as x N + x^2 has the exact moments
  // of its point, not their growth (c N^n x^k, the one exception, went to its built-in form above).
  if (pt.map.activation.kind == ActivationKind::expression && pt.map.activation.expression->uses_length()) {
    return std::nullopt;
  }
  const auto [off, diag] = entry_pair(pt);
  if (estimand == Estimand::row_sum || estimand == Estimand::row_mean) {
    if (!off.value || !diag.value) return std::nullopt;
    law.of = estimand == Estimand::row_sum ? "E[row sum]" : "E[row mean]";
    law.bound = false;
    const double shift = estimand == Estimand::row_mean ? -1 : 0;
    // E[row sum] = c(N) ((N - 1) off + diag).
    if (*off.value != 0) {
      law.exponent = 1 - n_exponent + shift;
      law.constant = factor * *off.value;
    } else if (*diag.value != 0) {
      law.exponent = -n_exponent + shift;
      law.constant = factor * *diag.value;
    }
    return law;
  }
  std::optional<double> o, g;
  switch (estimand) {
    case Estimand::value: o = off.value_sq, g = diag.value_sq; break;
    case Estimand::dS: o = off.deriv_sq, g = diag.deriv_sq; break;
    case Estimand::dQ:
    case Estimand::dK: o = off.q_weight, g = diag.q_weight; break;
    default: break;
  }
  if (!o || !g || !std::isfinite(*o) || !std::isfinite(*g)) return std::nullopt;
  law.of = "sqrt(E||F||^2)";
  law.bound = true;
  // sqrt(c(N)^2 (N(N-1) off + N diag)): N^(1 - n_exponent) when off > 0, else N^(1/2 - n_exponent).
  const double scale = std::abs(factor);
  if (*o > 0) {
    law.exponent = 1 - n_exponent;
    law.constant = scale * std::sqrt(*o);
  } else if (*g > 0) {
    law.exponent = 0.5 - n_exponent;
    law.constant = scale * std::sqrt(*g);
  }
  return law;
}

}  // namespace attncheck::monte_carlo
