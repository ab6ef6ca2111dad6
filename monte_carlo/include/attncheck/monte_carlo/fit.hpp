#pragma once
// Log-log fits of the estimates against N (or d) and the verdicts of docs/THEORY.md ("What a verdict is").
//
// A claim E||F||_F = O(N^a) is asymptotic; at finite N a fitted slope is biased (the Jensen ratio
// E||F|| / sqrt(E||F||^2) still climbs, the diagonal terms pull the other way, some laws converge like
// 1/sqrt(log N)) and a sampling interval covers none of it. So a verdict rests on a basis and says which, in this
// order: `bound` (a deterministic bound in N on every input), `exact` (a proved bound on the expectation, or a
// closed form), `asymptotic-fit` (finite data: a violation shown by a test valid under heavy tails, or a claim
// consistent with the data up to the largest N, which is not a proof). The global fit over all N is kept as a
// diagnostic and never decides.

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
inline constexpr VerdictRule bound_tight{
    records::Basis::bound, records::Verdict::tight,
    "a deterministic upper bound of order N^a holds for every input, and a proved lower bound (on every input or on "
    "E||F||) has the exponent a too"};
inline constexpr VerdictRule bound_holds{records::Basis::bound, records::Verdict::holds,
                                         "a deterministic upper bound of order N^e with e <= a holds for every input"};
inline constexpr VerdictRule bound_violated{
    records::Basis::bound, records::Verdict::violated,
    "a deterministic lower bound of order N^e with e > a holds for every input"};
inline constexpr VerdictRule exact_tight{
    records::Basis::exact, records::Verdict::tight,
    "a proved upper bound on E||F|| and a proved lower bound both have the exponent a"};
inline constexpr VerdictRule exact_holds{
    records::Basis::exact, records::Verdict::holds,
    "a proved upper bound on E||F|| has an exponent e below a, or e = a without a sub-polynomial factor"};
inline constexpr VerdictRule exact_violated{records::Basis::exact, records::Verdict::violated,
                                            "a proved lower bound on E||F|| has an exponent above a"};
inline constexpr VerdictRule equality_holds{records::Basis::exact, records::Verdict::holds,
                                            "the exact value equals the claimed value at every point"};
inline constexpr VerdictRule equality_violated{records::Basis::exact, records::Verdict::violated,
                                               "the exact value differs from the claimed value"};
inline constexpr VerdictRule fit_violated{
    records::Basis::asymptotic_fit, records::Verdict::violated,
    "a lower confidence bound on E||F|| at the largest N (from order statistics, valid for any tail) over an upper "
    "bound at a smaller N exceeds the ratio of the two N to the power a + tolerance, at a stated level"};
inline constexpr VerdictRule fit_consistent{
    records::Basis::asymptotic_fit, records::Verdict::consistent,
    "the local exponent's interval ends at or below a + tolerance, the local exponent is not still rising, and "
    "every point of its window has a reliable standard error: consistent with the claim up to the largest N, which "
    "is not a proof"};
inline constexpr VerdictRule fit_inconclusive{records::Basis::asymptotic_fit, records::Verdict::inconclusive,
                                              "otherwise; the verdict names the N or the samples that would settle it"};
}  // namespace rules
inline constexpr std::array<const VerdictRule*, 11> kVerdictRules{&rules::bound_tight,     &rules::bound_holds,
                                                                  &rules::bound_violated,  &rules::exact_tight,
                                                                  &rules::exact_holds,     &rules::exact_violated,
                                                                  &rules::equality_holds,  &rules::equality_violated,
                                                                  &rules::fit_violated,    &rules::fit_consistent,
                                                                  &rules::fit_inconclusive};

// Two-sided 95% normal quantile: the sampling part of the local exponent's interval.
inline constexpr double kZ95 = 1.959963984540054;
// The family-wise error of the alarm that Monte Carlo disagrees with a closed form (a failure of the tool): over
// all judged points of a results folder, Bonferroni's limit on |z| keeps chance alone below this.
inline constexpr double kAlarmFamilyLevel = 1e-3;
// The confidence level of the asymptotic fit's test of a violation (one-sided; half of its error goes to the
// order-statistics lower bound at the largest N, half to the upper bounds at the smaller N).
inline constexpr double kViolationTestLevel = 0.99;

// Bonferroni's limit on |z| for `judged` two-sided tests at family-wise error `level`: Phi^-1(1 - level / (2 m)).
double family_alarm_abs_z(int judged, double level = kAlarmFamilyLevel);

// How an exactly known quantity of a series grows in its swept variable x: quantity ~ constant x^exponent as
// x -> infinity, from the closed form.
using ExactLaw = records::ExactLaw;

// The proved statements a closed form implies: sqrt(E||F||^2) bounds E||F|| from above (Jensen), an expectation
// known itself is both bounds, a deterministic law bounds every sample.
std::vector<records::ProvedBound> bounds_of_law(const ExactLaw& law, const std::string& x_name = "N");

// What the proved bounds alone say of a claim of exponent a, before any data: the rule that decides, the bound
// that decides it, and for `tight` the lower bound that reaches a; none when no proof decides.
struct ProofDecision {
  const VerdictRule* rule = nullptr;
  records::ProvedBound decided_by;
  std::optional<records::ProvedBound> reaching_lower;
};
std::optional<ProofDecision> decide_by_proof(const std::vector<records::ProvedBound>& bounds, double a);

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
  std::optional<double> sample_max, sample_bound;  // the largest sample and the deterministic bound it obeys
  std::optional<double> sample_min, sample_lower_bound;
  // The fitted quantity's order-statistics lower confidence bound (at its one-sided level), and an exact upper
  // bound on it where a closed form gives one (sqrt(E||F||^2), or the expectation itself).
  std::optional<double> lower_bound, lower_bound_level;
  std::optional<double> exact_upper;
};

// The local exponent over one window of two doublings [x / 4, x].
struct WindowExponent {
  double first = 0, last = 0;
  double exponent = 0, se = 0;
};

// The local exponent over the largest x: the weighted least-squares slope of log y on log x over the window
// x >= x_max / 4 (the last two doublings), with its sampling SE from the points' standard errors. How much it may
// still move is read from the data, without assuming a rate of convergence: the slope over the two doublings
// before (the window ending at this one's first point) differs by the trend; the systematic error is the larger
// of the trend and the disagreement with the cross-check (set by decide). It is still rising, and settles nothing,
// when the last window is significantly above the one before, or when the exponents of every window climb
// significantly with log2 x (their weighted least-squares slope, per doubling, above 1.96 of its SE). The interval
// is exponent -+ (1.96 SE + systematic).
struct LocalExponent {
  std::vector<double> window;  // x of the points used
  double exponent = 0, se = 0;
  std::optional<double> previous;  // the window ending at this one's first point
  double previous_se = 0;
  std::vector<WindowExponent> windows;    // every window's exponent, in order of x
  std::optional<double> climb, climb_se;  // the windows' exponents against log2 x: slope per doubling, its SE
  bool rising = false;
  double trend = 0, disagreement = 0, systematic = 0;
  double lo = 0, hi = 0;
  std::vector<double> unreliable;  // x of window points whose standard error is not reliable
  std::string missing;             // why there is no interval; empty when there is one
  bool usable() const { return missing.empty() && unreliable.empty(); }
  void widen(double by_disagreement);  // sets disagreement, systematic and the interval
};
LocalExponent local_exponent(const std::vector<double>& x, const std::vector<double>& y, const std::vector<double>& se,
                             const std::vector<bool>& reliable);

// The asymptotic fit's test of a violation, valid under heavy tails: at the largest x with an order-statistics
// lower bound L on the fitted mean (valid for any distribution), and each smaller x in [x_large / 16, x_large / 2]
// with an upper bound U on it, the exponent log(L / U) / log(x_large / x_small) bounds the mean's growth over that
// range from below; the largest is kept. U is the closed form's (sqrt(E||F||^2) >= E||F||, or the expectation
// itself), else the estimate + z SE where that standard error is reliable, z Bonferroni's over those x. No upper
// bound on a mean holds for every distribution, so that half rests on a reliable standard error (or a closed form);
// the lower half rests on nothing. The range stops at four doublings because a Jensen ratio still climbing at
// small x makes E||F|| grow faster there than it will.
struct ViolationTest {
  double x_small = 0, x_large = 0;
  double upper_at_small = 0, lower_at_large = 0;
  bool upper_exact = false;
  double exponent_lower = 0;
  double level = 0;
  bool passed = false;
};
std::optional<ViolationTest> violation_test(const std::vector<EvidencePoint>& points, double boundary,
                                            double level = kViolationTestLevel);

struct SeriesClaim {
  std::optional<double> exponent;  // a; absent: no claim to decide (custom maps)
  double tolerance = 0.05;
  bool cross_check = true;  // the fitted quantity is a norm E||F||: Jensen's bias needs the cross-check
  bool equality = false;    // the claim is the value itself at every point (C8's Var(q . k) = d_k)
  std::string x_name = "N";
  // The limit on a judged |z| against a closed form; the caller sets Bonferroni's for all judged points of its
  // folder (family_alarm_abs_z), the default is this series' own.
  std::optional<double> alarm_abs_z;
};

struct Verdict {
  std::optional<records::Verdict> word;  // none without a claim
  std::optional<records::Basis> basis;
  const VerdictRule* rule = nullptr;
  std::string reason;               // the rule with this series' numbers
  std::optional<double> extend_to;  // inconclusive: the x that would settle it
  std::string to_settle;            // inconclusive: what would settle it, one short sentence (also in `reason`)
  std::optional<records::ProvedBound> decided_by;
  LocalExponent primary, cross_check;
  std::optional<ViolationTest> violation;
  // The Monte Carlo confirmation of a closed form: |z| over the points whose standard error is reliable.
  std::optional<double> exact_max_abs_z;
  double alarm_abs_z = 0;
  int exact_judged = 0, exact_unjudged = 0;
  std::vector<double> exact_disagrees_at;  // x where a judged |z| > alarm_abs_z: a failure of the tool
  // Deterministic bounds: the points checked, the largest sample / upper bound and the smallest sample / lower
  // bound, and where a sample is beyond one (a failure of the tool; also listed in exact_disagrees_at).
  int bound_checked = 0;
  std::optional<double> max_sample_over_bound, min_sample_over_lower_bound;
  std::vector<double> bound_exceeded_at, lower_bound_undercut_at;
};

// The verdict of one series: the proved bounds (and those `law` implies) first, then the asymptotic fit; see
// docs/THEORY.md.
Verdict decide(const std::vector<EvidencePoint>& points, const std::optional<ExactLaw>& law,
               const std::vector<records::ProvedBound>& bounds, const SeriesClaim& claim);

}  // namespace attncheck::monte_carlo
