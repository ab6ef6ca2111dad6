#include "attncheck/gpu/selftest.hpp"

#include "attncheck/monte_carlo/cpu_backend.hpp"
#include "attncheck/monte_carlo/sweep.hpp"
#include "attncheck/streams/random_stream.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <limits>

namespace attncheck::gpu {

using monte_carlo::Estimand;
using monte_carlo::SampleValues;
using monte_carlo::SweepPoint;
using theory::Activation;
using theory::ActivationKind;
using theory::Pointwise;

namespace {

constexpr std::uint64_t kSelftestSeed = 20261121;

// CPU reference words: the stream the GPU must reproduce.
std::vector<std::uint32_t> cpu_words(std::uint64_t seed, std::uint64_t first, int subsequences, int blocks) {
  std::vector<std::uint32_t> words;
  words.reserve(static_cast<std::size_t>(subsequences) * blocks * 4);
  for (int s = 0; s < subsequences; ++s) {
    streams::PhiloxStream stream(seed, first + static_cast<std::uint64_t>(s));
    for (int c = 0; c < blocks; ++c) {
      for (std::uint32_t w : stream.next_block()) words.push_back(w);
    }
  }
  return words;
}

std::vector<double> flat(const theory::Matrix& m) { return {m.data(), m.data() + m.size()}; }

template <class Check>
CheckResult guarded(std::string name, Check&& check) {
  CheckResult result{std::move(name), false, {}};
  try {
    check(result);
  } catch (const std::exception& e) {
    result.passed = false;
    result.detail = fmt::format("failed with an error: {}", e.what());
  }
  return result;
}

}  // namespace

SweepPoint make_point(theory::Index N, theory::Index D, theory::Index d, Activation activation, double n_exponent,
                      std::uint64_t case_number, double sigma_x, double sigma_t, std::optional<double> mix,
                      theory::Index dv) {
  theory::AttentionMap map;
  map.activation = activation;
  map.inner = 1 / std::sqrt(static_cast<double>(d));
  map.outer.n_exponent = n_exponent;
  return monte_carlo::make_sweep_point({N, D, d, sigma_x, sigma_t}, map,
                                       streams::derive_point_seed(kSelftestSeed, case_number),
                                       theory::ScoreModel::projected, mix, dv);
}

Activation pointwise(Pointwise h, int p) { return {ActivationKind::pointwise, h, p}; }

std::string estimand_list(const std::vector<Estimand>& estimands) {
  std::string text;
  for (Estimand e : estimands) text += (text.empty() ? "" : ",") + std::string(theory::term_of(e).word);
  return text;
}

std::vector<SelftestCase> selftest_cases() {
  const std::vector<Estimand> norms{Estimand::value, Estimand::dQ, Estimand::dK, Estimand::dS};
  std::vector<SelftestCase> cases;
  std::uint64_t number = 0;
  const auto add = [&](std::string name, SweepPoint point, std::vector<Estimand> estimands, std::uint64_t samples,
                       bool small_buffer = false) {
    cases.push_back({std::move(name), point, std::move(estimands), samples, small_buffer});
  };
  add("x^3, N = 64 (32 samples in one batch)", make_point(64, 16, 8, pointwise(Pointwise::poly, 3), 0, ++number), norms,
      32);
  add("x^2, N = 301, D = 7, d = 5 (odd counts: spare draws discarded)",
      make_point(301, 7, 5, pointwise(Pointwise::poly, 2), 0, ++number), norms, 4);
  add("x^5 / sqrt(N), N = 16 (100 samples in one batch)",
      make_point(16, 8, 4, pointwise(Pointwise::poly, 5), 0.5, ++number), norms, 100);
  add("x^4, N = 300, 27-row strips", make_point(300, 16, 8, pointwise(Pointwise::poly, 4), 0, ++number), norms, 3,
      true);
  add("x^7 (run-time exponent), N = 40", make_point(40, 8, 8, pointwise(Pointwise::poly, 7), 0, ++number), norms, 8);
  add("x^1 and score-var (Gram path), sigma_x = 1.5, sigma_t = 0.7",
      make_point(200, 16, 8, pointwise(Pointwise::poly, 1), 0, ++number, 1.5, 0.7),
      {Estimand::value, Estimand::dQ, Estimand::dK, Estimand::dS, Estimand::score_var}, 8);
  add("identity, N = 50", make_point(50, 12, 6, pointwise(Pointwise::identity), 0, ++number), norms, 8);
  add("score-var alone, D = d = 64", make_point(64, 64, 64, pointwise(Pointwise::poly, 2), 0, ++number),
      {Estimand::score_var}, 16);
  add("matrix power 3, N = 100", make_point(100, 16, 8, {ActivationKind::matpow, Pointwise::identity, 3}, 0, ++number),
      {Estimand::value}, 8);
  add("matrix power 1, N = 100", make_point(100, 16, 8, {ActivationKind::matpow, Pointwise::identity, 1}, 0, ++number),
      {Estimand::value}, 4);
  // Every other activation of the vocabulary (x^p and the identity have cases of their own above).
  for (const theory::ActivationTerm& term : theory::all_activations()) {
    if (term.kind != ActivationKind::pointwise || term.takes_p || term.h == Pointwise::identity) continue;
    add(std::string(term.word) + " / N, N = 128", make_point(128, 16, 8, pointwise(term.h), 1.0, ++number), norms, 4);
  }
  add("softmax, N = 257, sigma_x = 1.5, sigma_t = 0.7",
      make_point(257, 32, 16, {ActivationKind::softmax, Pointwise::identity, 1}, 0, ++number, 1.5, 0.7), norms, 4);
  add("softmax, N = 300, 27-row strips",
      make_point(300, 16, 8, {ActivationKind::softmax, Pointwise::identity, 1}, 0, ++number), norms, 2, true);
  add("softmax value only, N = 16",
      make_point(16, 8, 4, {ActivationKind::softmax, Pointwise::identity, 1}, 0, ++number), {Estimand::value}, 64);
  add("x^3, N = 2560 (block-per-row kernels, several strips)",
      make_point(2560, 64, 64, pointwise(Pointwise::poly, 3), 0, ++number), norms, 2);
  add("softmax, N = 2560 (block-per-row kernels, several strips)",
      make_point(2560, 64, 64, {ActivationKind::softmax, Pointwise::identity, 1}, 0, ++number), norms, 1);
  // C9: O = softmax(S) P_mix, every estimand, each mix regime, odd sizes and rows longer than a block.
  const std::vector<Estimand> cross_norms{Estimand::value, Estimand::dV, Estimand::dS, Estimand::dQ};
  const auto cross_norm = [&](theory::Index N, theory::Index D, theory::Index d, theory::Index dv, double mix,
                              double sigma_x, double sigma_t) {
    return make_point(N, D, d, {ActivationKind::softmax, Pointwise::identity, 1}, 0, ++number, sigma_x, sigma_t, mix,
                      dv);
  };
  add("C9 mix alpha = 1, N = 64, dv = 12 (32 samples in one batch)", cross_norm(64, 16, 8, 12, 1.0, 1, 1), cross_norms,
      32);
  add("C9 mix alpha = 0.3, N = 257, D = 7, d = 5, dv = 3, sigma_x = 1.5, sigma_t = 0.7",
      cross_norm(257, 7, 5, 3, 0.3, 1.5, 0.7), cross_norms, 4);
  add("C9 mix alpha = 0, N = 40, dv = 1", cross_norm(40, 8, 4, 1, 0.0, 1, 1), cross_norms, 8);
  add("C9 mix alpha = 1, N = 600, dv = 300 (columns longer than a block)", cross_norm(600, 16, 8, 300, 1.0, 1, 1),
      {Estimand::value, Estimand::dV, Estimand::dS}, 1);
  return cases;
}

bool SelftestReport::passed() const {
  return !checks.empty() && std::all_of(checks.begin(), checks.end(), [](const CheckResult& c) { return c.passed; });
}

std::optional<std::string> first_word_difference(const std::vector<std::uint32_t>& cpu,
                                                 const std::vector<std::uint32_t>& gpu, int blocks) {
  if (cpu.size() != gpu.size()) return fmt::format("cpu has {} words, gpu {}", cpu.size(), gpu.size());
  const std::size_t per_subsequence = static_cast<std::size_t>(blocks) * 4;
  for (std::size_t k = 0; k < cpu.size(); ++k) {
    if (cpu[k] != gpu[k]) {
      return fmt::format("subsequence {}, block {}, word {}: cpu {}, gpu {}", k / per_subsequence,
                         (k % per_subsequence) / 4, k % 4, cpu[k], gpu[k]);
    }
  }
  return std::nullopt;
}

double relative_difference(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) {
    return std::isnan(a) && std::isnan(b) ? 0.0 : std::numeric_limits<double>::infinity();
  }
  if (a == b) return 0;  // also equal infinities
  if (std::isinf(a) || std::isinf(b)) return std::numeric_limits<double>::infinity();
  return std::abs(a - b) / std::max(std::abs(a), std::abs(b));
}

ValueComparison compare_values(const std::vector<SampleValues>& cpu, const std::vector<SampleValues>& gpu) {
  ValueComparison result;
  if (cpu.size() != gpu.size()) {
    result.same_count = false;
    result.max_relative = std::numeric_limits<double>::infinity();
    return result;
  }
  for (std::size_t k = 0; k < cpu.size(); ++k) {
    for (int e = 0; e < monte_carlo::kEstimandCount; ++e) {
      const double r = relative_difference(cpu[k][e], gpu[k][e]);
      if (r > result.max_relative || (result.worst_estimand < 0 && r > 0)) {
        result.max_relative = r;
        result.worst_sample = k;
        result.worst_estimand = e;
      }
    }
  }
  return result;
}

double max_abs_difference(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return std::numeric_limits<double>::infinity();
  double worst = 0;
  for (std::size_t k = 0; k < a.size(); ++k) {
    const double diff = std::abs(a[k] - b[k]);
    if (std::isnan(diff)) return std::numeric_limits<double>::infinity();
    worst = std::max(worst, diff);
  }
  return worst;
}

SelftestReport run_selftest(const SelftestDevice& device, monte_carlo::Backend& cpu,
                            const std::vector<SelftestCase>& cases) {
  SelftestReport report;
  // Seeds 1234 (the stream docs/design.md quotes) and a derived 64-bit one; subsequences from 0 and from above
  // 2^32, where the counter's high word is in use.
  struct Stream {
    std::uint64_t seed, first;
  };
  constexpr int kSubsequences = 8, kBlocks = 16;
  for (const Stream s : {Stream{1234, 0}, Stream{streams::derive_point_seed(kSelftestSeed, 0), (1ULL << 32) + 5}}) {
    const std::vector<std::uint32_t> expected = cpu_words(s.seed, s.first, kSubsequences, kBlocks);
    for (const bool sequential : {true, false}) {
      report.checks.push_back(
          guarded(fmt::format("Philox words, seed {}, subsequences {}..{}, {}", s.seed, s.first,
                              s.first + kSubsequences - 1,
                              sequential ? "curand_init(seed, k, 0) + curand4" : "curand_init(seed, k, 4 block)"),
                  [&](CheckResult& r) {
                    const auto difference =
                        first_word_difference(expected,
                                              device.philox_words(s.seed, s.first, kSubsequences, kBlocks, sequential),
                                              kBlocks);
                    r.passed = !difference;
                    r.detail = difference ? *difference : fmt::format("{} words equal bit for bit", expected.size());
                  }));
    }
  }
  for (std::size_t c = 0; c < std::min<std::size_t>(cases.size(), 3); ++c) {
    const SweepPoint& point = cases[c].point;
    for (const std::uint64_t k : {std::uint64_t{0}, std::uint64_t{3}}) {
      report.checks.push_back(
          guarded(fmt::format("normals of sample {} of \"{}\"", k, cases[c].name), [&](CheckResult& r) {
            monte_carlo::SampleInputs in;
            monte_carlo::draw_sample(point, k, in);
            const DrawnSample drawn = device.draw_sample(point, k);
            const double worst_x = max_abs_difference(flat(in.X), drawn.X) / point.sigma_x;
            const double worst_t =
                std::max(max_abs_difference(flat(in.Q), drawn.Q), max_abs_difference(flat(in.K), drawn.K)) /
                point.sigma_t;
            const double worst_w = max_abs_difference(flat(in.W_V), drawn.W_V) / point.sigma_t;
            const double worst = std::max({worst_x, worst_t, worst_w});
            r.passed = worst <= kNormalTolerancePerSigma;
            r.detail =
                fmt::format("max |gpu - cpu| / sigma = {:.3g} (tolerance {:.0e})", worst, kNormalTolerancePerSigma);
          }));
    }
  }
  for (const SelftestCase& c : cases) {
    report.checks.push_back(
        guarded(fmt::format("{} [{}], {} samples", c.name, estimand_list(c.estimands), c.samples), [&](CheckResult& r) {
          std::vector<SampleValues> expected, got;
          cpu.evaluate(c.point, c.estimands, 0, c.samples, expected);
          monte_carlo::Backend* backend = c.small_score_buffer ? device.small_buffer_backend : device.backend;
          backend->evaluate(c.point, c.estimands, 0, c.samples, got);
          const ValueComparison cmp = compare_values(expected, got);
          r.passed = cmp.agree(kEstimateRelTolerance);
          if (!cmp.same_count) {
            r.detail = fmt::format("cpu gave {} samples, gpu {}", expected.size(), got.size());
          } else if (cmp.worst_estimand < 0) {
            r.detail = "identical";
          } else {
            const auto e = static_cast<Estimand>(cmp.worst_estimand);
            r.detail = fmt::format(
                "max relative difference {:.3g} (tolerance {:.0e}) at sample {}, {}: cpu {:.17g}, gpu {:.17g}",
                cmp.max_relative, kEstimateRelTolerance, cmp.worst_sample, theory::term_of(e).word,
                expected[cmp.worst_sample][cmp.worst_estimand], got[cmp.worst_sample][cmp.worst_estimand]);
          }
        }));
  }
  return report;
}

Throughput measure_throughput(monte_carlo::Backend& backend, const SweepPoint& point,
                              const std::vector<Estimand>& estimands, std::uint64_t samples) {
  if (samples < 1) throw theory::InputError("measure_throughput: at least one sample must be timed");
  std::vector<SampleValues> values;
  backend.evaluate(point, estimands, 0, 1, values);  // warm-up: allocations, cuBLAS heuristics
  values.clear();
  const auto start = std::chrono::steady_clock::now();
  backend.evaluate(point, estimands, 1, samples, values);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  Throughput t;
  t.estimands = estimand_list(estimands);
  t.samples = samples;
  t.seconds = seconds;
  t.samples_per_second = static_cast<double>(samples) / seconds;
  t.score_tflops = t.samples_per_second * 2.0 * static_cast<double>(point.N) * static_cast<double>(point.N) *
                   static_cast<double>(point.d) / 1e12;
  return t;
}

Throughput measure_throughput(monte_carlo::Backend& backend, const std::vector<Estimand>& estimands,
                              std::uint64_t samples) {
  constexpr theory::Index kN = 4096, kDim = 64;
  return measure_throughput(backend, make_point(kN, kDim, kDim, pointwise(Pointwise::poly, 3), 0, 1000), estimands,
                            samples);
}

}  // namespace attncheck::gpu
