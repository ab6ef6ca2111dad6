#include "attncheck/monte_carlo/fit.hpp"

#include "attncheck/monte_carlo/statistics.hpp"

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

std::string verdict(const LogLogFit& fit, double claimed, double tolerance) {
  if (fit.slope_ci_lo > claimed + tolerance) return "violated";
  if (fit.slope_ci_lo <= claimed && claimed <= fit.slope_ci_hi) {
    // An interval this wide contains almost any exponent: it says nothing about tightness.
    return fit.slope_ci_hi - fit.slope_ci_lo <= 4 * tolerance ? "tight" : "inconclusive";
  }
  if (fit.slope_ci_hi <= claimed + tolerance) return "holds";
  return "inconclusive";
}

}  // namespace attncheck::monte_carlo
