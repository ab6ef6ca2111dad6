// The scaling section: per claim its statement, per fitted series the configuration, the log-log plot, the
// points with exact values and Jensen ratios, the verdict and the provenance; a summary table first.

#include "attncheck/records/claims.hpp"
#include "attncheck/records/json_fields.hpp"
#include "attncheck/records/json_input.hpp"
#include "attncheck/records/verdict.hpp"
#include "attncheck/reports/numbers.hpp"
#include "attncheck/reports/report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <set>

namespace attncheck::reports {

namespace {

namespace fs = std::filesystem;

constexpr double kZ95 = 1.959963984540054;  // two-sided 95% normal quantile, for points without a stored CI

std::string claim_title(const std::string& id) {
  const auto claim = records::find_claim(id);
  if (!claim)
    return id == "custom" ? "custom configuration (no claim of the papers)" : id + " (not in THEORY.md's table)";
  return fmt::format("{} ({})", id, claim->numbering());
}

std::string estimand_symbol(theory::Estimand estimand) { return std::string(theory::term_of(estimand).symbol); }

std::string series_anchor(std::size_t index) { return fmt::format("series-{}", index + 1); }
std::string series_name(std::size_t index) { return fmt::format("series{:02}", index + 1); }

// The 95% interval of the fitted quantity at point i: the stored Student-t interval of the mean where
// points.jsonl has it, else estimate ± z SE.
std::pair<double, double> point_ci(const records::Series& s, std::size_t i) {
  if (s.fit_of == "mean" && s.points[i] && std::isfinite(s.points[i]->ci95_lo)) {
    return {s.points[i]->ci95_lo, s.points[i]->ci95_hi};
  }
  return {s.fitted(i) - kZ95 * s.fitted_se(i), s.fitted(i) + kZ95 * s.fitted_se(i)};
}

std::string x_name(const records::Series& s) { return s.x_variable; }
std::string x_axis_label(const records::Series& s) {
  return s.x_variable == "d" ? "d (head dimension)" : "N (sequence length)";
}

// What the fit is of: E||F||_F, or the second moment when the series fits that (C8's Var(q . k)).
std::string fitted_symbol(const records::Series& s) {
  const std::string symbol = estimand_symbol(s.key.estimand);
  if (s.fit_of != "mean_sq") return symbol;
  return s.key.estimand == theory::Estimand::score_var ? "E[s_ij^2] = Var(s_ij)" : symbol + "^2 (second moment)";
}

std::string verdict_word(const records::Series& s) {
  return s.verdict ? std::string(to_string(*s.verdict)) : "not checked";
}

// What the verdict rests on. Folders written before verdicts named a basis were decided by the global fit.
std::string basis_text(const records::Series& s) {
  if (!s.verdict) return "-";
  return s.basis ? std::string(records::to_string(*s.basis)) : "finite-N fit (older results)";
}

std::string verdict_with_basis(const records::Series& s) {
  if (!s.verdict) return verdict_word(s);
  return fmt::format("{} ({})", verdict_word(s), basis_text(s));
}

std::string jensen_drift_text(const records::Series& s) {
  if (!s.jensen_first || !s.jensen_last) return "-";
  return fmt::format("{} -> {} ({})", format_number(*s.jensen_first, 3), format_number(*s.jensen_last, 3),
                     s.jensen_source.empty() ? "estimated" : s.jensen_source);
}

std::string slope_text(const records::Series& s) {
  if (!s.slope) return "no fit";
  return fmt::format("{} {}", format_number(*s.slope), format_interval(s.slope_ci->first, s.slope_ci->second));
}

// C in the finite-N fit C x^slope, beside the slope: the constants the papers' comparisons turn on.
std::string fitted_constant_text(const records::Series& s) {
  if (!s.slope || !s.intercept) return "-";
  return format_number(std::exp(*s.intercept));
}

std::string claimed_text(const records::Series& s) {
  if (s.claims_value) return "the value itself: Var(q . k) = d_k";
  if (!s.claimed_exponent) return "none stated";
  return fmt::format("{} + {}", format_number(*s.claimed_exponent), s.tolerance ? format_number(*s.tolerance) : "?");
}

std::string verdict_reason(const records::Series& s) {
  if (s.verdict_reason) {
    return fmt::format("Rule ({}): {}. Evidence: {}.", s.basis ? records::to_string(*s.basis) : "?",
                       s.verdict_rule.value_or("-"), *s.verdict_reason);
  }
  if (!s.slope) {
    return fmt::format("No slope: fewer than two points with a usable estimate, so there is no fit in {}.", x_name(s));
  }
  const std::string fitted = fmt::format("fitted slope {} with 95% CI {}", format_number(*s.slope),
                                         format_interval(s.slope_ci->first, s.slope_ci->second));
  if (!s.claimed_exponent || !s.verdict) {
    return fitted + ": this configuration states no exponent, so there is nothing to check.";
  }
  const double tolerance = s.tolerance.value_or(0);
  const double bound = *s.claimed_exponent + tolerance;
  const std::string numbers = fmt::format("{}; claimed exponent {} with tolerance {}", fitted,
                                          format_number(*s.claimed_exponent), format_number(tolerance));
  switch (*s.verdict) {
    case records::Verdict::holds:
      return numbers + fmt::format(
                           ": the CI's upper end {} is at most {} (claimed + tolerance), so the growth in {} "
                           "is no faster than claimed.",
                           format_number(s.slope_ci->second), format_number(bound), x_name(s));
    case records::Verdict::tight:
      return numbers + ": the CI contains the claimed exponent, so the claimed growth rate is reached.";
    case records::Verdict::violated:
      return numbers + fmt::format(
                           ": the CI lies above {} (claimed + tolerance), so the estimates grow faster in {} "
                           "than claimed.",
                           format_number(bound), x_name(s));
    case records::Verdict::inconclusive:
      return numbers + fmt::format(": the CI is too wide to decide; more samples or a wider {} range would settle it.",
                                   x_name(s));
    case records::Verdict::consistent:
      return numbers +
             fmt::format(": consistent with the claim up to the largest {}, which is not a proof.", x_name(s));
  }
  return numbers;
}

bool has_exact(const records::Series& s) {
  return std::any_of(s.exact_sq.begin(), s.exact_sq.end(), [](const auto& e) { return e.has_value(); });
}

bool has_exact_mean(const records::Series& s) {
  return std::any_of(s.exact_mean.begin(), s.exact_mean.end(), [](const auto& e) { return e.has_value(); });
}

std::string range_text(long long lo, long long hi) {
  return lo == hi ? fmt::format("{}", lo) : fmt::format("{} to {}", lo, hi);
}

Facts configuration_facts(const records::Series& s) {
  Facts f;
  f.items.emplace_back("formula", s.formula);
  f.items.emplace_back("activation phi", theory::phi_label(s.key.activation));
  f.items.emplace_back("p", fmt::format("{}", s.key.activation.p));
  if (const auto reading = s.key.reading()) f.items.emplace_back("reading of (.)^p", std::string(*reading));
  if (s.key.alpha) f.items.emplace_back("alpha", format_number(*s.key.alpha));
  if (s.key.mix)
    f.items.emplace_back("mix alpha (P = alpha softmax_col(V) + (1 - alpha) V)", format_number(*s.key.mix));
  if (s.key.dv) f.items.emplace_back("d_v (value columns)", fmt::format("{}", *s.key.dv));
  f.items.emplace_back("outer scale c(N)", s.key.scale);
  if (s.points[0]) f.items.emplace_back("inner scale lambda", format_number(s.points[0]->inner, 6));
  f.items.emplace_back("estimand",
                       fmt::format("{} ({})", theory::term_of(s.key.estimand).word, estimand_symbol(s.key.estimand)));
  if (s.x_variable == "d") {
    f.items.emplace_back("D (model dim), d (head dim)", fmt::format("{}, swept", s.key.D));
  } else {
    f.items.emplace_back("D (model dim), d (head dim)", fmt::format("{}, {}", s.key.D, s.key.d));
  }
  f.items.emplace_back("sigma_x, sigma_t (standard deviations)",
                       fmt::format("{}, {}", format_number(s.key.sigma_x), format_number(s.key.sigma_t)));
  const auto grid = [](const std::vector<long long>& values) {
    std::string text;
    for (std::size_t i = 0; i < values.size(); ++i) text += (i ? ", " : "") + fmt::format("{}", values[i]);
    return text;
  };
  if (s.x_variable == "d") {
    f.items.emplace_back("d (head dimensions, the fit's variable)", grid(s.x));
    std::vector<long long> lengths = s.N;
    lengths.erase(std::unique(lengths.begin(), lengths.end()), lengths.end());
    f.items.emplace_back("N (sequence length)", grid(lengths));
  } else {
    f.items.emplace_back("N (sequence lengths)", grid(s.N));
  }
  if (s.fit_of == "mean_sq") f.items.emplace_back("fitted quantity", fitted_symbol(s));
  long long fewest = 0, most = 0;
  std::set<std::string> stops;
  for (const auto& point : s.points) {
    if (!point) continue;
    fewest = fewest == 0 ? point->samples : std::min(fewest, point->samples);
    most = std::max(most, point->samples);
    stops.insert(point->stopped_by);
  }
  if (most > 0) {
    std::string stopped;
    for (const std::string& stop : stops) stopped += (stopped.empty() ? "" : ", ") + stop;
    f.items.emplace_back("samples per point",
                         fmt::format("{} (sampling stopped by: {})", range_text(fewest, most), stopped));
  }
  return f;
}

Facts series_provenance(const records::Series& s, const records::Provenance& run) {
  Facts f;
  std::set<std::string> backends, threads, run_seeds;
  std::string seeds;
  double wall = 0;
  bool any_point = false;
  for (std::size_t i = 0; i < s.N.size(); ++i) {
    if (!s.points[i]) continue;
    any_point = true;
    const records::PointRecord& p = *s.points[i];
    backends.insert(p.backend);
    threads.insert(std::to_string(p.threads));
    run_seeds.insert(std::to_string(p.run_seed));
    seeds += (seeds.empty() ? "" : ", ") + fmt::format("{}={}: {}", x_name(s), s.x[i], p.seed);
    wall += p.wall_seconds;
  }
  const auto joined = [](const std::set<std::string>& values, const std::string& fallback) {
    if (values.empty()) return fallback;
    std::string out;
    for (const std::string& v : values) out += (out.empty() ? "" : ", ") + v;
    return out;
  };
  f.items.emplace_back("attncheck version", run.version);
  f.items.emplace_back("run seed", joined(run_seeds, std::to_string(run.run_seed)));
  if (any_point) f.items.emplace_back("point seeds", seeds);
  f.items.emplace_back("backend", joined(backends, run.backend));
  f.items.emplace_back("threads", joined(threads, std::to_string(run.threads)));
  f.items.emplace_back("machine", run.machine);
  f.items.emplace_back("date (UTC)", run.date);
  if (any_point) {
    f.items.emplace_back("wall time of this series", fmt::format("{} s", format_number(wall, 4)));
  } else {
    f.items.emplace_back("wall time of this series", "not recorded (no points.jsonl)");
  }
  return f;
}

Table points_table(const records::Series& s) {
  const bool exact = has_exact(s);
  const bool detail = std::any_of(s.points.begin(), s.points.end(), [](const auto& p) { return p.has_value(); });
  const auto second_moment = [&](std::size_t i) -> std::pair<double, double> {
    if (std::isfinite(s.mean_sq[i])) return {s.mean_sq[i], s.se_sq[i]};
    if (s.points[i]) return {s.points[i]->mean_sq, s.points[i]->se_sq};
    return {std::nan(""), std::nan("")};
  };
  bool any_second_moment = false;
  for (std::size_t i = 0; i < s.x.size(); ++i)
    any_second_moment = any_second_moment || std::isfinite(second_moment(i).first);
  const std::string symbol = estimand_symbol(s.key.estimand);
  Table t;
  if (s.x_variable == "d") t.header.push_back("d");
  t.header.insert(t.header.end(), {"N", symbol + " ± SE"});
  if (any_second_moment) t.header.push_back("E||.||^2 ± SE (second moment)");
  t.header.push_back("95% CI of " + fitted_symbol(s));
  if (detail) t.header.push_back("samples");
  if (exact) {
    t.header.insert(t.header.end(), {"exact E||.||_F^2", "z of E||.||^2 vs exact", "Jensen bound sqrt(exact)",
                                     "Jensen ratio E||.|| / sqrt(E||.||^2) ± SE"});
  }
  const bool exact_mean = has_exact_mean(s);
  if (exact_mean) t.header.insert(t.header.end(), {"exact " + symbol, "z of the estimate vs exact"});
  const bool bounded =
      std::any_of(s.points.begin(), s.points.end(), [](const auto& p) { return p && p->sample_bound; });
  if (bounded) t.header.insert(t.header.end(), {"largest sample", "deterministic upper bound"});
  if (detail) t.header.insert(t.header.end(), {"SE reliable", "seed", "wall time (s)"});
  for (std::size_t i = 0; i < s.x.size(); ++i) {
    const auto [lo, hi] = point_ci(s, i);
    const auto& point = s.points[i];
    std::vector<std::string> row;
    if (s.x_variable == "d") row.push_back(fmt::format("{}", s.x[i]));
    row.insert(row.end(), {fmt::format("{}", s.N[i]), format_estimate(s.mean[i], s.se[i])});
    const auto [m2, m2_se] = second_moment(i);
    if (any_second_moment) row.push_back(format_estimate(m2, m2_se));
    row.push_back(format_interval(lo, hi, 5));
    if (detail) row.push_back(point ? fmt::format("{}", point->samples) : "-");
    if (exact) {
      if (const auto& e = s.exact_sq[i]; e && *e > 0) {
        const double bound = std::sqrt(*e);
        row.push_back(format_number(*e, 8));
        row.push_back(point && point->z_exact_sq ? format_number(*point->z_exact_sq, 3)
                      : m2_se > 0                ? format_number((m2 - *e) / m2_se, 3)
                                                 : "-");
        row.push_back(format_number(bound, 8));
        row.push_back(format_estimate(s.mean[i] / bound, s.se[i] / bound));
      } else {
        row.insert(row.end(), {"-", "-", "-", "-"});
      }
    }
    if (exact_mean) {
      if (const auto& e = s.exact_mean[i]) {
        row.push_back(format_number(*e, 8));
        row.push_back(point && point->z_exact_mean ? format_number(*point->z_exact_mean, 3)
                      : s.se[i] > 0                ? format_number((s.mean[i] - *e) / s.se[i], 3)
                                                   : "-");
      } else {
        row.insert(row.end(), {"-", "-"});
      }
    }
    if (bounded) {
      row.push_back(point && point->sample_max ? format_number(*point->sample_max, 6) : "not finite");
      row.push_back(point && point->sample_bound ? format_number(*point->sample_bound, 6) : "-");
    }
    if (detail) {
      row.push_back(point ? (point->se_reliable ? "yes" : "NO") : "-");
      row.push_back(point ? std::to_string(point->seed) : "-");
      row.push_back(point ? format_number(point->wall_seconds, 3) : "-");
    }
    t.rows.push_back(std::move(row));
  }
  return t;
}

Curve estimate_curve(const records::Series& s, std::string title) {
  Curve estimates{std::move(title), CurveStyle::points_with_error_bars, {}, {}, {}, {}};
  for (std::size_t i = 0; i < s.x.size(); ++i) {
    const auto [lo, hi] = point_ci(s, i);
    estimates.x.push_back(static_cast<double>(s.x[i]));
    estimates.y.push_back(s.fitted(i));
    // Without an interval the bar collapses onto the point rather than vanish with it.
    estimates.y_lo.push_back(std::isfinite(lo) ? lo : s.fitted(i));
    estimates.y_hi.push_back(std::isfinite(hi) ? hi : s.fitted(i));
  }
  return estimates;
}

// exp(log_at_1) x^slope over the series' range of x: two points, a straight line on log-log axes.
Curve power_law(const records::Series& s, double log_at_1, double slope, std::string title, CurveStyle style) {
  const double lo = static_cast<double>(s.x.front()), hi = static_cast<double>(s.x.back());
  return Curve{std::move(title),
               style,
               {lo, hi},
               {std::exp(log_at_1 + slope * std::log(lo)), std::exp(log_at_1 + slope * std::log(hi))},
               {},
               {}};
}

// The centroid (mean log x, mean log y) of the positive estimates, through which a least-squares line passes.
std::optional<std::pair<double, double>> log_centroid(const records::Series& s) {
  double sum_log_x = 0, sum_log_y = 0;
  int positive = 0;
  for (std::size_t i = 0; i < s.x.size(); ++i) {
    if (!(s.fitted(i) > 0) || !std::isfinite(s.fitted(i))) continue;
    sum_log_x += std::log(static_cast<double>(s.x[i]));
    sum_log_y += std::log(s.fitted(i));
    ++positive;
  }
  if (positive == 0) return std::nullopt;
  return std::make_pair(sum_log_x / positive, sum_log_y / positive);
}

// The exponent the compensated panel divides by: the claimed one, else the finite-N fit's slope.
std::optional<std::pair<double, std::string>> compensating_exponent(const records::Series& s) {
  if (s.claimed_exponent) return std::make_pair(*s.claimed_exponent, std::string("claimed a"));
  if (s.slope) return std::make_pair(*s.slope, std::string("fitted slope"));
  return std::nullopt;
}

// y / x^a at each point with its 95% band; `se` is the standard error of y.
void add_compensated(PlotSpec& panel, const records::Series& s, double a, const std::vector<double>& y,
                     const std::vector<double>& se, const std::string& title, int colour) {
  Curve band{"", CurveStyle::band, {}, {}, {}, {}, colour};
  Curve values{title, CurveStyle::line_with_points, {}, {}, {}, {}, colour};
  for (std::size_t i = 0; i < s.x.size(); ++i) {
    if (!std::isfinite(y[i])) continue;
    const double x = static_cast<double>(s.x[i]);
    const double scale = std::pow(x, -a);
    values.x.push_back(x);
    values.y.push_back(y[i] * scale);
    if (std::isfinite(se[i])) {
      band.x.push_back(x);
      band.y.push_back(y[i] * scale);
      band.y_lo.push_back((y[i] - kZ95 * se[i]) * scale);
      band.y_hi.push_back((y[i] + kZ95 * se[i]) * scale);
    }
  }
  if (band.x.size() >= 2) panel.curves.push_back(std::move(band));
  panel.curves.push_back(std::move(values));
}

// The slope of log y between neighbouring points, drawn at their geometric mean, with its delta-method
// standard error sqrt((se_k/y_k)^2 + (se_{k-1}/y_{k-1})^2) / log(x_k/x_{k-1}): the local exponent, which
// converges to the asymptotic one as x grows.
void add_local_slopes(PlotSpec& panel, const records::Series& s, const std::vector<double>& y,
                      const std::vector<double>* se, const std::string& title, CurveStyle style, int colour) {
  Curve band{"", CurveStyle::band, {}, {}, {}, {}, colour};
  Curve slopes{title, style, {}, {}, {}, {}, colour};
  for (std::size_t i = 1; i < s.x.size(); ++i) {
    if (!(y[i] > 0 && y[i - 1] > 0) || s.x[i] <= s.x[i - 1]) continue;
    const double x0 = static_cast<double>(s.x[i - 1]), x1 = static_cast<double>(s.x[i]);
    const double log_ratio = std::log(x1 / x0);
    const double slope = std::log(y[i] / y[i - 1]) / log_ratio;
    const double x = std::sqrt(x0 * x1);
    slopes.x.push_back(x);
    slopes.y.push_back(slope);
    if (se && std::isfinite((*se)[i]) && std::isfinite((*se)[i - 1])) {
      const double slope_se = std::hypot((*se)[i] / y[i], (*se)[i - 1] / y[i - 1]) / log_ratio;
      band.x.push_back(x);
      band.y.push_back(slope);
      band.y_lo.push_back(slope - kZ95 * slope_se);
      band.y_hi.push_back(slope + kZ95 * slope_se);
    }
  }
  if (slopes.x.empty()) return;
  if (band.x.size() >= 2) panel.curves.push_back(std::move(band));
  panel.curves.push_back(std::move(slopes));
}

std::vector<double> square_roots(const std::vector<double>& m2) {
  std::vector<double> out;
  for (const double v : m2) out.push_back(v >= 0 ? std::sqrt(v) : std::nan(""));
  return out;
}

// SE of sqrt(m2) by the delta method: se(m2) / (2 sqrt(m2)).
std::vector<double> square_root_ses(const std::vector<double>& m2, const std::vector<double>& se_sq) {
  std::vector<double> out;
  for (std::size_t i = 0; i < m2.size(); ++i)
    out.push_back(m2[i] > 0 ? se_sq[i] / (2 * std::sqrt(m2[i])) : std::nan(""));
  return out;
}

std::vector<double> exact_roots(const records::Series& s) {
  std::vector<double> out;
  for (const auto& e : s.exact_sq) out.push_back(e && *e > 0 ? std::sqrt(*e) : std::nan(""));
  return out;
}

// What the figure says of the verdict: the word, its basis, and the numbers it rests on.
std::vector<std::string> verdict_notes(const records::Series& s) {
  std::string verdict = fmt::format("verdict: {} (basis: {})", verdict_word(s), basis_text(s));
  if (s.claimed_exponent) verdict += fmt::format(", claimed exponent {}", claimed_text(s));
  std::string evidence;
  if (s.local_exponent && s.local_exponent->exponent && s.local_exponent->interval) {
    evidence = fmt::format("local exponent {} {}", format_number(*s.local_exponent->exponent),
                           format_interval(s.local_exponent->interval->first, s.local_exponent->interval->second));
  }
  if (s.slope)
    evidence +=
        (evidence.empty() ? "" : "; ") + fmt::format("finite-N fit (diagnostic, never decides) {}", slope_text(s));
  std::vector<std::string> notes{verdict};
  if (!evidence.empty()) notes.push_back(evidence);
  return notes;
}

// What a series' panels draw: the fitted quantity (E||F|| or E||F||^2) with its SEs and symbol, and whether the
// second moments give a cross-check.
struct SeriesValues {
  bool norms = false, second_moments = false;
  std::vector<double> fitted, fitted_se;
  std::string symbol;
};

SeriesValues series_values(const records::Series& s) {
  SeriesValues v;
  v.norms = s.fit_of == "mean";
  v.second_moments =
      v.norms && std::any_of(s.mean_sq.begin(), s.mean_sq.end(), [](double m) { return std::isfinite(m); });
  v.fitted = v.norms ? s.mean : s.mean_sq;
  v.fitted_se = v.norms ? s.se : s.se_sq;
  v.symbol = v.norms ? estimand_symbol(s.key.estimand) : fitted_symbol(s);
  return v;
}

// sqrt(exact E||F||^2) at each x where it is known, times x^power.
Curve exact_root_curve(const records::Series& s, std::string title, CurveStyle style, double power) {
  const std::vector<double> exact = exact_roots(s);
  Curve curve{std::move(title), style, {}, {}, {}, {}, 6};
  for (std::size_t i = 0; i < s.x.size(); ++i) {
    if (!std::isfinite(exact[i])) continue;
    curve.x.push_back(static_cast<double>(s.x[i]));
    curve.y.push_back(exact[i] * std::pow(static_cast<double>(s.x[i]), power));
  }
  return curve;
}

// A horizontal dashed line at y over the series' range of x.
Curve level_line(const records::Series& s, std::string title, double y) {
  return Curve{std::move(title),
               CurveStyle::dashed_line,
               {static_cast<double>(s.x.front()), static_cast<double>(s.x.back())},
               {y, y},
               {},
               {},
               1};
}

// Is y / x^a flat? (none for a series without an exponent to compensate by)
std::optional<PlotSpec> compensated_panel(const records::Series& s, const SeriesValues& v) {
  const auto a = compensating_exponent(s);
  if (!a) return std::nullopt;
  const std::string x = x_name(s);
  PlotSpec panel;
  panel.title = fmt::format("compensated by {}^{} ({})", x, format_number(a->first), a->second);
  panel.x_label = x_axis_label(s);
  panel.y_label = fmt::format("value / {}^{}", x, format_number(a->first));
  panel.log_y = false;
  add_compensated(panel, s, a->first, v.fitted, v.fitted_se, fmt::format("{} / {}^a, 95% band", v.symbol, x), 0);
  if (v.second_moments) {
    add_compensated(panel, s, a->first, square_roots(s.mean_sq), square_root_ses(s.mean_sq, s.se_sq),
                    fmt::format("sqrt(E||.||^2) / {}^a, 95% band", x), 1);
  }
  if (has_exact(s) && v.norms) {
    Curve line = exact_root_curve(s, fmt::format("sqrt(exact E||.||^2) / {}^a", x), CurveStyle::dashed_line, -a->first);
    if (!line.x.empty()) panel.curves.push_back(std::move(line));
  }
  // An equality claim (C8: Var(q . k) = d) states the constant too: the compensated values must sit at it.
  if (s.claims_value && s.claimed_exponent)
    panel.curves.push_back(level_line(s, fmt::format("claimed: value / {}^a = 1", x), 1));
  return panel;
}

// Does the local slope settle at a? With the verdict's window, exponent and interval.
std::optional<PlotSpec> local_slope_panel(const records::Series& s, const SeriesValues& v) {
  PlotSpec local;
  local.title = fmt::format("local slope d log y / d log {}", x_name(s));
  local.x_label = x_axis_label(s);
  local.y_label = "local exponent";
  local.log_y = false;
  add_local_slopes(local, s, v.fitted, &v.fitted_se, fmt::format("of {}, 95% band", v.symbol),
                   CurveStyle::line_with_points, 0);
  if (has_exact(s) && v.norms) {
    add_local_slopes(local, s, exact_roots(s), nullptr, "of sqrt(exact E||.||^2)", CurveStyle::dashed_line, 6);
  }
  if (local.curves.empty()) return std::nullopt;
  if (s.local_exponent && s.local_exponent->exponent && s.local_exponent->interval &&
      s.local_exponent->window.size() >= 2) {
    const records::LocalExponentRecord& r = *s.local_exponent;
    const double lo = r.window.front(), hi = r.window.back();
    local.curves.push_back(Curve{"",
                                 CurveStyle::band,
                                 {lo, hi},
                                 {*r.exponent, *r.exponent},
                                 {r.interval->first, r.interval->first},
                                 {r.interval->second, r.interval->second},
                                 2});
    // Its numbers are in the figure's note; the legend stays short enough not to run into the next panel.
    local.curves.push_back(Curve{"the verdict's local exponent and interval",
                                 CurveStyle::line,
                                 {lo, hi},
                                 {*r.exponent, *r.exponent},
                                 {},
                                 {},
                                 2});
  }
  if (s.claimed_exponent)
    local.curves.push_back(
        level_line(s, fmt::format("claimed a = {}", format_number(*s.claimed_exponent)), *s.claimed_exponent));
  return local;
}

// The estimates on log-log axes with the finite-N fit, the claimed slope and the Jensen bound.
PlotSpec log_log_panel(const records::Series& s, const SeriesValues& v) {
  PlotSpec loglog;
  loglog.title = "log-log";
  loglog.x_label = x_axis_label(s);
  loglog.y_label = fitted_symbol(s);
  Curve estimates = estimate_curve(s, fmt::format("{}, 95% band", fitted_symbol(s)));
  estimates.style = CurveStyle::band;
  estimates.title.clear();
  estimates.colour = 0;
  loglog.curves.push_back(std::move(estimates));
  loglog.curves.push_back(Curve{fmt::format("{}, 95% band", fitted_symbol(s)),
                                CurveStyle::line_with_points,
                                {s.x.begin(), s.x.end()},
                                v.fitted,
                                {},
                                {},
                                0});
  if (s.slope && s.intercept) {
    loglog.curves.push_back(power_law(s, *s.intercept, *s.slope,
                                      fmt::format("finite-N fit, slope {}", format_number(*s.slope)),
                                      CurveStyle::line));
    loglog.curves.back().colour = 3;
  }
  const auto centre = log_centroid(s);
  if (centre && s.claimed_exponent) {
    loglog.curves.push_back(power_law(s, centre->second - *s.claimed_exponent * centre->first, *s.claimed_exponent,
                                      fmt::format("claimed slope {}", format_number(*s.claimed_exponent)),
                                      CurveStyle::dashed_line));
    loglog.curves.back().colour = 1;
  }
  if (has_exact(s) && v.norms)
    loglog.curves.push_back(exact_root_curve(s, "sqrt(exact E||.||^2) (Jensen bound)", CurveStyle::points, 0));
  return loglog;
}

// Per series three panels, each answering one question: is y / x^a flat (compensated), does the local slope
// settle at a, and the log-log view of the estimates with the fits.
std::vector<PlotSpec> series_panels(const records::Series& s) {
  const SeriesValues v = series_values(s);
  std::vector<PlotSpec> panels;
  if (auto panel = compensated_panel(s, v)) panels.push_back(std::move(*panel));
  if (auto panel = local_slope_panel(s, v)) panels.push_back(std::move(*panel));
  panels.push_back(log_log_panel(s, v));
  return panels;
}

PlotSpec series_plot(const records::Series& s, std::size_t index) {
  PlotSpec plot;
  plot.name = series_name(index);
  plot.title = fmt::format("Series {}: {}", index + 1, s.key.label());
  plot.notes = verdict_notes(s);
  plot.panels = series_panels(s);
  plot.columns = static_cast<int>(plot.panels.size());
  return plot;
}

// Series of one claim that differ only in p, in increasing p: drawn side by side, one column per p.
std::vector<std::vector<std::size_t>> p_groups(const std::vector<records::Series>& series,
                                               const std::vector<std::size_t>& members) {
  std::vector<std::vector<std::size_t>> groups;
  for (std::size_t i : members) {
    records::SeriesKey key = series[i].key;
    key.activation.p = 0;
    auto group = std::find_if(groups.begin(), groups.end(), [&](const std::vector<std::size_t>& g) {
      records::SeriesKey other = series[g.front()].key;
      other.activation.p = 0;
      return other == key && series[g.front()].x_variable == series[i].x_variable;
    });
    if (group == groups.end())
      groups.push_back({i});
    else
      group->push_back(i);
  }
  std::erase_if(groups, [](const std::vector<std::size_t>& g) { return g.size() < 2; });
  for (auto& g : groups) {
    std::stable_sort(g.begin(), g.end(), [&](std::size_t a, std::size_t b) {
      return series[a].key.activation.p < series[b].key.activation.p;
    });
  }
  return groups;
}

// One figure per group: rows compensated / local slope / log-log, one column per p. Empty when a series of the
// group lacks a panel (no exponent to compensate by, fewer than two points), which would break the grid.
std::optional<PlotSpec> claim_figure(const std::vector<records::Series>& series, const std::vector<std::size_t>& group,
                                     const std::string& name) {
  std::vector<std::vector<PlotSpec>> columns;
  for (std::size_t i : group) {
    columns.push_back(series_panels(series[i]));
    if (columns.back().size() != 3) return std::nullopt;
  }
  PlotSpec figure;
  figure.name = name;
  const records::SeriesKey& key = series[group.front()].key;
  std::string label = key.label();
  const std::string p_text = fmt::format(" p={}", key.activation.p);
  if (const auto at = label.find(p_text); at != std::string::npos) label.replace(at, p_text.size(), "");
  figure.title = fmt::format("{}: one column per p", label);
  std::string verdicts;
  for (std::size_t i : group) {
    const records::Series& s = series[i];
    verdicts += fmt::format("{}p={} (series {}): {}", verdicts.empty() ? "" : "; ", s.key.activation.p, i + 1,
                            verdict_with_basis(s));
  }
  figure.notes = {verdicts};
  for (std::size_t row = 0; row < 3; ++row) {
    for (std::size_t c = 0; c < columns.size(); ++c) {
      PlotSpec panel = columns[c][row];
      panel.title = fmt::format("p={}: {}", series[group[c]].key.activation.p, panel.title);
      figure.panels.push_back(std::move(panel));
    }
  }
  figure.columns = static_cast<int>(columns.size());
  return figure;
}

// Every series of a claim on one panel, each divided by x^a of its own claim (or fit) with its 95% band: which
// activation, reading or scale stays flat, and which grows, side by side. None with fewer than two such series.
std::optional<PlotSpec> claim_overlay(const std::vector<records::Series>& series,
                                      const std::vector<std::size_t>& members, const std::string& claim,
                                      const std::string& name) {
  PlotSpec overlay;
  overlay.name = name;
  overlay.title = fmt::format("Claim {}: every series, each divided by x^a (flat: growth like x^a)", claim);
  overlay.log_y = true;
  std::set<std::string> x_labels;
  int drawn = 0;
  for (std::size_t i : members) {
    const records::Series& s = series[i];
    const auto a = compensating_exponent(s);
    if (!a || s.x.size() < 2) continue;
    const SeriesValues v = series_values(s);
    add_compensated(overlay, s, a->first, v.fitted, v.fitted_se,
                    fmt::format("{}: {} / {}^{} ({})", i + 1, s.key.label(), x_name(s), format_number(a->first),
                                verdict_word(s)),
                    drawn++);
    x_labels.insert(x_axis_label(s));
  }
  if (drawn < 2 || x_labels.size() != 1) return std::nullopt;
  overlay.x_label = *x_labels.begin();
  overlay.y_label = "value / x^a";
  return overlay;
}

// Every series of the folder that fits E||F|| in N, one figure per estimand: the estimates themselves on
// log-log axes with their 95% bands, so that activations of different claims (softmax, x^3/sqrt(N), relu/N, an
// expression) compare in size as well as in slope, which the per-claim overlays, each divided by its own x^a,
// do not show. The value figure carries softmax's bound sqrt(N). None for an estimand with fewer than two
// configurations.
std::vector<std::pair<theory::Estimand, PlotSpec>> estimand_overlays(const std::vector<records::Series>& series) {
  std::vector<std::pair<theory::Estimand, PlotSpec>> overlays;
  for (const theory::EstimandTerm& term : theory::all_estimands()) {
    // Norms only: a row sum or a score variance may be 0 or negative (x^3's mean is 0), which log axes would drop.
    if (!term.norm) continue;
    PlotSpec overlay;
    overlay.name = fmt::format("estimand{:02}", overlays.size() + 1);
    overlay.title = fmt::format("{}: every activation of the folder", term.symbol);
    overlay.x_label = "N (sequence length)";
    overlay.y_label = std::string(term.symbol);
    std::set<std::string> activations;  // configurations apart from the claim: C6 and a custom run may agree
    std::pair<double, double> n_range{INFINITY, 0};
    int drawn = 0;
    for (std::size_t i = 0; i < series.size(); ++i) {
      const records::Series& s = series[i];
      if (s.key.estimand != term.value || s.x_variable != "N" || s.fit_of != "mean" || s.x.size() < 2) continue;
      add_compensated(overlay, s, 0, s.mean, s.se, fmt::format("{}: {} ({})", i + 1, s.key.label(), verdict_word(s)),
                      drawn);
      overlay.curves.back().variant = drawn++ / 7;  // past the palette's seven colours, another point type and dash
      records::SeriesKey configuration = s.key;
      configuration.claim.clear();
      activations.insert(configuration.label());
      n_range = {std::min(n_range.first, static_cast<double>(s.x.front())),
                 std::max(n_range.second, static_cast<double>(s.x.back()))};
    }
    if (activations.size() < 2) continue;
    if (term.value == theory::Estimand::value) {
      overlay.curves.push_back(Curve{"sqrt(N): the softmax bound",
                                     CurveStyle::dashed_line,
                                     {n_range.first, n_range.second},
                                     {std::sqrt(n_range.first), std::sqrt(n_range.second)},
                                     {},
                                     {},
                                     activation_colour("")});  // black: the colour of no activation
    }
    overlays.emplace_back(term.value, std::move(overlay));
  }
  return overlays;
}

// How far, as a factor, the stored line exp(intercept) x^slope lies from the estimates at their log-log
// centroid. A least-squares line passes through it (a weighted one near it); a large factor means the
// intercept is not what the report takes it for (a natural logarithm), so the drawn fit would mislead.
std::optional<double> fit_miss_factor(const records::Series& s) {
  const auto centre = log_centroid(s);
  if (!centre || !s.slope || !s.intercept) return std::nullopt;
  return std::exp(std::fabs(*s.intercept + *s.slope * centre->first - centre->second));
}

// The elementwise and matrix-power readings of the same configuration, when both were run.
struct ReadingPair {
  std::size_t elementwise, matrix;
};

std::vector<ReadingPair> reading_pairs(const std::vector<records::Series>& series,
                                       const std::vector<std::size_t>& members) {
  std::vector<ReadingPair> pairs;
  for (std::size_t a : members) {
    if (series[a].key.reading() != "elementwise") continue;
    for (std::size_t b : members) {
      if (series[b].key.reading() != "matrix") continue;
      records::SeriesKey ka = series[a].key, kb = series[b].key;
      ka.activation = kb.activation;  // the two readings differ in phi (x^p or the matrix power) by construction
      ka.activation.p = series[a].key.activation.p;
      if (ka == kb) pairs.push_back({a, b});
    }
  }
  return pairs;
}

// How far apart (a factor in N, 0.08 of the log2 axis's step either way) the two readings' points are drawn.
const double kReadingOffset = std::exp2(0.08);

void add_reading_comparison(const std::vector<records::Series>& series, const std::vector<ReadingPair>& pairs,
                            bool with_plots, std::vector<Block>& blocks, PendingFigures& pending) {
  blocks.push_back(Heading{3, "Elementwise vs matrix-power reading of (.)^p", ""});
  blocks.push_back(Paragraph{
      "THEORY.md: the proofs and the activation read (.)^p elementwise; read as a matrix power, ||S^p||_F grows "
      "like N^p. Both readings of the same configuration side by side:"});
  Table slopes;
  slopes.header = {"p",       "estimand",
                   "D, d",    "elementwise: slope [95% CI]",
                   "verdict", "matrix power: slope [95% CI]",
                   "verdict"};
  Table values;
  values.header = {"p", "N", "elementwise ± SE", "matrix power ± SE", "matrix / elementwise"};
  for (const ReadingPair& pair : pairs) {
    const records::Series& e = series[pair.elementwise];
    const records::Series& m = series[pair.matrix];
    slopes.rows.push_back({fmt::format("{}", e.key.activation.p), std::string(theory::term_of(e.key.estimand).word),
                           fmt::format("{}, {}", e.key.D, e.key.d), slope_text(e), verdict_word(e), slope_text(m),
                           verdict_word(m)});
    for (std::size_t i = 0; i < e.N.size(); ++i) {
      const auto j = std::find(m.N.begin(), m.N.end(), e.N[i]);
      if (j == m.N.end()) continue;
      const std::size_t k = static_cast<std::size_t>(j - m.N.begin());
      const std::string ratio = e.mean[i] > 0 && std::isfinite(m.mean[k]) ? format_number(m.mean[k] / e.mean[i]) : "-";
      values.rows.push_back({fmt::format("{}", e.key.activation.p), fmt::format("{}", e.N[i]),
                             format_estimate(e.mean[i], e.se[i]), format_estimate(m.mean[k], m.se[k]), ratio});
    }
  }
  blocks.push_back(std::move(slopes));
  if (with_plots) {
    for (const ReadingPair& pair : pairs) {
      const records::Series& e = series[pair.elementwise];
      const records::Series& m = series[pair.matrix];
      PlotSpec plot;
      plot.name = fmt::format("readings{:02}", pending.plots.size() + 1);
      plot.title = fmt::format("{} p={} {}, D={} d={}: elementwise vs matrix power", e.key.claim, e.key.activation.p,
                               theory::term_of(e.key.estimand).word, e.key.D, e.key.d);
      plot.x_label = "N (sequence length)";
      plot.y_label = estimand_symbol(e.key.estimand);
      for (const records::Series* reading : {&e, &m}) {
        // A reading's points and its fit share one colour. At p = 1 the two readings are one map and their
        // points (nearly) coincide: the elementwise points are drawn a little left of their N, the matrix power's a
        // little right and hollow, so that neither hides the other (the fits stay where they are).
        const int colour = reading == &e ? 0 : 1;
        plot.curves.push_back(
            estimate_curve(*reading, fmt::format("{} reading, 95% CI", reading->key.reading().value_or("?"))));
        plot.curves.back().colour = colour;
        plot.curves.back().variant = colour;
        for (double& x : plot.curves.back().x) x *= reading == &e ? 1 / kReadingOffset : kReadingOffset;
        if (reading->slope && reading->intercept) {
          plot.curves.push_back(power_law(*reading, *reading->intercept, *reading->slope,
                                          fmt::format("fit, slope {}", format_number(*reading->slope)),
                                          CurveStyle::line));
          plot.curves.back().colour = colour;
        }
      }
      pending.add(std::move(plot),
                  fmt::format("Both readings of p = {} on one log-log plot, with their fitted lines. The points "
                              "are drawn a little apart so that equal values stay visible (at p = 1 the readings are "
                              "the same map): elementwise (filled) at N / {:.3f}, matrix power (hollow) at N x {:.3f}.",
                              e.key.activation.p, kReadingOffset, kReadingOffset),
                  blocks);
    }
  }
  blocks.push_back(std::move(values));
}

// C1 and C2 as `attncheck bounds --json` checked them: exact norms of every family against Theorem 4.1's bounds.
struct ExactBounds {
  fs::path file;
  long long N = 0, trials = 0;
  std::uint64_t seed = 0;
  std::string c1, c2;  // verdict words
  Table families;
};

std::string verdict_of(const records::detail::JsonFields& verdicts, const char* claim) {
  const std::string word = verdicts.text(claim);
  if (!records::verdict_from_word(word)) verdicts.fail(fmt::format("\"{}\" = \"{}\" is not a verdict", claim, word));
  return word;
}

std::optional<ExactBounds> read_exact_bounds(const fs::path& folder) {
  const fs::path file = folder / kBoundsName;
  std::error_code error;
  if (!fs::exists(file, error)) return std::nullopt;
  const nlohmann::json document = records::read_json_file(file);  // JsonFields refers to it
  const records::detail::JsonFields fields(document, file.string());
  ExactBounds out;
  out.file = file;
  out.N = fields.integer("N");
  out.trials = fields.integer("trials");
  out.seed = static_cast<std::uint64_t>(fields.integer("seed"));
  const records::detail::JsonFields verdicts(fields.at("verdicts"), file.string() + " \"verdicts\"");
  out.c1 = verdict_of(verdicts, "C1");
  out.c2 = verdict_of(verdicts, "C2");
  out.families.header = {"family",
                         "trials",
                         "max ||A||_F / sqrt(N)",
                         "max ||dA/dS||_F / (2 sqrt(N))",
                         "max ||dA/dS||_F / (sqrt(N)/2)",
                         "within the bounds"};
  for (const auto& item : fields.array("families")) {
    const records::detail::JsonFields family(item, file.string() + " \"families\"");
    out.families.rows.push_back(
        {family.text("family"), fmt::format("{}", family.integer("trials")),
         format_number(family.number("ratio_softmax"), 6), format_number(family.number("ratio_grad_paper"), 6),
         format_number(family.number("ratio_grad_tight"), 6), family.boolean("holds") ? "yes" : "NO"});
  }
  return out;
}

void add_exact_bounds(const ExactBounds& bounds, std::vector<Block>& blocks) {
  blocks.push_back(Heading{2, "Claims C1 and C2: Theorem 4.1, checked exactly", "claim-C1"});
  blocks.push_back(Paragraph{fmt::format(
      "C1 ({}): {}. C2 ({}): {}. Exact closed forms of both norms on every family of N x N logits (no sampling "
      "error); a bound counts as reached (tight) when a family comes within {} of it. Verdicts: C1 {}, C2 {} (as "
      "stated, 2 sqrt(N); its exact sup sqrt(N)/2 is a quarter of that, and 1 in the last column).",
      records::find_claim("C1")->numbering(), records::find_claim("C1")->statement,
      records::find_claim("C2")->numbering(), records::find_claim("C2")->statement,
      format_number(records::kTightFraction), bounds.c1, bounds.c2)});
  blocks.push_back(Facts{{{"checked by", "attncheck bounds --json"},
                          {"file", bounds.file.string()},
                          {"N", fmt::format("{}", bounds.N)},
                          {"trials per family", fmt::format("{}", bounds.trials)},
                          {"seed", fmt::format("{}", bounds.seed)},
                          {"C1 verdict (basis exact)", bounds.c1},
                          {"C2 verdict (basis exact)", bounds.c2}}});
  blocks.push_back(bounds.families);
}

// The summary: how verdicts are reached, the tally of words, and a row per series.
void add_summary(const records::ResultsFolder& results, std::vector<Block>& blocks) {
  const std::vector<records::Series>& series = results.series;
  blocks.push_back(Heading{2, "Summary", "summary"});
  blocks.push_back(Paragraph{
      "Each series is a Monte Carlo estimate of an expected norm (C7: of a row sum or row mean) at several sequence "
      "lengths N (C8: of the score variance at several head dimensions d). Every verdict names its basis "
      "(THEORY.md, \"What a verdict is\"), proofs first: bound = a deterministic bound in N on every input, every "
      "sample checked against it; exact = a proved bound on the expectation or a closed form (THEORY.md, \"Bounds "
      "in N\"), with Monte Carlo confirming closed forms by z-scores; asymptotic-fit, only where no proof decides = "
      "violated when a test valid under heavy tails (order statistics) shows faster growth than claimed, consistent "
      "when the local exponent over the last two doublings of N, widened by its trend and the cross-check's "
      "disagreement, stays at or below the claim and is not still rising (consistent is not a proof), else "
      "inconclusive. The least-squares slope over all N with its 95% confidence interval "
      "(CI) is a finite-N diagnostic, shown with the drift of the Jensen ratio E||F|| / sqrt(E||F||^2); it never "
      "decides. Estimates are written as estimate ± standard error (SE). The papers' N(0, sigma) is read with sigma "
      "as the standard deviation."});
  std::map<std::string, std::size_t> counts;
  Table summary;
  summary.header = {"series",
                    "claim (v1 / v2)",
                    "configuration",
                    "estimand",
                    "D, d",
                    "claimed exponent + tolerance",
                    "verdict",
                    "basis",
                    "counted",
                    "finite-N fit (diagnostic): slope [95% CI]",
                    "fitted constant C (C x^slope)",
                    "Jensen ratio drift"};
  for (std::size_t i = 0; i < series.size(); ++i) {
    const records::Series& s = series[i];
    ++counts[verdict_word(s)];
    summary.rows.push_back(
        {fmt::format("{}", i + 1), claim_title(s.key.claim),
         s.key.scores == theory::ScoreModel::projected
             ? s.formula
             : fmt::format("{} (scores: {})", s.formula, theory::term_of(s.key.scores).word),
         std::string(theory::term_of(s.key.estimand).word),
         s.x_variable == "d" ? fmt::format("{}, swept", s.key.D) : fmt::format("{}, {}", s.key.D, s.key.d),
         claimed_text(s), verdict_word(s), basis_text(s), s.counts_for_exit ? "yes" : "no (reported only)",
         slope_text(s), fitted_constant_text(s), jensen_drift_text(s)});
    summary.row_anchors.push_back(series_anchor(i));
  }
  // Softmax whose largest sample reaches its bound sqrt(N): at this sigma_x the rows are one-hot, and the series
  // shows the bound rather than how it is approached.
  std::vector<std::string> saturated;
  for (std::size_t i = 0; i < series.size(); ++i) {
    const records::Series& s = series[i];
    if (s.key.activation.kind == theory::ActivationKind::softmax && s.key.estimand == theory::Estimand::value &&
        s.exact && s.exact->max_sample_over_bound && *s.exact->max_sample_over_bound >= 0.999) {
      saturated.push_back(fmt::format("{} (sigma_x = {:g}, largest sample {} of sqrt(N))", i + 1, s.key.sigma_x,
                                      format_number(*s.exact->max_sample_over_bound)));
    }
  }
  if (series.empty()) {
    blocks.push_back(Notice{fmt::format("{} lists no series.", (results.folder / "fits.json").string())});
  } else {
    std::string tally = fmt::format(
        "{} series: {} holds, {} tight, {} violated (settled); {} consistent (not a proof), {} inconclusive",
        series.size(), counts["holds"], counts["tight"], counts["violated"], counts["consistent"],
        counts["inconclusive"]);
    if (counts["not checked"] > 0)
      tally += fmt::format(", {} not checked (no claimed exponent)", counts["not checked"]);
    blocks.push_back(Paragraph{tally + "."});
    blocks.push_back(std::move(summary));
    if (!saturated.empty()) {
      blocks.push_back(Notice{fmt::format(
          "Softmax saturates in series {}: at these scores its rows are near one-hot, so ||A||_F sits at its bound "
          "sqrt(N) and the series shows the bound, not how it is approached; a smaller --sigma-x (0.3, say) shows "
          "the rows leaving uniform.",
          fmt::join(saturated, ", "))});
    }
  }
}

void add_provenance(const records::ResultsFolder& results, std::vector<Block>& blocks) {
  const records::Provenance& run = results.provenance;
  blocks.push_back(Heading{2, "Provenance", "provenance"});
  Facts provenance;
  provenance.items = {{"results folder", results.folder.string()},
                      {"attncheck version of the run", run.version},
                      {"date (UTC)", run.date},
                      {"machine", run.machine},
                      {"backend", run.backend},
                      {"threads", std::to_string(run.threads)},
                      {"run seed", std::to_string(run.run_seed)},
                      {"command", run.command},
                      {"wall time",
                       run.wall_seconds ? fmt::format("{} s", format_number(*run.wall_seconds)) : "not recorded"},
                      {"report written by", "attncheck " ATTNCHECK_VERSION}};
  blocks.push_back(std::move(provenance));
  if (results.runs.size() > 1) {
    blocks.push_back(Paragraph{
        fmt::format("{} runs wrote this folder (with --resume, or at once); the facts above are the last one's. Each:",
                    results.runs.size())});
    Table runs{{"run", "date (UTC)", "command", "backend", "threads", "run seed", "wall time", "version"}, {}, {}};
    for (std::size_t i = 0; i < results.runs.size(); ++i) {
      const records::Provenance& r = results.runs[i];
      runs.rows.push_back(
          {std::to_string(i + 1), r.date, r.command, r.backend, std::to_string(r.threads), std::to_string(r.run_seed),
           r.wall_seconds ? fmt::format("{} s", format_number(*r.wall_seconds)) : "not recorded", r.version});
    }
    blocks.push_back(std::move(runs));
  }
  if (!results.has_points_file) {
    blocks.push_back(Notice{fmt::format(
        "{} is missing: the report shows the fitted series only, without per-point samples, seeds, second moments "
        "and z-scores.",
        (results.folder / "points.jsonl").string())});
  }
}

// Claims in the order of THEORY.md's table (C1..C9, then others).
std::vector<std::string> claims_in_order(const std::vector<records::Series>& series) {
  std::vector<std::string> claims;
  for (const records::Series& s : series) {
    if (std::find(claims.begin(), claims.end(), s.key.claim) == claims.end()) claims.push_back(s.key.claim);
  }
  std::sort(claims.begin(), claims.end(), [](const std::string& a, const std::string& b) {
    return std::make_pair(!records::find_claim(a), a) < std::make_pair(!records::find_claim(b), b);
  });
  return claims;
}

std::string series_figure_caption(const records::Series& s, std::size_t i) {
  const auto a = compensating_exponent(s);
  const std::string exact_part =
      has_exact(s) && s.fit_of == "mean"
          ? "; black dashes: from the exact second moment (sqrt(E||F||^2), an upper bound on "
            "E||F|| by Jensen's inequality), circles on the right"
          : "";
  return fmt::format(
      "Series {} (verdict {}). {}Middle: the local exponent, the slope of log {} between neighbouring "
      "points, with its 95% band; it converges to the exponent as {} grows; green: the local exponent "
      "over the last doublings that the verdict reads, with its interval; dashed: the claimed exponent. "
      "Right: {} against {} on log-log axes with its 95% band, the finite-N fit (diagnostic, never "
      "decides) and the claimed slope through the points' centroid{}.",
      i + 1, verdict_with_basis(s),
      a ? fmt::format("Left: the estimates divided by {}^{} ({}), with 95% bands: flat means the "
                      "exponent is {}, a drift is the finite-{} bias. ",
                      x_name(s), format_number(a->first), a->second, format_number(a->first), x_name(s))
        : std::string(),
      fitted_symbol(s), x_name(s), fitted_symbol(s), x_name(s), exact_part);
}

// What the points' table is checked against: a closed form, a deterministic bound, or nothing.
Paragraph exact_values_note(const records::Series& s) {
  if (has_exact(s)) {
    return Paragraph{
        "Jensen ratio: E||.||_F / sqrt(E||.||_F^2) with the exact second moment; at most 1 (Jensen), and near 1 "
        "when the norm hardly fluctuates. The z column compares the estimated second moment with the exact one "
        "(beyond the alarm's limit, Bonferroni's over the folder's judged points, it would point at an error)."};
  }
  if (std::any_of(s.points.begin(), s.points.end(), [](const auto& p) { return p && p->sample_bound; })) {
    return Paragraph{
        "No closed form of the expectation is known; every input obeys a deterministic bound (THEORY.md, \"Bounds "
        "in N\"), so every sample is checked against it (a sample above it would be a failure of the tool)."};
  }
  return Paragraph{"No exact values are known for this series."};
}

// One series: its verdict and why, the diagnostic fit, its configuration, figure, points and provenance.
void add_series(const records::Series& s, std::size_t i, const records::Provenance& run, bool with_plots,
                std::vector<Block>& blocks, PendingFigures& pending) {
  blocks.push_back(Heading{3, fmt::format("Series {}: {}", i + 1, s.key.label()), series_anchor(i)});
  blocks.push_back(Paragraph{fmt::format("Verdict: {} (basis: {}{}). {}", verdict_word(s), basis_text(s),
                                         s.counts_for_exit ? "" : "; reported only, not counted for the exit code",
                                         verdict_reason(s))});
  if (s.finding) blocks.push_back(Paragraph{fmt::format("Finding: {}.", *s.finding)});
  if (s.slope) {
    blocks.push_back(
        Paragraph{fmt::format("Finite-N fit (diagnostic, never decides): slope {}; Jensen ratio "
                              "E||F|| / sqrt(E||F||^2) from the first to the last point: {}.",
                              slope_text(s), jensen_drift_text(s))});
  }
  blocks.push_back(configuration_facts(s));
  if (const auto miss = fit_miss_factor(s); miss && *miss > 2) {
    blocks.push_back(Notice{fmt::format(
        "the stored fit exp({}) {}^{} misses the estimates by a factor {} at their centroid; a least-squares "
        "line passes through it. Is the intercept a natural logarithm? The slope and verdict do not depend on it.",
        format_number(*s.intercept), x_name(s), format_number(*s.slope), format_number(*miss, 3))});
  }
  if (with_plots) pending.add(series_plot(s, i), series_figure_caption(s, i), blocks);
  Table points = points_table(s);
  points.folded_as =
      fmt::format("Points of series {}: {} rows (estimates, standard errors, exact values)", i + 1, points.rows.size());
  blocks.push_back(std::move(points));
  blocks.push_back(exact_values_note(s));
  if (std::any_of(s.points.begin(), s.points.end(), [](const auto& p) { return p && !p->se_reliable; })) {
    blocks.push_back(
        Notice{"the standard error of at least one point is marked unreliable (heavy tails: the "
               "batch-means and plain SE disagree); its interval may be too narrow."});
  }
  blocks.push_back(Paragraph{"Provenance of this series:"});
  blocks.push_back(series_provenance(s, run));
}

}  // namespace

void add_scaling_section(const records::ResultsFolder& results, bool with_plots, Document& document,
                         PendingFigures& pending) {
  const std::vector<records::Series>& series = results.series;
  auto& blocks = document.blocks;
  const std::optional<ExactBounds> bounds = read_exact_bounds(results.folder);
  add_summary(results, blocks);
  if (bounds) {
    blocks.push_back(
        Paragraph{fmt::format("Checked exactly beside the series (attncheck bounds, N = {}): C1 {}, C2 "
                              "{} (the section Claims C1 and C2 below).",
                              bounds->N, bounds->c1, bounds->c2)});
  }
  add_provenance(results, blocks);
  if (bounds) add_exact_bounds(*bounds, blocks);
  if (with_plots) {
    auto overlays = estimand_overlays(series);
    if (!overlays.empty()) {
      blocks.push_back(Heading{2, "All activations, one figure per estimand", "estimands"});
      for (auto& [estimand, overlay] : overlays) {
        pending.add_drawable(
            std::move(overlay),
            fmt::format("{} of every series of the folder that has it, against N on log-log axes, with its 95% band: "
                        "sizes and slopes side by side (a parallel line grows at the same rate); the legend numbers "
                        "the series as below and gives its verdict{}",
                        theory::term_of(estimand).symbol,
                        estimand == theory::Estimand::value ? "; dashed, softmax's bound sqrt(N)" : ""),
            blocks);
      }
    }
  }
  // Series in file order within a claim.
  std::size_t claim_figures = 0, claim_overlays = 0;
  for (const std::string& claim : claims_in_order(series)) {
    blocks.push_back(Heading{2, "Claim " + claim_title(claim), "claim-" + claim});
    if (const auto statement = records::find_claim(claim)) {
      blocks.push_back(Paragraph{fmt::format("Statement: {}", statement->statement)});
    }
    std::vector<std::size_t> members;
    for (std::size_t i = 0; i < series.size(); ++i) {
      if (series[i].key.claim == claim) members.push_back(i);
    }
    if (with_plots) {
      if (auto overlay = claim_overlay(series, members, claim, fmt::format("overlay{:02}", ++claim_overlays))) {
        pending.add_drawable(std::move(*overlay),
                             fmt::format("Claim {}: every series of the folder on one figure, each divided by x^a "
                                         "(its claimed exponent, or its fitted slope without a claim), with its 95% "
                                         "band; the legend numbers the series as below and gives its verdict",
                                         claim),
                             blocks);
      }
    }
    if (const auto pairs = reading_pairs(series, members); !pairs.empty())
      add_reading_comparison(series, pairs, with_plots, blocks, pending);
    if (with_plots) {
      for (const auto& group : p_groups(series, members)) {
        auto figure = claim_figure(series, group, fmt::format("claim{:02}", ++claim_figures));
        if (!figure) continue;
        pending.add(std::move(*figure),
                    fmt::format("Claim {} side by side, one column per p: top, the estimates divided by "
                                "N^a (flat means exponent a); middle, the local exponent with its 95% band "
                                "and the claimed a (dashed); bottom, log-log with the fits. Each series' "
                                "own figure below says more.",
                                claim),
                    blocks);
      }
    }
    for (std::size_t i : members) add_series(series[i], i, results.provenance, with_plots, blocks, pending);
  }
}

}  // namespace attncheck::reports
