#include "attncheck/monte_carlo/fit.hpp"

#include "attncheck/monte_carlo/statistics.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

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

std::string describe(const LocalExponent& e, const std::string& what, const std::string& x_name) {
  if (!e.missing.empty()) return fmt::format("{}: {}", what, e.missing);
  std::string text =
      fmt::format("{} {} over {} = {:g}..{:g}, sampling +-{} (95%), systematic +-{}", what, fixed3(e.exponent), x_name,
                  e.window.front(), e.window.back(), fixed3(kZ95 * e.se), fixed3(e.systematic));
  if (e.previous) {
    text += fmt::format(" (it moved by {} from the window ending at {} = {:g})",
                        fixed3(std::abs(e.exponent - *e.previous)), x_name, e.window.front());
  }
  text += fmt::format(": [{}, {}]", fixed3(e.lo), fixed3(e.hi));
  if (!e.unreliable.empty()) {
    text += fmt::format(
        "; the standard error is not reliable at {} = {} (too few samples to judge it, or a few "
        "samples carrying the variance)",
        x_name, x_list(e.unreliable));
  }
  return text;
}

// The first x of the grid's progression x_max r^k at which the interval, its systematic part shrinking like
// x^(-1/2), would clear a + tolerance; none when the sampling part alone is too wide (more samples needed).
std::optional<double> settling_x(const LocalExponent& e, double boundary) {
  const double margin = std::abs(e.exponent - boundary), sampling = kZ95 * e.se;
  if (margin <= sampling || !(e.systematic > 0) || !(e.ratio > 1)) return std::nullopt;
  const double needed = e.window.back() * std::pow(e.systematic / (margin - sampling), 2);
  double x = e.window.back();
  for (int k = 0; k < 200 && x < needed; ++k) x *= e.ratio;
  return x <= e.window.back() ? e.window.back() * e.ratio : x;
}

}  // namespace

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
    e.missing = fmt::format("no second window [{:g}, {:g}] to measure how much the local exponent still moves",
                            x[window.front()] / 4, x[window.front()]);
    return e;
  }
  e.previous = weighted_slope(x, y, se, before).first;
  e.ratio = x[usable[last]] / x[window.front()];
  e.systematic = std::abs(e.exponent - *e.previous) / (std::sqrt(e.ratio) - 1);
  const double half = kZ95 * e.se + e.systematic;
  e.lo = e.exponent - half;
  e.hi = e.exponent + half;
  return e;
}

Verdict decide(const std::vector<EvidencePoint>& points, const std::optional<ExactLaw>& law, const SeriesClaim& claim) {
  Verdict v;
  const std::string& xn = claim.x_name;
  for (const EvidencePoint& p : points) {
    if (!p.z_exact) continue;
    if (!p.z_judged) {
      ++v.exact_unjudged;
      continue;
    }
    ++v.exact_judged;
    v.exact_max_abs_z = std::max(v.exact_max_abs_z.value_or(0.0), std::abs(*p.z_exact));
    if (std::abs(*p.z_exact) > kMaxExactAbsZ) v.exact_disagrees_at.push_back(p.x);
  }
  for (const EvidencePoint& p : points) {
    if (!p.sample_max || !p.sample_bound) continue;
    ++v.bound_checked;
    v.max_sample_over_bound = std::max(v.max_sample_over_bound.value_or(0.0), *p.sample_max / *p.sample_bound);
    // Rounding of the per-sample sums only: a bound is sharp, so anything beyond is a wrong computation.
    if (*p.sample_max > *p.sample_bound * (1 + 1e-12)) {
      v.bound_exceeded_at.push_back(p.x);
      v.exact_disagrees_at.push_back(p.x);
    }
  }
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
  } else {
    v.cross_check.missing = "not needed: the fitted quantity is an expectation itself, with no Jensen bias";
  }
  const auto decided = [&](const VerdictRule& rule, std::string reason) {
    v.word = rule.word;
    v.basis = rule.basis;
    v.rule = &rule;
    v.reason = std::move(reason);
    return v;
  };

  if (claim.equality) {
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
    if (differs.empty()) {
      const EvidencePoint& last = points.back();
      return decided(
          rules::equality_holds,
          fmt::format("the exact value equals the claimed value at every point (at {} = {:g}: {:.6g}, measured "
                      "{:.6g} +- {:.2g})",
                      xn, last.x, last.claimed_value.value_or(NAN), last.mean, last.se));
    }
    return decided(rules::equality_violated, differs);
  }
  if (!claim.exponent) return v;  // a custom map states no exponent

  const double a = *claim.exponent, tolerance = claim.tolerance, boundary = a + tolerance;
  std::string bound_note;
  if (law) {
    const std::string e_text =
        law->exponent ? fmt::format("{:g}", *law->exponent) : "-infinity (it is 0 for every " + xn + ")";
    const std::string what = fmt::format("{} ~ {:.6g} {}^{}", law->of, law->constant, xn, e_text);
    if (law->deterministic && (!law->exponent || *law->exponent <= a + 1e-9)) {
      return decided(
          rules::bound_holds,
          fmt::format("{} for every input: e = {} is at most a = {:g}; the largest sample is {:.3g} of its bound "
                      "over {} points{}",
                      what, e_text, a, v.max_sample_over_bound.value_or(NAN), v.bound_checked,
                      v.bound_exceeded_at.empty() ? ""
                                                  : fmt::format(" (ABOVE it at {} = {}: a failure of the tool)", xn,
                                                                x_list(v.bound_exceeded_at))));
    }
    if (!law->exponent || *law->exponent < a - 1e-9) {
      return decided(rules::exact_holds, fmt::format("{}: e = {} is below a = {:g}", what, e_text, a));
    }
    if (std::abs(*law->exponent - a) <= 1e-9) {
      return decided(rules::exact_tight, fmt::format("{}: e = {} equals a", what, e_text));
    }
    if (!law->bound)
      return decided(rules::exact_violated, fmt::format("{}: e = {} is above a = {:g}", what, e_text, a));
    bound_note = fmt::format(
        "the exact bound {} grows with e = {} above a = {:g}: it settles nothing, the asymptotic fit "
        "decides. ",
        law->of, e_text, a);
  }

  const std::string primary_text = describe(v.primary, "local exponent", xn);
  const std::string cross_text =
      claim.cross_check ? "; cross-check: " + describe(v.cross_check, "local exponent of sqrt(mean of ||F||^2)", xn)
                        : "";
  const std::string evidence = bound_note + primary_text + cross_text;
  const LocalExponent& e = v.primary;
  if (!e.missing.empty()) {
    v.extend_to = e.window.empty() ? std::nullopt : std::optional<double>(e.window.back() * 2);
    return decided(rules::fit_inconclusive, evidence + fmt::format(": extend {} to {:g} or beyond", xn,
                                                                   e.window.empty() ? 0.0 : e.window.back() * 2));
  }
  if (!e.unreliable.empty()) {
    return decided(rules::fit_inconclusive,
                   evidence + fmt::format(": more samples at {} = {} would settle it, unless their tails are too heavy",
                                          xn, x_list(e.unreliable)));
  }
  if (e.lo > boundary) {
    if (!claim.cross_check) return decided(rules::fit_violated, evidence);
    const LocalExponent& c = v.cross_check;
    if (c.usable() && c.lo > boundary) return decided(rules::fit_violated, evidence);
    std::string why;
    if (!c.missing.empty() || !c.unreliable.empty()) {
      why = "the cross-check cannot confirm it";
    } else {
      why = fmt::format("the cross-check's lower end {} is not above a + tolerance = {:g}", fixed3(c.lo), boundary);
    }
    const auto more = c.usable() && c.exponent > boundary ? settling_x(c, boundary) : std::nullopt;
    v.extend_to = more;
    return decided(rules::fit_inconclusive,
                   evidence +
                       fmt::format(": the local exponent is above a + tolerance but {}; {}", why,
                                   more ? fmt::format("extend {} to {:g}", xn, *more)
                                        : std::string(
                                              "more samples (a lower --rel-se) and a wider range would settle it")));
  }
  if (e.lo <= a && a <= e.hi && e.hi - e.lo <= 4 * tolerance) return decided(rules::fit_tight, evidence);
  if (e.hi <= boundary) return decided(rules::fit_holds, evidence);
  v.extend_to = settling_x(e, boundary);
  return decided(rules::fit_inconclusive,
                 evidence + (v.extend_to
                                 ? fmt::format(": extend {} to {:g} to settle it", xn, *v.extend_to)
                                 : fmt::format(": the sampling error alone spans a + tolerance = {:g}: more samples "
                                               "(a lower --rel-se) would settle it",
                                               boundary)));
}

}  // namespace attncheck::monte_carlo
