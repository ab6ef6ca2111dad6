// The self-test's comparisons, run on the CPU: CPU stand-ins for the device must pass, and each kind of
// corruption (one flipped bit of one word, one perturbed normal, one estimate off by 1e-5) must fail and be
// named.

#include "attncheck/theory/vocabulary.hpp"
#include "attncheck/gpu/cuda_scope.hpp"
#include "attncheck/gpu/selftest.hpp"
#include "attncheck/monte_carlo/cpu_backend.hpp"
#include "attncheck/monte_carlo/sweep.hpp"
#include "attncheck/streams/random_stream.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <string>

using namespace attncheck;
using monte_carlo::Estimand;
using monte_carlo::SampleValues;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

std::vector<std::uint32_t> cpu_words(std::uint64_t seed, std::uint64_t first, int subsequences, int blocks) {
  std::vector<std::uint32_t> out;
  for (int s = 0; s < subsequences; ++s) {
    streams::PhiloxStream stream(seed, first + static_cast<std::uint64_t>(s));
    for (int c = 0; c < blocks; ++c) {
      for (auto w : stream.next_block()) out.push_back(w);
    }
  }
  return out;
}

gpu::DrawnSample cpu_draw(const monte_carlo::SweepPoint& point, std::uint64_t k) {
  monte_carlo::SampleInputs in;
  monte_carlo::draw_sample(point, k, in);
  return {{in.X.data(), in.X.data() + in.X.size()},
          {in.Q.data(), in.Q.data() + in.Q.size()},
          {in.K.data(), in.K.data() + in.K.size()},
          {in.W_V.data(), in.W_V.data() + in.W_V.size()}};
}

// A backend that scales one estimand of one sample by (1 + factor): a device off by that much.
class SkewedBackend final : public monte_carlo::Backend {
 public:
  SkewedBackend(monte_carlo::Backend& inner, std::size_t sample, Estimand estimand, double factor)
      : inner_(inner), sample_(sample), estimand_(estimand), factor_(factor) {}
  std::string name() const override { return "skewed"; }
  void evaluate(const monte_carlo::SweepPoint& point, const std::vector<Estimand>& estimands, std::uint64_t first,
                std::uint64_t count, std::vector<SampleValues>& out) override {
    const std::size_t base = out.size();
    inner_.evaluate(point, estimands, first, count, out);
    if (sample_ < count) out[base + sample_][static_cast<int>(estimand_)] *= 1 + factor_;
  }

 private:
  monte_carlo::Backend& inner_;
  std::size_t sample_;
  Estimand estimand_;
  double factor_;
};

// The fixed cases small enough for the default suite (the N = 2560 ones take seconds on two cores).
std::vector<gpu::SelftestCase> small_cases() {
  std::vector<gpu::SelftestCase> cases = gpu::selftest_cases();
  cases.erase(std::remove_if(cases.begin(), cases.end(), [](const auto& c) { return c.point.N > 512; }), cases.end());
  return cases;
}

}  // namespace

TEST_CASE("what the CUDA backend evaluates is decided on the host: the rest goes to the CPU, by name") {
  using monte_carlo::BackendRequest;
  using monte_carlo::EvaluationPath;
  theory::AttentionMap relu;
  relu.activation = {theory::ActivationKind::pointwise, theory::Pointwise::relu, 1};
  const auto point = [&](theory::ScoreModel scores) {
    return monte_carlo::make_sweep_point({64, 8, 4}, relu, 0, scores);
  };
  const auto projected = point(theory::ScoreModel::projected);
  CHECK(gpu::cuda_unsupported_reason(projected, {Estimand::value, Estimand::dQ, Estimand::dK}, {}).empty());
  CHECK_THAT(gpu::cuda_unsupported_reason(projected, {Estimand::row_sum}, {}), Catch::Contains("with row sums"));
  CHECK_THAT(gpu::cuda_unsupported_reason(point(theory::ScoreModel::projected_layernorm), {Estimand::value}, {}),
             Catch::Contains("scores qk-layernorm"));
  BackendRequest tensor;
  tensor.path = EvaluationPath::tensor;
  CHECK_THAT(gpu::cuda_unsupported_reason(projected, {Estimand::value}, tensor), Catch::Contains("--path tensor"));
  BackendRequest mixed;
  mixed.precision = monte_carlo::ScorePrecision::mixed;
  CHECK_THROWS_WITH(gpu::check_cuda_request(mixed), Catch::Contains("--precision mixed") && Catch::Contains("cpu"));
  CHECK_NOTHROW(gpu::check_cuda_request({}));
}

TEST_CASE("relative differences: NaN only matches NaN, infinities only themselves") {
  CHECK(gpu::relative_difference(2.0, 2.0) == 0);
  CHECK(gpu::relative_difference(0.0, 0.0) == 0);
  CHECK(gpu::relative_difference(kNaN, kNaN) == 0);
  CHECK(gpu::relative_difference(1.0, 1.0 + 1e-7) == Approx(1e-7 / (1 + 1e-7)).epsilon(1e-6));
  CHECK(gpu::relative_difference(-4.0, 4.0) == 2.0);
  CHECK(std::isinf(gpu::relative_difference(kNaN, 1.0)));
  CHECK(std::isinf(gpu::relative_difference(1.0, kNaN)));
  CHECK(std::isinf(gpu::relative_difference(kInf, 1e300)));
  CHECK(gpu::relative_difference(kInf, kInf) == 0);
}

TEST_CASE("value comparison names the worst sample and estimand, and refuses different counts") {
  SampleValues a{1.0, 2.0, 3.0, kNaN, kNaN}, b = a;
  std::vector<SampleValues> cpu{a, a, a}, gpu_values{a, b, a};
  gpu_values[1][2] = 3.0 * (1 + 3e-6);
  gpu::ValueComparison cmp = gpu::compare_values(cpu, gpu_values);
  CHECK(cmp.worst_sample == 1);
  CHECK(cmp.worst_estimand == 2);
  CHECK(cmp.max_relative == Approx(3e-6).epsilon(1e-3));
  CHECK_FALSE(cmp.agree(1e-6));
  CHECK(cmp.agree(1e-5));
  gpu_values.pop_back();
  CHECK_FALSE(gpu::compare_values(cpu, gpu_values).agree(1.0));
  gpu_values = cpu;
  gpu_values[2][4] = 0.5;  // a value where the CPU has none
  CHECK_FALSE(gpu::compare_values(cpu, gpu_values).agree(1.0));
}

TEST_CASE("word comparison reports the first differing word by subsequence, block and word") {
  const auto words = cpu_words(1234, 0, 3, 5);
  CHECK_FALSE(gpu::first_word_difference(words, words, 5));
  auto flipped = words;
  flipped[(2 * 5 + 4) * 4 + 1] ^= 1u << 31;
  const auto difference = gpu::first_word_difference(words, flipped, 5);
  REQUIRE(difference);
  CHECK(difference->find("subsequence 2, block 4, word 1") != std::string::npos);
  CHECK(gpu::first_word_difference(words, {words.begin(), words.end() - 1}, 5));
}

TEST_CASE("the fixed cases cover every activation, every estimand and each batching regime") {
  const auto cases = gpu::selftest_cases();
  std::set<std::string> phis;
  std::set<int> estimands;
  bool odd_counts = false, strips = false, long_rows = false, batched = false, non_unit_sigma = false;
  for (const auto& c : cases) {
    phis.insert(std::string(theory::term_of(c.point.map.activation).word));
    for (Estimand e : c.estimands) estimands.insert(static_cast<int>(e));
    odd_counts |= (c.point.N * c.point.D) % 2 == 1 && (c.point.D * c.point.d) % 2 == 1;
    strips |= c.small_score_buffer;
    long_rows |= c.point.N > 2048;  // the block-per-row kernels
    batched |= c.samples >= 32 && c.point.N <= 64;
    non_unit_sigma |= c.point.sigma_x != 1 && c.point.sigma_t != 1;
  }
  for (const theory::ActivationTerm& term : theory::all_activations()) {
    INFO(term.word);
    CHECK(phis.count(std::string(term.word)) == 1);
  }
  // Every estimand the CUDA kernels compute (row sums and the other score models run on the CPU), C9's dV included.
  CHECK(estimands == std::set<int>{static_cast<int>(Estimand::value), static_cast<int>(Estimand::dQ),
                                   static_cast<int>(Estimand::dK), static_cast<int>(Estimand::dS),
                                   static_cast<int>(Estimand::score_var), static_cast<int>(Estimand::dV)});
  // C9 in each mix regime: the proposal (1), a mix, and standard attention's values (0).
  std::set<double> mixes;
  for (const gpu::SelftestCase& c : gpu::selftest_cases()) {
    if (c.point.mix) mixes.insert(*c.point.mix);
  }
  CHECK(mixes.count(1.0) == 1);
  CHECK(mixes.count(0.0) == 1);
  CHECK(mixes.size() >= 3);
  CHECK(odd_counts);
  CHECK(strips);
  CHECK(long_rows);
  CHECK(batched);
  CHECK(non_unit_sigma);
}

TEST_CASE("the self-test passes a device that is the CPU, and fails and names each corruption") {
  monte_carlo::CpuBackend cpu(1, 256);
  // The stand-in device evaluates with other tiles and threads, so its sums run in another order, as a GPU's.
  monte_carlo::CpuBackend stand_in(2, 7);
  gpu::SelftestDevice device;
  device.philox_words = [](std::uint64_t seed, std::uint64_t first, int subsequences, int blocks, bool) {
    return cpu_words(seed, first, subsequences, blocks);
  };
  device.draw_sample = cpu_draw;
  device.backend = &stand_in;
  device.small_buffer_backend = &stand_in;
  const auto cases = small_cases();

  const gpu::SelftestReport good = gpu::run_selftest(device, cpu, cases);
  for (const auto& check : good.checks) {
    INFO(check.name << ": " << check.detail);
    CHECK(check.passed);
  }
  CHECK(good.passed());
  CHECK(good.checks.size() == 4 + 6 + cases.size());  // word streams, normals, cases

  SECTION("one flipped bit in the offset-initialized words") {
    gpu::SelftestDevice bad = device;
    bad.philox_words = [](std::uint64_t seed, std::uint64_t first, int subsequences, int blocks, bool sequential) {
      auto words = cpu_words(seed, first, subsequences, blocks);
      if (!sequential) words[4 * blocks * 3 + 4 * 7 + 2] ^= 1u;
      return words;
    };
    const auto report = gpu::run_selftest(bad, cpu, {});
    CHECK_FALSE(report.passed());
    const auto failed = std::count_if(report.checks.begin(), report.checks.end(), [](const auto& c) {
      return !c.passed && c.detail.find("subsequence 3, block 7, word 2") != std::string::npos;
    });
    CHECK(failed == 2);  // both seeds, the offset form only
  }
  SECTION("a normal off by 1e-10 sigma") {
    gpu::SelftestDevice bad = device;
    bad.draw_sample = [](const monte_carlo::SweepPoint& point, std::uint64_t k) {
      gpu::DrawnSample drawn = cpu_draw(point, k);
      drawn.K.back() += 1e-10 * point.sigma_t;
      return drawn;
    };
    const auto report = gpu::run_selftest(bad, cpu, {small_cases().front()});
    CHECK_FALSE(report.passed());
  }
  SECTION("one estimate off by 1e-5 relative") {
    SkewedBackend skewed(stand_in, 1, Estimand::dK, 1e-5);
    gpu::SelftestDevice bad = device;
    bad.backend = &skewed;
    const auto report = gpu::run_selftest(bad, cpu, {cases.front()});
    CHECK_FALSE(report.passed());
    const auto& last = report.checks.back();
    CHECK_FALSE(last.passed);
    CHECK(last.detail.find("at sample 1, dK") != std::string::npos);
  }
}

namespace {
// Records what it is asked; its values are NaN.
class RecordingBackend final : public monte_carlo::Backend {
 public:
  struct Call {
    monte_carlo::SweepPoint point;
    std::uint64_t first, count;
  };
  std::string name() const override { return "recording"; }
  void evaluate(const monte_carlo::SweepPoint& point, const std::vector<Estimand>&, std::uint64_t first,
                std::uint64_t count, std::vector<SampleValues>& out) override {
    calls.push_back({point, first, count});
    SampleValues none;
    none.fill(kNaN);
    out.insert(out.end(), count, none);
  }
  std::vector<Call> calls;
};
}  // namespace

TEST_CASE("throughput is timed at the point asked for, after one warm-up sample, with the score flops of its N") {
  RecordingBackend backend;
  const monte_carlo::SweepPoint point = gpu::make_point(300, 16, 8, gpu::pointwise(theory::Pointwise::poly, 3), 0, 7);
  const gpu::Throughput t = gpu::measure_throughput(backend, point, {Estimand::value, Estimand::dQ}, 5);
  REQUIRE(backend.calls.size() == 2);
  CHECK(backend.calls[0].first == 0);
  CHECK(backend.calls[0].count == 1);
  CHECK(backend.calls[1].first == 1);
  CHECK(backend.calls[1].count == 5);
  CHECK(backend.calls[1].point.N == 300);
  CHECK(backend.calls[1].point.seed == point.seed);
  CHECK(t.estimands == "value,dQ");
  CHECK(t.samples == 5);
  REQUIRE(t.seconds > 0);
  CHECK(t.samples_per_second == Approx(5 / t.seconds));
  CHECK(t.score_tflops == Approx(t.samples_per_second * 2.0 * 300 * 300 * 8 / 1e12));
  CHECK_THROWS_AS(gpu::measure_throughput(backend, point, {Estimand::value}, 0), theory::InputError);

  // gpu-selftest's point: x^3 at N = 4096, D = d = 64.
  backend.calls.clear();
  gpu::measure_throughput(backend, {Estimand::value}, 2);
  REQUIRE(backend.calls.size() == 2);
  const monte_carlo::SweepPoint& fixed = backend.calls[1].point;
  CHECK(fixed.N == 4096);
  CHECK(fixed.D == 64);
  CHECK(fixed.d == 64);
  CHECK(fixed.map.activation == gpu::pointwise(theory::Pointwise::poly, 3));
  CHECK(fixed.map.inner == Approx(0.125));
}
