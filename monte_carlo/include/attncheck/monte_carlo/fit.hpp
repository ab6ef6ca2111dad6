#pragma once
// Log-log fits of the estimates against N (or d) and the verdicts of docs/THEORY.md ("What a verdict is").
//
// A claim E||F||_F = O(N^a) is asymptotic; at finite N a fitted slope is biased (the Jensen ratio
// E||F|| / sqrt(E||F||^2) still climbs, the diagonal terms pull the other way) and a sampling interval covers
// neither. So a verdict rests on a basis and says which: `exact` (a closed form of E||F||^2, or of the expectation
// itself, whose exponent is computed) or `asymptotic-fit` (the local exponent over the largest N, widened by how
// much it still moves). The global fit over all N is kept as a diagnostic and never decides.

#include "attncheck/records/results_folder.hpp"
#include "attncheck/records/verdict.hpp"

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace attncheck::monte_carlo {

struct LogLogFit {
  double slope = 0, intercept = 0;  // log y = intercept + slope log x
  double slope_se = 0;
  double slope_ci_lo = 0, slope_ci_hi = 0;  // 95%
  int points = 0;
  double reduced_chi_sq = 0;  // residual scatter against the standard errors (1 when they explain it)
};

// Weighted least squares of log y on log x with weights 1 / (se/y)^2, the delta-method variance of log y.
// The slope's variance is the weighted formula scaled by max(1, reduced chi^2), so scatter the standard
// errors do not explain (curvature at small N) widens the interval instead of hiding; the quantile is Student
// t with points - 2 degrees of freedom (normal for 2 points, where there is no residual to judge).
// Points with y <= 0 or se <= 0 are left out. Needs >= 2 points left; std::nullopt otherwise.
// This is the `finite-N fit (diagnostic)` of a series.
std::optional<LogLogFit> fit_log_log(const std::vector<double>& x, const std::vector<double>& y,
                                     const std::vector<double>& se);

// A verdict word, its basis and the definition it applies, word for word as docs/THEORY.md states it
// (tests/monte_carlo/test_fit.cpp reads the notes and compares).
struct VerdictRule {
  records::Basis basis;
  records::Verdict word;
  std::string_view definition;
};
namespace rules {
inline constexpr VerdictRule exact_tight{
    records::Basis::exact, records::Verdict::tight,
    "the exponent e of the exact quantity as N -> infinity (computed from the closed form, not fitted) equals a"};
inline constexpr VerdictRule exact_holds{records::Basis::exact, records::Verdict::holds, "e is below a"};
inline constexpr VerdictRule bound_holds{
    records::Basis::exact, records::Verdict::holds,
    "a deterministic bound of order N^e with e <= a holds for every input (C9's facts 10-11), and every sample lies "
    "below it"};
inline constexpr VerdictRule exact_violated{
    records::Basis::exact, records::Verdict::violated,
    "e is above a and the exact quantity is the expectation itself, not the bound sqrt(E||F||^2)"};
inline constexpr VerdictRule equality_holds{records::Basis::exact, records::Verdict::holds,
                                            "the exact value equals the claimed value at every point"};
inline constexpr VerdictRule equality_violated{records::Basis::exact, records::Verdict::violated,
                                               "the exact value differs from the claimed value"};
inline constexpr VerdictRule fit_violated{
    records::Basis::asymptotic_fit, records::Verdict::violated,
    "the lower end of the interval is above a + tolerance, and so is the cross-check's"};
inline constexpr VerdictRule fit_tight{records::Basis::asymptotic_fit, records::Verdict::tight,
                                       "the interval contains a and is at most 4 x tolerance wide"};
inline constexpr VerdictRule fit_holds{records::Basis::asymptotic_fit, records::Verdict::holds,
                                       "the upper end of the interval is at most a + tolerance"};
inline constexpr VerdictRule fit_inconclusive{
    records::Basis::asymptotic_fit, records::Verdict::inconclusive,
    "otherwise, or when a point of the window has an unreliable standard error; the verdict names the N (or the "
    "samples) that would settle it"};
}  // namespace rules
inline constexpr std::array<const VerdictRule*, 10> kVerdictRules{&rules::exact_tight,    &rules::exact_holds,
                                                                  &rules::bound_holds,    &rules::exact_violated,
                                                                  &rules::equality_holds, &rules::equality_violated,
                                                                  &rules::fit_violated,   &rules::fit_tight,
                                                                  &rules::fit_holds,      &rules::fit_inconclusive};
// What happens when the only closed form is a bound that grows faster than the claim (docs/THEORY.md).
inline constexpr std::string_view kBoundSettlesNothing =
    "when e is above a and the exact quantity is the bound sqrt(E||F||^2), the bound settles nothing and the "
    "asymptotic fit decides";

// |z| above this, between a Monte Carlo estimate and its closed form, is a failure of the tool.
inline constexpr double kMaxExactAbsZ = 4.0;
// Two-sided 95% normal quantile: the sampling part of the local exponent's interval.
inline constexpr double kZ95 = 1.959963984540054;

// How an exactly known quantity of a series grows in its swept variable x: quantity ~ constant x^exponent as
// x -> infinity, from the closed form.
using ExactLaw = records::ExactLaw;

// One point of a series as the verdict reads it. NaN where a value is missing.
struct EvidencePoint {
  double x = 0;             // N (or d)
  double mean = 0, se = 0;  // estimate of the fitted quantity (E||F||, E[row sum], or E||F||^2)
  bool mean_reliable = false;
  double root_mean_sq = 0, root_mean_sq_se = 0;  // sqrt of the estimated E||F||^2 and its SE, for the cross-check
  bool sq_reliable = false;
  std::optional<double> z_exact;                   // Monte Carlo against the closed form at this point
  bool z_judged = false;                           // that z rests on a reliable standard error
  std::optional<double> exact_value;               // equality claims: the exact value ...
  std::optional<double> claimed_value;             // ... and the claimed one
  std::optional<double> sample_max, sample_bound;  // C9: the largest sample and the deterministic bound it obeys
};

// The local exponent over the largest x: the weighted least-squares slope of log y on log x over the window
// x >= x_max / 4 (the last two doublings), with its sampling SE from the points' standard errors, and the
// systematic error: the same slope over the previous window [x_s / 4, x_s] (x_s the window's first point: the two
// doublings before) differs by delta; if the local exponent converges like x^(-1/2) or faster, it moves by at
// most delta / (sqrt(r) - 1) more, r = x_max / x_s (4 on a doubling grid, where that is delta itself). The interval
// is exponent -+ (1.96 SE + systematic).
struct LocalExponent {
  std::vector<double> window;  // x of the points used
  double exponent = 0, se = 0;
  std::optional<double> previous;  // the window ending one point earlier
  double ratio = 0;                // r
  double systematic = 0;
  double lo = 0, hi = 0;
  std::vector<double> unreliable;  // x of window points whose standard error is not reliable
  std::string missing;             // why there is no interval; empty when there is one
  bool usable() const { return missing.empty() && unreliable.empty(); }
};
LocalExponent local_exponent(const std::vector<double>& x, const std::vector<double>& y, const std::vector<double>& se,
                             const std::vector<bool>& reliable);

struct SeriesClaim {
  std::optional<double> exponent;  // a; absent: no claim to decide (custom maps)
  double tolerance = 0.05;
  bool cross_check = true;  // the fitted quantity is a norm E||F||: Jensen's bias needs the cross-check
  bool equality = false;    // the claim is the value itself at every point (C8's Var(q . k) = d_k)
  std::string x_name = "N";
};

struct Verdict {
  std::optional<records::Verdict> word;  // none without a claim
  std::optional<records::Basis> basis;
  const VerdictRule* rule = nullptr;
  std::string reason;               // the rule with this series' numbers
  std::optional<double> extend_to;  // inconclusive: the x that would settle it
  LocalExponent primary, cross_check;
  // The Monte Carlo confirmation of a closed form: |z| over the points whose standard error is reliable.
  std::optional<double> exact_max_abs_z;
  int exact_judged = 0, exact_unjudged = 0;
  std::vector<double> exact_disagrees_at;  // x where a judged |z| > kMaxExactAbsZ: a failure of the tool
  // Deterministic bounds: the points checked, the largest sample / bound, and where a sample exceeds its bound
  // (a failure of the tool; it is also listed in exact_disagrees_at).
  int bound_checked = 0;
  std::optional<double> max_sample_over_bound;
  std::vector<double> bound_exceeded_at;
};

// The verdict of one series: exact where `law` decides, else the asymptotic fit; see docs/THEORY.md.
Verdict decide(const std::vector<EvidencePoint>& points, const std::optional<ExactLaw>& law, const SeriesClaim& claim);

}  // namespace attncheck::monte_carlo
