#include "attncheck/monte_carlo/statistics.hpp"

#include <boost/math/distributions/chi_squared.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <stdexcept>
#include <tuple>

namespace attncheck::monte_carlo {

std::uint64_t mean_lower_bound_needs(std::uint64_t n, double level) {
  if (n == 0) return 0;
  const double count = static_cast<double>(n);
  const double eps = std::sqrt(std::log(1 / (1 - level)) / (2 * count));
  return std::min<std::uint64_t>(n, static_cast<std::uint64_t>(std::floor(count * eps)) + 1);
}

double mean_lower_bound(std::uint64_t n, double sum, std::vector<double> largest, double level) {
  if (n == 0) return 0;
  const double count = static_cast<double>(n);
  const double eps = std::sqrt(std::log(1 / (1 - level)) / (2 * count));
  if (eps >= 1) return 0;
  // With the samples sorted from the largest down, Y_1 >= Y_2 >= ..., the integral of max(0, j/n - eps) over
  // [Y_(j+1), Y_j) sums by parts to sum_j Y_j (max(0, j/n - eps) - max(0, (j-1)/n - eps)): weight 0 up to
  // j0 - 1 = floor(n eps), then j0/n - eps for Y_j0, then 1/n for every smaller sample.
  const std::uint64_t j0 = static_cast<std::uint64_t>(std::floor(count * eps)) + 1;
  if (j0 > n) return 0;
  std::sort(largest.begin(), largest.end(), std::greater<>());
  if (largest.size() < j0) throw std::logic_error("mean_lower_bound: fewer of the largest samples than it needs");
  double dropped = 0;
  for (std::uint64_t j = 0; j < j0; ++j) dropped += largest[j];
  const double y_j0 = largest[j0 - 1];
  return std::max(0.0, (sum - dropped) / count + (static_cast<double>(j0) / count - eps) * y_j0);
}

LargestValues::LargestValues(std::uint64_t max_count, double level)
    : capacity_(static_cast<std::size_t>(mean_lower_bound_needs(max_count, level))) {}

void LargestValues::add(double x) {
  if (capacity_ == 0) return;
  if (heap_.size() < capacity_) {
    heap_.push_back(x);
    std::push_heap(heap_.begin(), heap_.end(), std::greater<>());
  } else if (x > heap_.front()) {
    std::pop_heap(heap_.begin(), heap_.end(), std::greater<>());
    heap_.back() = x;
    std::push_heap(heap_.begin(), heap_.end(), std::greater<>());
  }
}

BatchMeans::BatchMeans(int target_batches) : target_(std::max(target_batches, 2)) {}

void BatchMeans::add(double x) {
  if (batches_.empty() || batches_.back().count() == batch_size_) batches_.emplace_back();
  batches_.back().add(x);
  if (static_cast<int>(batches_.size()) > 2 * target_ && batches_.back().count() == batch_size_) {
    std::vector<Accumulator> merged;
    merged.reserve(batches_.size() / 2 + 1);
    for (std::size_t k = 0; k + 1 < batches_.size(); k += 2) {
      merged.push_back(batches_[k]);
      merged.back().merge(batches_[k + 1]);
    }
    if (batches_.size() % 2 == 1) merged.push_back(batches_.back());
    batches_ = std::move(merged);
    batch_size_ *= 2;
  }
}

int BatchMeans::full_batches() const {
  int full = 0;
  for (const auto& b : batches_) full += b.count() == batch_size_ ? 1 : 0;
  return full;
}

double BatchMeans::standard_error() const {
  Accumulator of_means;
  for (const auto& b : batches_) {
    if (b.count() == batch_size_) of_means.add(b.mean());
  }
  return of_means.standard_error();
}

bool BatchMeans::can_judge() const {
  // With batches of one sample the two estimates coincide and say nothing.
  return full_batches() >= 8 && batch_size_ >= 2;
}

bool BatchMeans::consistent_with(double plain_se, double level) const {
  const int b = full_batches();
  if (!can_judge()) return false;
  const double se = standard_error();
  if (!(plain_se > 0)) return se == 0;
  const double dof = b - 1;
  const boost::math::chi_squared_distribution<> law{dof};
  const double ratio_sq = (se / plain_se) * (se / plain_se) * dof;
  return ratio_sq >= boost::math::quantile(law, (1 - level) / 2) &&
         ratio_sq <= boost::math::quantile(law, (1 + level) / 2);
}

double BatchMeans::max_batch_variance_share() const {
  Accumulator all;
  for (const auto& b : batches_) all.merge(b);
  const double total = all.variance();
  if (!(total > 0)) return 0;
  double share = 0;
  for (std::size_t left_out = 0; left_out < batches_.size(); ++left_out) {
    if (batches_[left_out].count() != batch_size_) continue;
    Accumulator rest;
    for (std::size_t k = 0; k < batches_.size(); ++k) {
      if (k != left_out) rest.merge(batches_[k]);
    }
    share = std::max(share, 1 - rest.variance() / total);
  }
  return share;
}

MeanEstimate MeanTracker::estimate() const {
  MeanEstimate e;
  e.samples = all_.count();
  e.mean = all_.mean();
  e.plain_se = all_.standard_error();
  e.batch_se = batches_.standard_error();
  e.effective_samples = all_.effective_samples();
  e.variance_relative_se = all_.variance_relative_se();
  // A quantity that does not vary between samples (beyond the rounding of its sums, 1e-12 of its size) has an
  // exact mean: none of the checks below has anything to judge there.
  const bool constant = e.samples >= 2 && std::sqrt(all_.variance()) <= 1e-12 * std::abs(e.mean);
  // Below this size the fourth powers of the deviations underflow double precision: a variance of 0 there is an
  // underflow, not a constant, and none of the checks can see the spread.
  constexpr double kSmallestJudged = 1e-70;
  if (e.samples >= 2 && e.mean != 0 && std::abs(e.mean) < kSmallestJudged) {
    e.unreliable_because = "the values are below 1e-70: the powers of their spread underflow double precision";
  } else if (!constant) {
    if (!batches_.consistent_with(e.plain_se)) {
      e.unreliable_because = !batches_.can_judge() ? "too few samples to judge the standard error"
                                                   : "batch means disagree with the plain standard error";
    } else if (batches_.max_batch_variance_share() > 0.5) {
      e.unreliable_because = "one batch carries most of the variance";
    } else if (!(e.variance_relative_se <= kMaxVarianceRelativeSe)) {
      e.unreliable_because = "a few samples carry the variance (heavy tails)";
    }
  }
  e.se_reliable = e.unreliable_because == nullptr;
  e.se = e.se_reliable ? e.plain_se : std::max(e.plain_se, std::isfinite(e.batch_se) ? e.batch_se : e.plain_se);
  std::tie(e.ci_lo, e.ci_hi) = records::ci95_of(e.mean, e.se, e.samples);
  return e;
}

}  // namespace attncheck::monte_carlo
