#pragma once
// Mergeable running statistics and the uncertainty of a Monte Carlo mean.

#include <cstdint>
#include <vector>

namespace attncheck::monte_carlo {

// Count, mean and sum of squared deviations (Welford; Chan et al. for merging): merging the accumulators of
// two shards gives the accumulator of the concatenated stream, up to rounding.
class Accumulator {
 public:
  void add(double x);
  void merge(const Accumulator& other);
  std::uint64_t count() const { return count_; }
  double mean() const { return mean_; }
  double m2() const { return m2_; }
  double variance() const;        // unbiased sample variance; 0 for fewer than 2 values
  double standard_error() const;  // sqrt(variance / count); infinity for fewer than 2 values

 private:
  std::uint64_t count_ = 0;
  double mean_ = 0;
  double m2_ = 0;
};

// Two-sided Student-t quantile t_{dof, (1 + level)/2} (Boost.Math); dof may be fractional, <= 0 means normal.
double student_t_quantile(double dof, double level);

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
  double standard_error() const;  // from the full batches; infinity for fewer than 2 of them
  bool consistent_with(double plain_se, double level = 0.999) const;
  // Largest fraction of the total variance that disappears when one full batch is left out.
  double max_batch_variance_share() const;

 private:
  int target_;
  std::uint64_t batch_size_ = 1;
  std::vector<Accumulator> batches_;
};

// Everything reported about one Monte Carlo mean.
struct MeanEstimate {
  std::uint64_t samples = 0;
  double mean = 0;
  double se = 0;        // the standard error reported: the larger of plain and batch-means when unreliable
  double plain_se = 0;
  double batch_se = 0;  // infinity when there are too few batches
  double ci_lo = 0, ci_hi = 0;  // 95% Student-t interval with se
  bool se_reliable = true;
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
