#pragma once
// Draws samples of one sweep point until the sampling policy is met and summarizes every estimand.

#include "attncheck/monte_carlo/backend.hpp"
#include "attncheck/monte_carlo/statistics.hpp"

#include <array>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

namespace attncheck::monte_carlo {

struct SamplingPolicy {
  std::optional<std::uint64_t> fixed;  // --samples M: exactly M samples
  double rel_se = 0.01;        // --samples auto: until se/|mean| <= rel_se, with a reliable se, for every estimand ...
  bool judge_squares = false;  // ... of E||F||^2 instead of E||F|| (when the fit uses the squares, C8)
  // ... and, unless a proof decides every estimand's verdict (so that only the numbers' precision matters), a
  // reliable standard error: the asymptotic fit needs one at every point it reads.
  bool require_reliable = true;
  std::uint64_t min_samples = 64;      // ... but never judged on fewer samples than this
  std::uint64_t max_samples = 100000;  // ... or this many samples
  // ... or this much wall time per point: the clock is read after every evaluation of at most 50 ms of
  // samples (one sample when one takes longer), from the second sample on (a standard error needs two), so a
  // point overruns it by at most one such evaluation.
  double max_seconds = std::numeric_limits<double>::infinity();
};

// Per estimand: statistics of ||F|| and of ||F||^2. For score-var the per-sample value is the mean square
// of the off-diagonal scores m; it is tracked as ||F|| = sqrt(m), so that "mean_sq" estimates Var(s_ij).
struct PointOutcome {
  std::array<MeanTracker, kEstimandCount> norm, norm_sq;
  // The largest and the smallest sample of each estimand (deterministic bounds check every sample), and the
  // largest values the order-statistics lower bound on the mean needs (statistics.hpp, mean_lower_bound).
  std::array<double, kEstimandCount> largest{}, smallest{};
  std::array<LargestValues, kEstimandCount> top;
  std::uint64_t samples = 0;
  std::string stopped_by;  // "samples" | "rel-se" | "max-samples" | "max-seconds"
  double wall_seconds = 0;
};

// progress(samples done, samples planned or 0 when open-ended) is called after each evaluation.
PointOutcome run_point(Backend& backend, const SweepPoint& point, const std::vector<Estimand>& estimands,
                       const SamplingPolicy& policy,
                       const std::function<void(std::uint64_t, std::uint64_t)>& progress = {});

}  // namespace attncheck::monte_carlo
