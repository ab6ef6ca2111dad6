#include "attncheck/monte_carlo/random_stream.hpp"
#include "attncheck/monte_carlo/statistics.hpp"

#include <catch2/catch.hpp>
#include <rapidcheck/catch.h>

#include <cmath>
#include <vector>

using namespace attncheck::monte_carlo;

namespace {
Accumulator accumulate(const std::vector<double>& xs, std::size_t begin, std::size_t end) {
  Accumulator a;
  for (std::size_t k = begin; k < end; ++k) a.add(xs[k]);
  return a;
}
bool close(double a, double b, double rel) { return std::abs(a - b) <= rel * std::max({std::abs(a), std::abs(b), 1e-300}); }
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

TEST_CASE("batch means keep a bounded number of batches of equal size") {
  BatchMeans b(16);
  for (int k = 0; k < 1000; ++k) b.add(k % 7);
  CHECK(b.full_batches() >= 16);
  CHECK(b.full_batches() <= 33);
}
