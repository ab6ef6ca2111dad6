#include "attncheck/records/point_statistics.hpp"

#include "attncheck/records/results_folder.hpp"
#include "attncheck/theory/vocabulary.hpp"

#include <boost/math/distributions/normal.hpp>
#include <boost/math/distributions/students_t.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace attncheck::records {

double student_t_quantile(double dof, double level) {
  const double upper = (1 + level) / 2;
  if (!(dof > 0) || std::isinf(dof)) return boost::math::quantile(boost::math::normal_distribution<>{}, upper);
  return boost::math::quantile(boost::math::students_t_distribution<>{dof}, upper);
}

std::pair<double, double> ci95_of(double mean, double se, std::uint64_t samples) {
  if (samples < 2) return {-std::numeric_limits<double>::infinity(), std::numeric_limits<double>::infinity()};
  const double t = student_t_quantile(static_cast<double>(samples - 1), 0.95);
  return {mean - t * se, mean + t * se};
}

std::optional<double> z_score(double estimate, double se, double exact) {
  const double floor = 1e-12 * std::max(std::abs(exact), std::abs(estimate));
  const double used = std::max(se, floor);
  if (!(used > 0)) return estimate == exact ? std::optional<double>(0.0) : std::nullopt;
  return (estimate - exact) / used;
}

namespace {

// The JSON form of a double is exact; what is left is the rounding of recomputing a value (a few ulps) and of
// Boost's t quantile in another build.
constexpr double kTolerance = 1e-9;

// A record holds null (NaN once read) for every value its writer had no finite value for.
std::optional<double> finite(double x) { return std::isfinite(x) ? std::optional<double>(x) : std::nullopt; }
std::optional<double> finite(const std::optional<double>& x) { return x ? finite(*x) : std::nullopt; }

std::string shown(const std::optional<double>& x) { return x ? fmt::format("{}", *x) : std::string("null"); }
std::string shown(double x) { return shown(finite(x)); }

// Equal to the tolerance, relative to the larger of the two and of `scale` (the size of what they were computed
// from, where that is larger than they are); subnormal numbers keep fewer digits, so below the smallest normal
// number only the size counts.
bool close(double a, double b, double scale = 0) {
  return std::abs(a - b) <=
         kTolerance * std::max({std::abs(a), std::abs(b), std::abs(scale)}) + std::numeric_limits<double>::min();
}

// A field against its value recomputed from the record's own moments. Earlier writers are compared only where
// both are numbers: which of them they left null is not known.
std::optional<std::string> derived_mismatch(const char* key, const std::optional<double>& recorded,
                                            const std::optional<double>& expected, const char* formula,
                                            const std::string& inputs, bool versioned) {
  if (recorded && expected) {
    if (close(*recorded, *expected)) return std::nullopt;
  } else if (!versioned || recorded.has_value() == expected.has_value()) {
    return std::nullopt;
  }
  return fmt::format("\"{}\" = {}, but {} is {} with {}", key, shown(recorded), formula, shown(expected), inputs);
}

std::optional<std::string> interval_mismatch(const char* key, double lo, double hi, double mean, double se,
                                             long long samples, const char* mean_key, const char* se_key,
                                             bool versioned) {
  const auto mismatch = [&](const std::string& expected) {
    return fmt::format("\"{}\" = [{}, {}], but \"{}\" = {}, \"{}\" = {} and \"samples\" = {} give {}", key, shown(lo),
                       shown(hi), mean_key, shown(mean), se_key, shown(se), samples, expected);
  };
  if (!std::isfinite(mean)) {
    if (std::isfinite(lo) || std::isfinite(hi)) return mismatch("no interval (null, null)");
    return std::nullopt;
  }
  if (versioned) {
    const auto [want_lo, want_hi] = ci95_of(mean, se, static_cast<std::uint64_t>(samples));
    const double scale = std::abs(mean) + std::abs(want_hi - want_lo) / 2;
    const auto agrees = [&](double got, double want) {
      return std::isfinite(want) ? std::isfinite(got) && close(got, want, scale) : !std::isfinite(got);
    };
    if (agrees(lo, want_lo) && agrees(hi, want_hi)) return std::nullopt;
    return mismatch(fmt::format("[{}, {}] (mean -+ t_{{0.975, samples - 1}} se)", shown(want_lo), shown(want_hi)));
  }
  // Earlier writers: centred on the mean, between the normal's and Student's t half-width (to their rounding).
  if (!std::isfinite(se) || !std::isfinite(lo) || !std::isfinite(hi) || samples < 2) return std::nullopt;
  const double below = mean - lo, above = hi - mean, half = below / 2 + above / 2;
  const double t_low = student_t_quantile(0, 0.95) * (1 - 1e-3);
  const double t_high = student_t_quantile(static_cast<double>(samples - 1), 0.95) * (1 + 1e-3);
  const bool centred = close(below, above, mean);
  const bool width = se > 0 ? half >= t_low * se && half <= t_high * se : close(half, 0, mean);
  if (centred && width) return std::nullopt;
  return mismatch(fmt::format("an interval centred on the mean, {} to {} standard errors each side", t_low, t_high));
}

std::optional<std::string> spread_mismatch(const char* effective_key, double effective, const char* relative_key,
                                           double relative, long long samples) {
  // Both come from the sums of squared and fourth-power deviations: effective = m2^2 / m4 and relative =
  // sqrt(max(0, m4 / m2^2 - 1 / samples)), so they fix the sample count wherever the samples spread.
  if (!(effective > 0) || !std::isfinite(effective) || !std::isfinite(relative) || samples < 2) return std::nullopt;
  const double expected_sq = std::max(0.0, 1 / effective - 1 / static_cast<double>(samples));
  if (std::abs(relative * relative - expected_sq) <= kTolerance / effective) return std::nullopt;
  return fmt::format("\"{}\" = {}, but \"{}\" = {} and \"samples\" = {} give {}", relative_key, relative, effective_key,
                     effective, samples, std::sqrt(expected_sq));
}

}  // namespace

std::optional<std::string> point_record_inconsistency(const PointRecord& r, bool versioned) {
  std::optional<std::string> found;
  const auto check = [&](std::optional<std::string> mismatch) {
    if (!found && mismatch) found = std::move(mismatch);
  };
  const bool norm = theory::term_of(r.key.estimand).norm;

  // The moments themselves: a mean of squares is never below the square of the mean of the same samples, and a
  // sample that is not finite leaves neither finite.
  if (versioned) {
    if (!std::isfinite(r.mean) && std::isfinite(r.mean_sq)) {
      check(
          fmt::format("\"mean\" is null, but \"mean_sq\" = {}: a sample that is not finite leaves its square "
                      "not finite",
                      r.mean_sq));
    }
    if (std::isfinite(r.mean) && std::isfinite(r.mean_sq) &&
        !(r.mean * r.mean <= r.mean_sq * (1 + kTolerance) + std::numeric_limits<double>::min())) {
      check(fmt::format("\"mean\" = {} squared exceeds \"mean_sq\" = {}, the mean of the same samples' squares", r.mean,
                        r.mean_sq));
    }
  }
  if (r.mean_lower_bound && std::isfinite(r.mean) && !(*r.mean_lower_bound <= r.mean + kTolerance * r.mean)) {
    check(fmt::format("\"mean_lower_bound\" = {} exceeds \"mean\" = {}, the mean of the samples it bounds",
                      *r.mean_lower_bound, r.mean));
  }

  // The sample count, through the spread of the variance.
  check(spread_mismatch("effective_samples", r.effective_samples, "variance_relative_se", r.variance_relative_se,
                        r.samples));
  check(spread_mismatch("effective_samples_sq", r.effective_samples_sq, "variance_relative_se_sq",
                        r.variance_relative_se_sq, r.samples));

  // The standard error reported: the plain one, or where it is not reliable the larger of it and the batch means'.
  if (r.se_mean_reliable && std::isfinite(r.se_plain)) {
    const double batch = std::isfinite(r.se_batch_means) ? r.se_batch_means : r.se_plain;
    const double expected = *r.se_mean_reliable ? r.se_plain : std::max(r.se_plain, batch);
    if (!std::isfinite(r.se) || !close(r.se, expected)) {
      check(
          fmt::format("\"se\" = {}, but \"se_plain\" = {}, \"se_batch_means\" = {} and \"se_mean_reliable\" = {} "
                      "give {}",
                      shown(r.se), r.se_plain, shown(r.se_batch_means), *r.se_mean_reliable, expected));
    }
  }
  if (r.se_sq_floor && std::isfinite(r.se_sq) && !(r.se_sq >= *r.se_sq_floor * (1 - kTolerance))) {
    check(fmt::format("\"se_sq\" = {} is below \"se_sq_floor\" = {}, the least the exact variance allows", r.se_sq,
                      *r.se_sq_floor));
  }

  check(interval_mismatch("ci95", r.ci95_lo, r.ci95_hi, r.mean, r.se, r.samples, "mean", "se", versioned));
  check(interval_mismatch("ci95_sq", r.ci95_sq_lo, r.ci95_sq_hi, r.mean_sq, r.se_sq, r.samples, "mean_sq", "se_sq",
                          versioned));

  const auto z_of = [](double estimate, double se, const std::optional<double>& exact) {
    return finite(exact) ? finite(z_score(estimate, se, *exact)) : std::nullopt;
  };
  check(derived_mismatch("z_exact_sq", finite(r.z_exact_sq), z_of(r.mean_sq, r.se_sq, r.exact_sq),
                         "(\"mean_sq\" - \"exact_sq\") / \"se_sq\"",
                         fmt::format("\"mean_sq\" = {}, \"se_sq\" = {}, \"exact_sq\" = {}", shown(r.mean_sq),
                                     shown(r.se_sq), shown(r.exact_sq)),
                         versioned));
  check(derived_mismatch("z_exact_mean", finite(r.z_exact_mean), z_of(r.mean, r.se, r.exact_mean),
                         "(\"mean\" - \"exact_mean\") / \"se\"",
                         fmt::format("\"mean\" = {}, \"se\" = {}, \"exact_mean\" = {}", shown(r.mean), shown(r.se),
                                     shown(r.exact_mean)),
                         versioned));

  // Jensen's bound and ratios, for norms.
  const std::optional<double> exact_sq = finite(r.exact_sq);
  check(derived_mismatch("jensen_bound", finite(r.jensen_bound),
                         norm && exact_sq ? finite(std::sqrt(*exact_sq)) : std::nullopt, "sqrt(\"exact_sq\")",
                         fmt::format("\"exact_sq\" = {}", shown(exact_sq)), versioned));
  check(derived_mismatch("jensen_ratio", finite(r.jensen_ratio),
                         norm && exact_sq && *exact_sq > 0 ? finite(r.mean / std::sqrt(*exact_sq)) : std::nullopt,
                         "\"mean\" / sqrt(\"exact_sq\")",
                         fmt::format("\"mean\" = {}, \"exact_sq\" = {}", shown(r.mean), shown(exact_sq)), versioned));
  check(derived_mismatch("jensen_ratio_estimated", finite(r.jensen_ratio_estimated),
                         norm && r.mean_sq > 0 ? finite(r.mean / std::sqrt(r.mean_sq)) : std::nullopt,
                         "\"mean\" / sqrt(\"mean_sq\")",
                         fmt::format("\"mean\" = {}, \"mean_sq\" = {}", shown(r.mean), shown(r.mean_sq)), versioned));
  return found;
}

}  // namespace attncheck::records
