#pragma once
// Log-log least-squares fits of the estimates against N (or d) and the verdicts of THEORY.md
// ("What a verdict is").

#include <optional>
#include <string>
#include <vector>

namespace attncheck::monte_carlo {

struct LogLogFit {
  double slope = 0, intercept = 0;        // log y = intercept + slope log x
  double slope_se = 0;
  double slope_ci_lo = 0, slope_ci_hi = 0;  // 95%
  int points = 0;
  double reduced_chi_sq = 0;              // residual scatter against the standard errors (1 when they explain it)
};

// Weighted least squares of log y on log x with weights 1 / (se/y)^2, the delta-method variance of log y.
// The slope's variance is the weighted formula scaled by max(1, reduced chi^2), so scatter the standard
// errors do not explain (curvature at small N) widens the interval instead of hiding; the quantile is Student
// t with points - 2 degrees of freedom (normal for 2 points, where there is no residual to judge).
// Points with y <= 0 or se <= 0 are left out. Needs >= 2 points left; std::nullopt otherwise.
std::optional<LogLogFit> fit_log_log(const std::vector<double>& x, const std::vector<double>& y,
                                     const std::vector<double>& se);

// violated: the interval's lower end > claimed + tolerance (grows faster than claimed, whatever the width);
// tight: the interval contains the claimed exponent and is at most 4 * tolerance wide (the bound is attained);
// holds: the upper end <= claimed + tolerance (grows no faster than claimed);
// inconclusive: otherwise (too wide around the claim, or straddling claimed + tolerance).
std::string verdict(const LogLogFit& fit, double claimed, double tolerance);

}  // namespace attncheck::monte_carlo
