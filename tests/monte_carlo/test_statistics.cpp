#include "attncheck/monte_carlo/statistics.hpp"
#include "attncheck/streams/random_stream.hpp"

#include <catch2/catch.hpp>
#include <rapidcheck/catch.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

using namespace attncheck::monte_carlo;
using namespace attncheck::streams;

namespace {
Accumulator accumulate(const std::vector<double>& xs, std::size_t begin, std::size_t end) {
  Accumulator a;
  for (std::size_t k = begin; k < end; ++k) a.add(xs[k]);
  return a;
}
bool close(double a, double b, double rel) {
  return std::abs(a - b) <= rel * std::max({std::abs(a), std::abs(b), 1e-300});
}
}  // namespace

TEST_CASE("accumulator gives the textbook mean, variance and standard error") {
  Accumulator a;
  for (double x : {2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0}) a.add(x);
  CHECK(a.count() == 8);
  CHECK(a.mean() == Approx(5.0).epsilon(1e-15));
  CHECK(a.variance() == Approx(32.0 / 7).epsilon(1e-14));
  CHECK(a.standard_error() == Approx(std::sqrt(32.0 / 7 / 8)).epsilon(1e-14));
  CHECK(std::isinf(Accumulator{}.standard_error()));
}

TEST_CASE("fourth moments: how many samples carry the variance") {
  // Nine zeros and a one: deviations -0.1 (nine times) and 0.9, so sum d^2 = 0.9 and sum d^4 = 0.6570.
  Accumulator one_carries;
  for (int k = 0; k < 10; ++k) one_carries.add(k == 7 ? 1.0 : 0.0);
  CHECK(one_carries.m4() == Approx(9 * 1e-4 + 0.6561).epsilon(1e-13));
  CHECK(one_carries.effective_samples() == Approx(0.81 / 0.657).epsilon(1e-12));
  // Equal deviations (+-1 alternately): every sample carries the same share, kurtosis 1, variance exactly known.
  Accumulator even;
  for (int k = 0; k < 100; ++k) even.add(k % 2 == 0 ? 1.0 : -1.0);
  CHECK(even.effective_samples() == Approx(100).epsilon(1e-12));
  CHECK(even.variance_relative_se() == Approx(0).margin(1e-7));
  // Normal samples: kurtosis 3, so the variance is known to sqrt(2 / n) (8 standard errors of that estimate).
  PhiloxStream stream(11, 0);
  Accumulator normal;
  for (int k = 0; k < 20000; ++k) normal.add(stream.next_normal_pair()[0]);
  CHECK(normal.variance_relative_se() == Approx(std::sqrt(2.0 / 20000)).epsilon(0.1));
  CHECK(std::isinf(Accumulator{}.variance_relative_se()));
}

TEST_CASE("merging the accumulators of two shards equals one pass over the whole stream") {
  rc::prop("merge(shard A, shard B) == one run", [](const std::vector<int>& raw, unsigned cut_seed) {
    std::vector<double> xs;
    for (int v : raw) xs.push_back(static_cast<double>(v % 100000) * 0.37 + 1e3);
    const std::size_t cut = xs.empty() ? 0 : cut_seed % (xs.size() + 1);
    const Accumulator whole = accumulate(xs, 0, xs.size());
    Accumulator merged = accumulate(xs, 0, cut);
    merged.merge(accumulate(xs, cut, xs.size()));
    RC_ASSERT(merged.count() == whole.count());
    RC_ASSERT(close(merged.mean(), whole.mean(), 1e-12));
    RC_ASSERT(std::abs(merged.m2() - whole.m2()) <= 1e-9 * std::max(whole.m2(), 1.0));
    RC_ASSERT(std::abs(merged.m4() - whole.m4()) <= 1e-8 * std::max(whole.m4(), 1.0));
  });
}

TEST_CASE("Student-t quantiles come from Boost.Math") {
  CHECK(student_t_quantile(10, 0.95) == Approx(2.228138851986274).epsilon(1e-9));
  CHECK(student_t_quantile(1, 0.95) == Approx(12.706204736174707).epsilon(1e-9));
  CHECK(student_t_quantile(0, 0.95) == Approx(1.959963984540054).epsilon(1e-12));  // normal limit
}

TEST_CASE("batch means trust light tails and flag a single dominating sample") {
  PhiloxStream stream(7, 0);
  const auto normal = [&stream](int) { return stream.next_normal_pair()[0]; };
  int gen = 0;
  MeanTracker light;
  for (int k = 0; k < 2000; ++k) light.add(normal(gen));
  const MeanEstimate e = light.estimate();
  CHECK(e.se_reliable);
  CHECK(e.se == e.plain_se);
  CHECK(e.batch_se / e.plain_se == Approx(1.0).margin(0.5));
  // 95% interval is mean +- t_{1999} se.
  CHECK((e.ci_hi - e.mean) / e.se == Approx(student_t_quantile(1999, 0.95)).epsilon(1e-12));

  MeanTracker heavy;
  for (int k = 0; k < 2000; ++k) heavy.add(k == 1234 ? 1e4 : normal(gen));
  const MeanEstimate h = heavy.estimate();
  CHECK_FALSE(h.se_reliable);
  CHECK(h.se >= h.plain_se);

  MeanTracker few;
  for (int k = 0; k < 10; ++k) few.add(normal(gen));
  CHECK_FALSE(few.estimate().se_reliable);  // too few batches to judge: not claimed reliable
}

TEST_CASE("a quantity constant up to rounding has a reliable (zero) standard error") {
  // ||dF/dS||_F of a linear map is c N every sample; only the rounding of its sums varies.
  MeanTracker constant;
  for (int k = 0; k < 100; ++k) constant.add(512.0 * (1 + (k % 3 - 1) * 1e-16));
  CHECK(constant.estimate().se_reliable);
  MeanTracker once;
  once.add(512.0);
  CHECK_FALSE(once.estimate().se_reliable);  // one sample says nothing about its spread
}

TEST_CASE("a heavy tail is caught by the fourth moment") {
  // Pareto tail index 2.5: finite variance, infinite fourth moment; the few largest of two thousand draws carry
  // most of the sample variance, so the variance (and the standard error) is poorly determined.
  PhiloxStream stream(19, 0);
  MeanTracker pareto;
  for (int k = 0; k < 2000; ++k) {
    const double u = stream.next_normal_pair()[0];
    const double uniform = 0.5 * std::erfc(-u / std::sqrt(2.0));  // Phi(u): uniform on (0, 1)
    pareto.add(std::pow(1 - uniform, -1 / 2.5));
  }
  const MeanEstimate e = pareto.estimate();
  INFO("effective samples " << e.effective_samples << ", variance known to " << e.variance_relative_se);
  CHECK(e.variance_relative_se > kMaxVarianceRelativeSe);
  CHECK_FALSE(e.se_reliable);
}

TEST_CASE("batch means keep a bounded number of batches of equal size") {
  BatchMeans b(16);
  for (int k = 0; k < 1000; ++k) b.add(k % 7);
  CHECK(b.full_batches() >= 16);
  CHECK(b.full_batches() <= 33);
}

namespace {

// The order-statistics bound straight from its definition: the integral over x >= 0 of
// max(0, #{X_i > x} / n - eps), summed over the gaps between the sorted samples.
double lower_bound_by_definition(std::vector<double> x, double level) {
  std::sort(x.begin(), x.end());
  const double n = static_cast<double>(x.size());
  const double eps = std::sqrt(std::log(1 / (1 - level)) / (2 * n));
  double integral = 0, below = 0;
  for (std::size_t k = 0; k < x.size(); ++k) {
    integral += (x[k] - below) * std::max(0.0, (n - static_cast<double>(k)) / n - eps);
    below = x[k];
  }
  return integral;
}

}  // namespace

TEST_CASE("the order-statistics lower bound on a mean is the integral of the shifted empirical tail") {
  attncheck::streams::PhiloxStream stream(5, 0);
  for (int n : {1, 2, 3, 10, 57, 400}) {
    std::vector<double> x;
    for (int k = 0; k < n; ++k) x.push_back(std::exp(stream.next_normal_pair()[0]));
    double sum = 0;
    for (double v : x) sum += v;
    for (double level : {0.9, 0.995}) {
      INFO(n << " samples, level " << level);
      CHECK(mean_lower_bound(static_cast<std::uint64_t>(n), sum, x, level) ==
            Approx(lower_bound_by_definition(x, level)).margin(1e-12));
      CHECK(mean_lower_bound(static_cast<std::uint64_t>(n), sum, x, level) <= sum / n);
    }
  }
  // Too few samples for the level: nothing is known.
  CHECK(mean_lower_bound(1, 5, {5}, 0.995) == 0);
}

TEST_CASE("the largest values kept are enough for the bound at every count up to the planned one") {
  attncheck::streams::PhiloxStream stream(6, 0);
  const std::uint64_t planned = 3000;
  LargestValues top(planned);
  std::vector<double> all;
  double sum = 0;
  for (std::uint64_t n = 1; n <= planned; ++n) {
    const double v = std::exp(2 * stream.next_normal_pair()[0]);
    all.push_back(v);
    top.add(v);
    sum += v;
    if (n % 97 == 0 || n == planned) {
      INFO(n);
      CHECK(top.values().size() <= mean_lower_bound_needs(planned));
      CHECK(mean_lower_bound(n, sum, top.values()) == Approx(mean_lower_bound(n, sum, all)).epsilon(1e-12));
    }
  }
}

TEST_CASE("the order-statistics bound covers the mean for any distribution (fixed seeds, 2000 runs each)") {
  // At level 0.995 at most 0.5% of runs may put the bound above the true mean; the DKW inequality is
  // conservative, so the observed count is far lower. Exponential (mean 1), Pareto of tail index 1.5 (mean 3, no
  // variance) and a two-point law with a rare large value (mean 1.99), each with 200 samples a run.
  attncheck::streams::PhiloxStream stream(7, 0);
  const auto uniform = [&] { return 0.5 * std::erfc(-stream.next_normal_pair()[0] / std::sqrt(2.0)); };
  const std::vector<std::pair<double, std::function<double()>>> laws{
      {1.0, [&] { return -std::log(1 - uniform()); }},
      {3.0, [&] { return std::pow(1 - uniform(), -1 / 1.5); }},
      {1.99, [&] { return uniform() < 0.01 ? 100.0 : 1.0; }}};
  for (const auto& [mean, draw] : laws) {
    int above = 0;
    for (int run = 0; run < 2000; ++run) {
      std::vector<double> x;
      double sum = 0;
      for (int k = 0; k < 200; ++k) {
        x.push_back(draw());
        sum += x.back();
      }
      above += mean_lower_bound(200, sum, x) > mean ? 1 : 0;
    }
    INFO("mean " << mean << ": bound above it in " << above << " of 2000 runs");
    CHECK(above <= 10);
  }
}
