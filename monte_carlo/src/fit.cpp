#include "attncheck/monte_carlo/fit.hpp"

#include "attncheck/monte_carlo/statistics.hpp"
#include "attncheck/theory/bound_check.hpp"

#include <boost/math/distributions/normal.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace attncheck::monte_carlo {

std::optional<LogLogFit> fit_log_log(const std::vector<double>& x, const std::vector<double>& y,
                                     const std::vector<double>& se) {
  std::vector<double> lx, ly, w;
  for (std::size_t k = 0; k < x.size() && k < y.size() && k < se.size(); ++k) {
    if (!(x[k] > 0) || !(y[k] > 0) || !(se[k] > 0) || !std::isfinite(se[k])) continue;
    lx.push_back(std::log(x[k]));
    ly.push_back(std::log(y[k]));
    const double rel = se[k] / y[k];
    w.push_back(1 / (rel * rel));
  }
  const std::size_t n = lx.size();
  if (n < 2) return std::nullopt;
  double sw = 0, swx = 0, swy = 0;
  for (std::size_t k = 0; k < n; ++k) {
    sw += w[k];
    swx += w[k] * lx[k];
    swy += w[k] * ly[k];
  }
  const double mx = swx / sw, my = swy / sw;
  double sxx = 0, sxy = 0;
  for (std::size_t k = 0; k < n; ++k) {
    sxx += w[k] * (lx[k] - mx) * (lx[k] - mx);
    sxy += w[k] * (lx[k] - mx) * (ly[k] - my);
  }
  if (!(sxx > 0)) return std::nullopt;  // every point at the same x
  LogLogFit fit;
  fit.points = static_cast<int>(n);
  fit.slope = sxy / sxx;
  fit.intercept = my - fit.slope * mx;
  double chi_sq = 0;
  for (std::size_t k = 0; k < n; ++k) {
    const double r = ly[k] - fit.intercept - fit.slope * lx[k];
    chi_sq += w[k] * r * r;
  }
  const double dof = static_cast<double>(n) - 2;
  fit.reduced_chi_sq = dof > 0 ? chi_sq / dof : 0;
  fit.slope_se = std::sqrt(std::max(1.0, fit.reduced_chi_sq) / sxx);
  const double t = student_t_quantile(dof, 0.95);
  fit.slope_ci_lo = fit.slope - t * fit.slope_se;
  fit.slope_ci_hi = fit.slope + t * fit.slope_se;
  return fit;
}

namespace {

bool usable_point(double x, double y, double se) {
  return x > 0 && y > 0 && se > 0 && std::isfinite(y) && std::isfinite(se);
}

// Slope of log y on log x over `members` weighted by (y/se)^2 and its SE from those weights alone: the window is
// short, and its curvature is what the systematic error measures.
std::pair<double, double> weighted_slope(const std::vector<double>& x, const std::vector<double>& y,
                                         const std::vector<double>& se, const std::vector<std::size_t>& members) {
  double sw = 0, swx = 0, swy = 0;
  for (std::size_t k : members) {
    const double w = (y[k] / se[k]) * (y[k] / se[k]);
    sw += w;
    swx += w * std::log(x[k]);
    swy += w * std::log(y[k]);
  }
  const double mx = swx / sw, my = swy / sw;
  double sxx = 0, sxy = 0;
  for (std::size_t k : members) {
    const double w = (y[k] / se[k]) * (y[k] / se[k]);
    sxx += w * (std::log(x[k]) - mx) * (std::log(x[k]) - mx);
    sxy += w * (std::log(x[k]) - mx) * (std::log(y[k]) - my);
  }
  return {sxy / sxx, std::sqrt(1 / sxx)};
}

// The usable points with x in [x_last / 4, x_last], up to the usable point `last` (an index into `usable`).
std::vector<std::size_t> window_ending(const std::vector<double>& x, const std::vector<std::size_t>& usable,
                                       std::size_t last) {
  std::vector<std::size_t> members;
  for (std::size_t k = 0; k <= last; ++k) {
    if (x[usable[k]] >= x[usable[last]] / 4) members.push_back(usable[k]);
  }
  return members;
}

std::string fixed3(double v) { return fmt::format("{:.3f}", v); }

std::string x_list(const std::vector<double>& xs) {
  std::string text;
  for (double x : xs) text += (text.empty() ? "" : ", ") + fmt::format("{:g}", x);
  return text;
}

std::string window_trend(const LocalExponent& e, const std::string& x_name) {
  if (e.windows.size() < 2) return "";
  std::string text;
  for (const WindowExponent& w : e.windows) {
    text += fmt::format("{}{} {:g}..{:g}: {}", text.empty() ? "" : ", ", x_name, w.first, w.last, fixed3(w.exponent));
  }
  return text;
}

std::string describe(const LocalExponent& e, const std::string& what, const std::string& x_name) {
  if (!e.missing.empty()) return fmt::format("{}: {}", what, e.missing);
  std::string text =
      fmt::format("{} {} over {} = {:g}..{:g}, sampling +-{} (95%), systematic +-{}", what, fixed3(e.exponent), x_name,
                  e.window.front(), e.window.back(), fixed3(kZ95 * e.se), fixed3(e.systematic));
  text += fmt::format(" (trend {} from the window before{}{}{})", fixed3(e.trend),
                      e.climb ? fmt::format(", climbing {} +- {} per doubling over every window", fixed3(*e.climb),
                                            fixed3(*e.climb_se))
                              : std::string(),
                      e.disagreement > 0 ? fmt::format(", disagreement with the cross-check {}", fixed3(e.disagreement))
                                         : std::string(),
                      e.rising ? ": STILL RISING" : "");
  text += fmt::format(": [{}, {}]", fixed3(e.lo), fixed3(e.hi));
  const std::string trend = window_trend(e, x_name);
  if (!trend.empty()) text += "; every window: " + trend;
  if (!e.unreliable.empty()) {
    text += fmt::format(
        "; the standard error is not reliable at {} = {} (too few samples to judge it, or a few "
        "samples carrying the variance)",
        x_name, x_list(e.unreliable));
  }
  return text;
}

std::string bound_text(const records::ProvedBound& b) { return fmt::format("{} ({})", b.statement, b.proof); }

std::string exponent_text(const std::optional<double>& e) { return e ? fmt::format("{:g}", *e) : "-infinity"; }

// Whether an upper bound of exponent e (e absent: the quantity is 0) settles a claim of exponent a: e < a, or
// e = a when no sub-polynomial factor rides on it.
bool upper_settles(const records::ProvedBound& b, double a) {
  if (!b.exponent) return true;
  return b.subpolynomial ? *b.exponent < a - 1e-9 : *b.exponent <= a + 1e-9;
}

bool lower_violates(const records::ProvedBound& b, double a) { return b.exponent && *b.exponent > a + 1e-9; }

bool lower_reaches(const records::ProvedBound& b, double a) { return b.exponent && std::abs(*b.exponent - a) <= 1e-9; }

}  // namespace

double family_alarm_abs_z(int judged, double level) {
  const double m = std::max(judged, 1);
  return boost::math::quantile(boost::math::complement(boost::math::normal_distribution<>{}, level / (2 * m)));
}

std::vector<records::ProvedBound> bounds_of_law(const ExactLaw& law, const std::string& x_name) {
  using Side = records::ProvedBound::Side;
  const std::string proof = "its closed form (docs/THEORY.md, \"Exact facts\")";
  if (law.deterministic) {
    return {{Side::upper, law.exponent, true, false, law.of + " for every input", proof}};
  }
  if (law.bound) {
    return {
        {Side::upper, law.exponent, false, false,
         fmt::format("E||F|| <= {} ~ {:.6g} {}^{} (Jensen)", law.of, law.constant, x_name, exponent_text(law.exponent)),
         proof}};
  }
  const std::string statement =
      law.exponent ? fmt::format("{} ~ {:.6g} {}^{}, exactly", law.of, law.constant, x_name, *law.exponent)
                   : fmt::format("{} = 0 for every {}", law.of, x_name);
  std::vector<records::ProvedBound> out{{Side::upper, law.exponent, false, false, statement, proof}};
  if (law.exponent) out.push_back({Side::lower, law.exponent, false, false, statement, proof});
  return out;
}

std::optional<ProofDecision> decide_by_proof(const std::vector<records::ProvedBound>& bounds, double a) {
  using Side = records::ProvedBound::Side;
  std::optional<records::ProvedBound> reaching_lower;
  for (const records::ProvedBound& b : bounds) {
    if (b.side == Side::lower && lower_reaches(b, a) && (!reaching_lower || b.deterministic)) reaching_lower = b;
  }
  // Deterministic bounds first (basis `bound`), then bounds on the expectation (basis `exact`); within each, an
  // upper bound that settles the claim, then a lower bound that violates it.
  for (const bool deterministic : {true, false}) {
    for (const records::ProvedBound& b : bounds) {
      if (b.deterministic != deterministic || b.side != Side::upper || !upper_settles(b, a)) continue;
      const bool tight = b.exponent && std::abs(*b.exponent - a) <= 1e-9 && reaching_lower;
      const VerdictRule& rule = deterministic ? (tight ? rules::bound_tight : rules::bound_holds)
                                              : (tight ? rules::exact_tight : rules::exact_holds);
      return ProofDecision{&rule, b, tight ? reaching_lower : std::nullopt};
    }
    for (const records::ProvedBound& b : bounds) {
      if (b.deterministic != deterministic || b.side != Side::lower || !lower_violates(b, a)) continue;
      return ProofDecision{deterministic ? &rules::bound_violated : &rules::exact_violated, b, std::nullopt};
    }
  }
  return std::nullopt;
}

void LocalExponent::widen(double by_disagreement) {
  disagreement = by_disagreement;
  systematic = std::max(trend, disagreement);
  const double half = kZ95 * se + systematic;
  lo = exponent - half;
  hi = exponent + half;
}

LocalExponent local_exponent(const std::vector<double>& x, const std::vector<double>& y, const std::vector<double>& se,
                             const std::vector<bool>& reliable) {
  LocalExponent e;
  std::vector<std::size_t> usable;
  for (std::size_t k = 0; k < x.size() && k < y.size() && k < se.size(); ++k) {
    if (usable_point(x[k], y[k], se[k])) usable.push_back(k);
  }
  if (usable.size() < 2) {
    e.missing = "fewer than two points with a positive estimate and standard error";
    return e;
  }
  for (std::size_t last = 1; last < usable.size(); ++last) {
    const auto members = window_ending(x, usable, last);
    if (members.size() < 2) continue;
    const auto [slope, slope_se] = weighted_slope(x, y, se, members);
    e.windows.push_back({x[members.front()], x[members.back()], slope, slope_se});
  }
  const std::size_t last = usable.size() - 1;
  const auto window = window_ending(x, usable, last);
  for (std::size_t k : window) e.window.push_back(x[k]);
  if (window.size() < 2) {
    e.missing = fmt::format("one point in the last two doublings [{:g}, {:g}]", x[usable[last]] / 4, x[usable[last]]);
    return e;
  }
  std::tie(e.exponent, e.se) = weighted_slope(x, y, se, window);
  for (std::size_t k : window) {
    if (k >= reliable.size() || !reliable[k]) e.unreliable.push_back(x[k]);
  }
  // The previous window ends where this one starts, so that the two share one point and their noise barely
  // correlates: the two doublings below x_max / 4.
  const std::size_t start =
      static_cast<std::size_t>(std::find(usable.begin(), usable.end(), window.front()) - usable.begin());
  const auto before = window_ending(x, usable, start);
  if (before.size() < 2) {
    e.missing = fmt::format("no second window [{:g}, {:g}] to see whether the local exponent still moves",
                            x[window.front()] / 4, x[window.front()]);
    return e;
  }
  const auto [previous, previous_se] = weighted_slope(x, y, se, before);
  e.previous = previous;
  e.previous_se = previous_se;
  e.trend = std::abs(e.exponent - *e.previous);
  e.rising = e.exponent - *e.previous > kZ95 * std::hypot(e.se, e.previous_se);
  if (e.windows.size() >= 3) {
    // Overlapping windows share points, so this SE is if anything too small: a climb is called too readily,
    // which costs a `consistent` verdict, never a wrong one.
    double sw = 0, swx = 0, swy = 0;
    for (const WindowExponent& w : e.windows) {
      const double weight = 1 / (w.se * w.se);
      sw += weight, swx += weight * std::log2(w.last), swy += weight * w.exponent;
    }
    double sxx = 0, sxy = 0;
    for (const WindowExponent& w : e.windows) {
      const double weight = 1 / (w.se * w.se), dx = std::log2(w.last) - swx / sw;
      sxx += weight * dx * dx, sxy += weight * dx * (w.exponent - swy / sw);
    }
    if (sxx > 0) {
      e.climb = sxy / sxx;
      e.climb_se = std::sqrt(1 / sxx);
      e.rising = e.rising || *e.climb > kZ95 * *e.climb_se;
    }
  }
  e.widen(0);
  return e;
}

std::optional<ViolationTest> violation_test(const std::vector<EvidencePoint>& points, double boundary, double level) {
  const EvidencePoint* large = nullptr;
  // A bound at a lower level than the test's own share (a foreign or damaged record) would lower the test's level.
  for (const EvidencePoint& p : points) {
    if (p.lower_bound && p.lower_bound_level && *p.lower_bound_level >= kMeanLowerBoundLevel &&
        std::isfinite(*p.lower_bound) && (!large || p.x > large->x)) {
      large = &p;
    }
  }
  if (!large) return std::nullopt;
  // Half of the error goes to the lower bound at x_large (its own level), the rest to the upper bounds at the
  // smaller x, shared out by Bonferroni; an exact upper bound costs none.
  const double lower_error = 1 - *large->lower_bound_level;
  const double upper_error = std::max(0.0, (1 - level) - lower_error);
  std::vector<const EvidencePoint*> statistical;
  std::vector<std::pair<const EvidencePoint*, bool>> candidates;
  for (const EvidencePoint& p : points) {
    if (!(p.x <= large->x / 2 && p.x >= large->x / 16)) continue;
    if (p.exact_upper && *p.exact_upper > 0) {
      candidates.push_back({&p, true});
    } else if (p.mean_reliable && std::isfinite(p.mean) && std::isfinite(p.se) && p.mean > 0 && upper_error > 0) {
      candidates.push_back({&p, false});
      statistical.push_back(&p);
    }
  }
  if (candidates.empty()) return std::nullopt;
  const double z =
      statistical.empty()
          ? 0
          : boost::math::quantile(boost::math::complement(boost::math::normal_distribution<>{},
                                                          upper_error / static_cast<double>(statistical.size())));
  std::optional<ViolationTest> best;
  for (const auto& [p, exact] : candidates) {
    ViolationTest t;
    t.x_small = p->x;
    t.x_large = large->x;
    t.upper_exact = exact;
    t.upper_at_small = exact ? *p->exact_upper : p->mean + z * p->se;
    t.lower_at_large = *large->lower_bound;
    t.exponent_lower = t.lower_at_large > 0
                           ? std::log(t.lower_at_large / t.upper_at_small) / std::log(t.x_large / t.x_small)
                           : -std::numeric_limits<double>::infinity();
    t.level = 1 - lower_error - (statistical.empty() ? 0 : upper_error);
    t.passed = t.exponent_lower > boundary;
    if (!best || t.exponent_lower > best->exponent_lower) best = t;
  }
  return best;
}

namespace {

// The Monte Carlo confirmation of a closed form: |z| at the points whose standard error is reliable, against
// the family-wise alarm.
void confirm_exact(const std::vector<EvidencePoint>& points, const SeriesClaim& claim, Verdict& v) {
  int judged = 0;
  for (const EvidencePoint& p : points) judged += p.z_exact && p.z_judged ? 1 : 0;
  v.alarm_abs_z = claim.alarm_abs_z.value_or(family_alarm_abs_z(judged));
  for (const EvidencePoint& p : points) {
    if (!p.z_exact) continue;
    if (!p.z_judged) {
      ++v.exact_unjudged;
      continue;
    }
    ++v.exact_judged;
    v.exact_max_abs_z = std::max(v.exact_max_abs_z.value_or(0.0), std::abs(*p.z_exact));
    if (std::abs(*p.z_exact) > v.alarm_abs_z) v.exact_disagrees_at.push_back(p.x);
  }
}

// Every sample against the deterministic bounds it obeys. Rounding of the per-sample sums only: a bound is sharp,
// so anything beyond is a wrong computation.
void check_sample_bounds(const std::vector<EvidencePoint>& points, Verdict& v) {
  for (const EvidencePoint& p : points) {
    const bool upper = p.sample_max && p.sample_bound, lower = p.sample_min && p.sample_lower_bound;
    if (!upper && !lower) continue;
    ++v.bound_checked;
    bool beyond = false;
    if (upper) {
      // A NaN ratio must show, not vanish inside max.
      const double ratio = *p.sample_max / *p.sample_bound;
      v.max_sample_over_bound = std::isnan(ratio) ? ratio : std::max(v.max_sample_over_bound.value_or(0.0), ratio);
      if (!theory::within(*p.sample_max, *p.sample_bound)) {
        v.bound_exceeded_at.push_back(p.x);
        beyond = true;
      }
    }
    if (lower) {
      const double ratio = *p.sample_min / *p.sample_lower_bound;
      v.min_sample_over_lower_bound =
          std::isnan(ratio) ? ratio : std::min(v.min_sample_over_lower_bound.value_or(INFINITY), ratio);
      if (!theory::above(*p.sample_min, *p.sample_lower_bound)) {
        v.lower_bound_undercut_at.push_back(p.x);
        beyond = true;
      }
    }
    if (beyond) v.exact_disagrees_at.push_back(p.x);
  }
}

// The local exponents of the fitted quantity and, for a norm's mean, of sqrt(mean of ||F||^2), whose
// disagreement widens the first (Jensen's gap still closing).
void fit_local_exponents(const std::vector<EvidencePoint>& points, const SeriesClaim& claim, Verdict& v) {
  std::vector<double> x, mean, se, root, root_se;
  std::vector<bool> mean_ok, sq_ok;
  for (const EvidencePoint& p : points) {
    x.push_back(p.x);
    mean.push_back(p.mean);
    se.push_back(p.se);
    mean_ok.push_back(p.mean_reliable);
    root.push_back(p.root_mean_sq);
    root_se.push_back(p.root_mean_sq_se);
    sq_ok.push_back(p.sq_reliable);
  }
  v.primary = local_exponent(x, mean, se, mean_ok);
  if (claim.cross_check) {
    v.cross_check = local_exponent(x, root, root_se, sq_ok);
    if (v.primary.missing.empty() && v.cross_check.missing.empty()) {
      v.primary.widen(std::abs(v.primary.exponent - v.cross_check.exponent));
    }
  } else {
    v.cross_check.missing = "not needed: the fitted quantity is an expectation itself, with no Jensen bias";
  }
}

Verdict decided(Verdict v, const VerdictRule& rule, std::string reason) {
  v.word = rule.word;
  v.basis = rule.basis;
  v.rule = &rule;
  v.reason = std::move(reason);
  return v;
}

// A claimed value (C8): the closed form against it at every point.
Verdict decide_equality(const std::vector<EvidencePoint>& points, const std::string& xn, Verdict v) {
  std::string differs;
  bool any = false;
  for (const EvidencePoint& p : points) {
    if (!p.exact_value || !p.claimed_value) continue;
    any = true;
    if (std::abs(*p.exact_value - *p.claimed_value) > 1e-12 * std::abs(*p.claimed_value)) {
      differs += fmt::format("{}{} = {:g}: exact {:.6g}, claimed {:.6g}, measured {:.6g} +- {:.2g}",
                             differs.empty() ? "" : "; ", xn, p.x, *p.exact_value, *p.claimed_value, p.mean, p.se);
    }
  }
  if (!any) {
    v.word = records::Verdict::inconclusive;
    v.basis = records::Basis::exact;
    v.reason = "no exact value to compare with the claimed one";
    return v;
  }
  if (!differs.empty()) return decided(std::move(v), rules::equality_violated, differs);
  const EvidencePoint& last = points.back();
  return decided(std::move(v), rules::equality_holds,
                 fmt::format("the exact value equals the claimed value at every point (at {} = {:g}: {:.6g}, measured "
                             "{:.6g} +- {:.2g})",
                             xn, last.x, last.claimed_value.value_or(NAN), last.mean, last.se));
}

// The proof that decides the claimed exponent a, as the verdict's reason (with the samples' check against it when
// it holds for every sample).
std::string proof_reason(const ProofDecision& proof, double a, const Verdict& v, const std::string& xn) {
  const records::ProvedBound& b = proof.decided_by;
  const bool upper = b.side == records::ProvedBound::Side::upper;
  const std::string relation = !upper                                            ? "is above"
                               : b.exponent && std::abs(*b.exponent - a) <= 1e-9 ? "equals"
                                                                                 : "is below";
  std::string checked;
  if (b.deterministic && v.bound_checked > 0) {
    const bool ok = v.bound_exceeded_at.empty() && v.lower_bound_undercut_at.empty();
    checked = fmt::format("; every sample checked against the bound at {} points{}", v.bound_checked,
                          ok ? std::string()
                             : fmt::format(" (BEYOND it at {} = {}: a failure of the tool, not of the claim)", xn,
                                           x_list(v.exact_disagrees_at)));
  }
  return fmt::format("{}: e = {} {} a = {:g}{}{}", bound_text(b), exponent_text(b.exponent), relation, a,
                     !proof.reaching_lower ? std::string()
                     : proof.reaching_lower->statement == b.statement
                         ? std::string(", and it bounds it from below too")
                         : fmt::format(", and {} reaches the exponent a", bound_text(*proof.reaching_lower)),
                     checked);
}

// What finite data say when no proof decides: the proofs that did not, the local exponents, and the
// heavy-tail-valid test.
std::string fit_evidence(const std::vector<records::ProvedBound>& undeciding, const Verdict& v,
                         const SeriesClaim& claim, double a, double boundary) {
  const std::string& xn = claim.x_name;
  std::string proof_note;
  for (const records::ProvedBound& b : undeciding) {
    proof_note += fmt::format("{}{} bound {} (exponent {}{}) does not decide a = {:g}", proof_note.empty() ? "" : "; ",
                              to_string(b.side), bound_text(b), exponent_text(b.exponent),
                              b.subpolynomial ? " up to a sub-polynomial factor" : "", a);
  }
  if (!proof_note.empty()) proof_note += ". ";
  const std::string primary_text = describe(v.primary, "local exponent", xn);
  const std::string cross_text =
      claim.cross_check ? "; cross-check: " + describe(v.cross_check, "local exponent of sqrt(mean of ||F||^2)", xn)
                        : "";
  std::string test_text;
  if (v.violation) {
    const ViolationTest& t = *v.violation;
    test_text = fmt::format(
        "; heavy-tail-valid test: the mean >= {:.6g} at {} = {:g} (order statistics) and <= {:.6g} at {} = {:g} ({}), "
        "so its growth exponent over {:g}..{:g} is at least {} at {:.3g} confidence, {} a + tolerance = {:g}",
        t.lower_at_large, xn, t.x_large, t.upper_at_small, xn, t.x_small,
        t.upper_exact ? "closed form" : "estimate + z SE", t.x_small, t.x_large, fixed3(t.exponent_lower), t.level,
        t.passed ? "above" : "not above", boundary);
  }
  return proof_note + primary_text + cross_text + test_text;
}

// The asymptotic fit's verdict: violated only when the heavy-tail-valid test and the local exponent both show
// growth beyond a + tolerance; consistent when the exponent's interval lies below it and no longer rises;
// otherwise inconclusive, saying what would settle it.
Verdict decide_by_fit(const std::vector<EvidencePoint>& points, const std::vector<records::ProvedBound>& undeciding,
                      const SeriesClaim& claim, Verdict v) {
  const std::string& xn = claim.x_name;
  const double a = *claim.exponent, boundary = a + claim.tolerance;
  v.violation = violation_test(points, boundary);
  const std::string evidence = fit_evidence(undeciding, v, claim, a, boundary);
  const double largest_x =
      points.empty()
          ? 0.0
          : std::max_element(points.begin(), points.end(), [](const EvidencePoint& p, const EvidencePoint& q) {
              return p.x < q.x;
            })->x;
  const double next_x = (v.primary.window.empty() ? largest_x : v.primary.window.back()) * 4;
  // A mean that grows fast over the range only while its growth slows (a Jensen ratio still climbing, a correction
  // converging from below) settles nothing: the local exponent's interval, widened by how much it still moves,
  // must lie above a + tolerance too.
  if (v.violation && v.violation->passed) {
    if (v.primary.missing.empty() && v.primary.lo > boundary)
      return decided(std::move(v), rules::fit_violated, evidence);
    v.extend_to = next_x;
    v.to_settle = fmt::format("extend {} to {:g} and see whether the local exponent settles", xn, next_x);
    return decided(std::move(v), rules::fit_inconclusive,
                   evidence + fmt::format(": the mean grew faster than {}^(a + tolerance) over this range, but the "
                                          "local exponent's interval, widened by how much it still moves, reaches "
                                          "a + tolerance = {:g}; extend {} to {:g} and see whether it settles",
                                          xn, boundary, xn, next_x));
  }

  const LocalExponent& e = v.primary;
  const LocalExponent& c = v.cross_check;
  const auto inconclusive = [&](const std::string& why, bool more_n) {
    if (more_n && next_x > 0) v.extend_to = next_x;
    v.to_settle = why;
    return decided(v, rules::fit_inconclusive, evidence + ": " + why);
  };
  if (!e.missing.empty()) {
    return inconclusive(fmt::format("extend {} to {:g} or beyond", xn, next_x), true);
  }
  if (!e.unreliable.empty() || (claim.cross_check && !c.unreliable.empty())) {
    std::vector<double> at = e.unreliable;
    for (double u : claim.cross_check ? c.unreliable : std::vector<double>{}) {
      if (std::find(at.begin(), at.end(), u) == at.end()) at.push_back(u);
    }
    std::sort(at.begin(), at.end());
    return inconclusive(fmt::format("more samples at {} = {} would settle it, unless their tails are too heavy", xn,
                                    x_list(at)),
                        false);
  }
  if (claim.cross_check && !c.missing.empty())
    return inconclusive("the cross-check has no interval: " + c.missing, true);
  if (e.rising || (claim.cross_check && c.rising)) {
    return inconclusive(fmt::format("the local exponent is still rising, so the data up to {} = {:g} settle "
                                    "nothing; extend {} to {:g} and see whether it stops",
                                    xn, e.window.back(), xn, next_x),
                        true);
  }
  if (e.hi <= boundary) return decided(v, rules::fit_consistent, evidence);
  if (kZ95 * e.se >= boundary - e.exponent && e.exponent <= boundary) {
    return inconclusive(
        fmt::format("the sampling error alone spans a + tolerance = {:g}: more samples (a lower --rel-se) would "
                    "settle it",
                    boundary),
        false);
  }
  if (e.lo > boundary) {
    return inconclusive(
        fmt::format("the local exponent is above a + tolerance = {:g}, but the heavy-tail-valid test {}: more samples "
                    "at the largest {} (the order-statistics bound tightens like 1/sqrt(samples)) or reliable "
                    "standard errors at smaller {} would settle it",
                    boundary, v.violation ? "does not confirm it" : "has no bounds to compare", xn, xn),
        false);
  }
  return inconclusive(fmt::format("the interval spans a + tolerance = {:g}; extend {} to {:g} and see whether the "
                                  "local exponent settles",
                                  boundary, xn, next_x),
                      true);
}

}  // namespace

Verdict decide(const std::vector<EvidencePoint>& points, const std::optional<ExactLaw>& law,
               const std::vector<records::ProvedBound>& proved, const SeriesClaim& claim) {
  Verdict v;
  confirm_exact(points, claim, v);
  check_sample_bounds(points, v);
  fit_local_exponents(points, claim, v);
  if (claim.equality) return decide_equality(points, claim.x_name, std::move(v));
  if (!claim.exponent) return v;  // a custom map states no exponent

  const double a = *claim.exponent;
  // A closed form's own statement first: it names the quantity and its constant.
  std::vector<records::ProvedBound> all = law ? bounds_of_law(*law, claim.x_name) : std::vector<records::ProvedBound>{};
  all.insert(all.end(), proved.begin(), proved.end());
  if (const std::optional<ProofDecision> proof = decide_by_proof(all, a)) {
    std::string reason = proof_reason(*proof, a, v, claim.x_name);
    // An asymptotic proof can decide what the measured sizes do not show (softmax with a small sigma_x: rows near
    // uniform, ||A||_F about 1 at every N measured, while B3 gives exponent 1/2): say so, not only the proof.
    const records::ProvedBound& b = proof->decided_by;
    const LocalExponent& e = v.primary;
    if (!b.deterministic && b.exponent && e.missing.empty() && (*b.exponent < e.lo || *b.exponent > e.hi)) {
      reason += fmt::format(
          "; the measured {} cannot show it: up to {} = {:g} the local exponent is {:.3g} [{:.3g}, {:.3g}], not e = "
          "{}, since the proof holds as {} grows{}",
          claim.x_name, claim.x_name, e.window.empty() ? 0.0 : e.window.back(), e.exponent, e.lo, e.hi,
          exponent_text(b.exponent), claim.x_name,
          b.subpolynomial ? " and its factor N^o(1) still dominates at these sizes" : "");
    }
    v.decided_by = proof->decided_by;
    return decided(std::move(v), *proof->rule, std::move(reason));
  }
  return decide_by_fit(points, all, claim, std::move(v));
}

}  // namespace attncheck::monte_carlo
