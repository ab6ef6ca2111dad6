#pragma once
// Mergeable running statistics and the uncertainty of a Monte Carlo mean.

#include "attncheck/records/point_statistics.hpp"
#include "attncheck/theory/accumulator.hpp"

#include <cstdint>
#include <vector>

namespace attncheck::monte_carlo {

// The samples' running mean and standard error, in the name the estimators below use.
using theory::Accumulator;

// Two-sided Student-t quantile t_{dof, (1 + level)/2}: the records' own, which their readers recompute intervals with.
using records::student_t_quantile;

// The same stream cut into consecutive batches, to judge whether the plain standard error can be trusted.
// Two checks, both needing only the mergeable per-batch accumulators:
// - batch-means SE vs plain SE: for i.i.d. light-tailed samples (B - 1) (batch SE / plain SE)^2 follows
//   chi2_{B-1}; outside its central band the samples are not behaving as the plain SE assumes;
// - dominance: the variance without one batch (1/B of the samples). If dropping a single batch removes more
//   than half of the variance, a few extreme samples carry the spread (heavy tails: p = 3 has E s^12 terms),
//   and the variance - hence the SE - is itself poorly determined. Batch-means alone cannot see this: one
//   outlier inflates both estimates alike.
// Batches double in size when there are more than 2 * target_batches of them, so any sample count works.
class BatchMeans {
 public:
  explicit BatchMeans(int target_batches = 16);
  void add(double x);
  int full_batches() const;
  // Enough batches of more than one sample for the checks below to say anything.
  bool can_judge() const;
  double standard_error() const;  // from the full batches; infinity for fewer than 2 of them
  bool consistent_with(double plain_se, double level = 0.999) const;
  // Largest fraction of the total variance that disappears when one full batch is left out.
  double max_batch_variance_share() const;

 private:
  int target_;
  std::uint64_t batch_size_ = 1;
  std::vector<Accumulator> batches_;
};

// A standard error is trusted when the variance it rests on is known to this relative standard error: a few
// samples carrying the variance (heavy tails) make the variance, hence the standard error, poorly determined.
inline constexpr double kMaxVarianceRelativeSe = 0.2;

// The one-sided confidence level of the order-statistics lower bound on a mean (mean_lower_bound): the
// asymptotic fit's test of a violation spends half of its 1% error on it (docs/THEORY.md, "What a verdict is").
inline constexpr double kMeanLowerBoundLevel = 0.995;

// How many of the largest samples mean_lower_bound reads at n samples: floor(n eps) + 1 with
// eps = sqrt(ln(1 / (1 - level)) / (2 n)), about 1.6 sqrt(n) at the default level.
std::uint64_t mean_lower_bound_needs(std::uint64_t n, double level = kMeanLowerBoundLevel);

// For samples X >= 0 of any distribution: with probability at least `level`, E X >= the value returned. The
// one-sided Dvoretzky-Kiefer-Wolfowitz inequality with Massart's constant gives F <= F_n + eps everywhere, so
// E X = integral of P(X > x) >= integral of max(0, #{X_i > x} / n - eps): the mean with the largest n eps samples
// left out (and the next one in part), divided by n. `sum` is the sum of all n samples, `largest` at least the
// mean_lower_bound_needs(n, level) largest of them, in any order. 0 when eps >= 1 (too few samples).
double mean_lower_bound(std::uint64_t n, double sum, std::vector<double> largest, double level = kMeanLowerBoundLevel);

// The largest values of a stream: as many as mean_lower_bound needs for any count up to `max_count`, so that the
// bound is exact at every count without keeping every sample.
class LargestValues {
 public:
  explicit LargestValues(std::uint64_t max_count = 0, double level = kMeanLowerBoundLevel);
  void add(double x);
  const std::vector<double>& values() const { return heap_; }  // in heap order

 private:
  std::size_t capacity_ = 0;
  std::vector<double> heap_;  // a min-heap: its top is the smallest value kept
};

// Everything reported about one Monte Carlo mean.
struct MeanEstimate {
  std::uint64_t samples = 0;
  double mean = 0;
  double se = 0;  // the standard error reported: the larger of plain and batch-means when unreliable
  double plain_se = 0;
  double batch_se = 0;              // infinity when there are too few batches
  double ci_lo = 0, ci_hi = 0;      // 95% Student-t interval with se
  double effective_samples = 0;     // Accumulator::effective_samples
  double variance_relative_se = 0;  // Accumulator::variance_relative_se
  // Batch means agree with the plain SE, no batch carries more than half of the variance, and the variance is
  // known to kMaxVarianceRelativeSe.
  bool se_reliable = true;
  const char* unreliable_because = nullptr;  // the first check that failed, in words
};

// Both statistics of one stream of per-sample values.
class MeanTracker {
 public:
  void add(double x) {
    all_.add(x);
    batches_.add(x);
  }
  const Accumulator& accumulator() const { return all_; }
  MeanEstimate estimate() const;

 private:
  Accumulator all_;
  BatchMeans batches_;
};

}  // namespace attncheck::monte_carlo
