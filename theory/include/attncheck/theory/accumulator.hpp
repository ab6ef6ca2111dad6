#pragma once
// A running mean and its standard error over a stream of values: the arithmetic every engine and report shares
// (Monte Carlo samples, sentences of a probe, seeds of a training run).

#include <cstdint>

namespace attncheck::theory {

// Count, mean and sums of squared, cubed and fourth-power deviations (Welford and Pebay's one-pass updates;
// Chan et al. and Pebay for merging): merging the accumulators of two shards gives the accumulator of the
// concatenated stream, up to rounding.
class Accumulator {
 public:
  void add(double x);
  void merge(const Accumulator& other);
  std::uint64_t count() const { return count_; }
  double mean() const { return mean_; }
  double m2() const { return m2_; }
  double m4() const { return m4_; }
  double variance() const;        // unbiased sample variance; 0 for fewer than 2 values
  double standard_error() const;  // sqrt(variance / count); infinity for fewer than 2 values
  // How many samples carry the variance: (sum of squared deviations)^2 / (sum of fourth powers), between 1 (one
  // sample carries all of it) and the count (all deviations equal); count / kurtosis. 0 without spread.
  double effective_samples() const;
  // Relative standard error of the sample variance itself, sqrt(1 / effective_samples - 1 / count), i.e.
  // sqrt((kurtosis - 1) / count): how well the variance behind the standard error is known. Infinity for fewer
  // than 2 values or without spread.
  double variance_relative_se() const;

 private:
  std::uint64_t count_ = 0;
  double mean_ = 0;
  double m2_ = 0, m3_ = 0, m4_ = 0;
};

}  // namespace attncheck::theory
