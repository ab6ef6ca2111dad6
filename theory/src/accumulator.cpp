#include "attncheck/theory/accumulator.hpp"

#include <cmath>
#include <limits>

namespace attncheck::theory {

void Accumulator::add(double x) {
  const double n_before = static_cast<double>(count_);
  ++count_;
  const double n = static_cast<double>(count_);
  const double delta = x - mean_;
  const double delta_n = delta / n;
  const double delta_n_sq = delta_n * delta_n;
  const double term = delta * delta_n * n_before;
  mean_ += delta_n;
  m4_ += term * delta_n_sq * (n * n - 3 * n + 3) + 6 * delta_n_sq * m2_ - 4 * delta_n * m3_;
  m3_ += term * delta_n * (n - 2) - 3 * delta_n * m2_;
  m2_ += term;
}

void Accumulator::merge(const Accumulator& other) {
  if (other.count_ == 0) return;
  if (count_ == 0) {
    *this = other;
    return;
  }
  const double n_a = static_cast<double>(count_), n_b = static_cast<double>(other.count_);
  const double n = n_a + n_b;
  const double delta = other.mean_ - mean_;
  const double delta_sq = delta * delta;
  m4_ += other.m4_ + delta_sq * delta_sq * n_a * n_b * (n_a * n_a - n_a * n_b + n_b * n_b) / (n * n * n) +
         6 * delta_sq * (n_a * n_a * other.m2_ + n_b * n_b * m2_) / (n * n) +
         4 * delta * (n_a * other.m3_ - n_b * m3_) / n;
  m3_ +=
      other.m3_ + delta_sq * delta * n_a * n_b * (n_a - n_b) / (n * n) + 3 * delta * (n_a * other.m2_ - n_b * m2_) / n;
  mean_ += delta * n_b / n;
  m2_ += other.m2_ + delta_sq * n_a * n_b / n;
  count_ += other.count_;
}

double Accumulator::effective_samples() const { return m4_ > 0 ? m2_ * m2_ / m4_ : 0.0; }

double Accumulator::variance_relative_se() const {
  if (count_ < 2 || !(m2_ > 0)) return std::numeric_limits<double>::infinity();
  return std::sqrt(std::max(0.0, m4_ / (m2_ * m2_) - 1 / static_cast<double>(count_)));
}

double Accumulator::variance() const { return count_ < 2 ? 0.0 : m2_ / static_cast<double>(count_ - 1); }

double Accumulator::standard_error() const {
  if (count_ < 2) return std::numeric_limits<double>::infinity();
  return std::sqrt(variance() / static_cast<double>(count_));
}

}  // namespace attncheck::theory
