#pragma once
// `attncheck gpu-selftest`: the CUDA backend against the CPU backend on a fixed set of points with the same
// seeds. Host-only: the device enters through SelftestDevice, so the comparisons are tested on the CPU with
// CPU stand-ins (and with deliberately corrupted ones).
//
// What must agree, and why these tolerances:
// - raw Philox words: bit for bit (both sides compute the same integer function);
// - normals: |gpu - cpu| <= 1e-12 sigma. Box-Muller's log and sincospi (GPU) against log and sin(pi v)
//   (CPU) differ in the last bits; radii are below 8.7, so a few ulps of 8.7 are ~1e-14;
// - per-sample estimates: relative difference <= 1e-6. Both backends form scores in double and accumulate in
//   double; they differ only in summation order (a positive sum of n terms moves by at most n eps relative:
//   2^24 * 2^-53 = 2e-9 for N = 4096 scores per row times 4096 rows) and in the inputs' last bits (amplified
//   2p-fold by s^(2p): 1e-13 for p = 5). 1e-6 leaves a factor 500 above the worst of these.

#include "attncheck/monte_carlo/backend.hpp"

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace attncheck::gpu {

inline constexpr double kEstimateRelTolerance = 1e-6;
inline constexpr double kNormalTolerancePerSigma = 1e-12;

// X, Q, K (and C9's W_V, empty for other points) of one sample, row-major, as a backend draws them.
struct DrawnSample {
  std::vector<double> X, Q, K, W_V;
};

struct SelftestCase {
  std::string name;
  monte_carlo::SweepPoint point;
  std::vector<monte_carlo::Estimand> estimands;
  std::uint64_t samples = 1;
  bool small_score_buffer = false;  // forces many strips per sample (SelftestDevice::small_buffer_backend)
};

// The fixed points: every activation and estimand, odd matrix sizes, non-unit sigmas, many samples per batch
// at small N, several strips per sample, and rows long enough for the block-per-row kernels.
std::vector<SelftestCase> selftest_cases();

// Bytes of the score buffer of SelftestDevice::small_buffer_backend.
inline constexpr std::size_t kSmallScoreBufferBytes = 64 * 1024;

struct SelftestDevice {
  // Raw words of subsequences first.. (blocks blocks of four words each); `sequential`: from one
  // curand_init(seed, k, 0), else each block from curand_init(seed, k, 4 * block).
  std::function<std::vector<std::uint32_t>(std::uint64_t seed, std::uint64_t first, int subsequences, int blocks,
                                           bool sequential)>
      philox_words;
  std::function<DrawnSample(const monte_carlo::SweepPoint&, std::uint64_t k)> draw_sample;
  monte_carlo::Backend* backend = nullptr;
  monte_carlo::Backend* small_buffer_backend = nullptr;
};

struct CheckResult {
  std::string name;
  bool passed = false;
  std::string detail;
};

struct SelftestReport {
  std::vector<CheckResult> checks;
  bool passed() const;
};

// The first differing word, described ("subsequence 3, block 5, word 2: cpu 123, gpu 124"), or nothing.
std::optional<std::string> first_word_difference(const std::vector<std::uint32_t>& cpu,
                                                 const std::vector<std::uint32_t>& gpu, int blocks);

// |a - b| / max(|a|, |b|); 0 when both are 0 or both NaN (an estimand not asked for); infinite when exactly
// one is NaN or the two differ in an infinite value.
double relative_difference(double a, double b);

struct ValueComparison {
  double max_relative = 0;
  std::size_t worst_sample = 0;
  int worst_estimand = -1;
  bool same_count = true;
  bool agree(double tolerance) const { return same_count && max_relative <= tolerance; }
};
ValueComparison compare_values(const std::vector<monte_carlo::SampleValues>& cpu,
                               const std::vector<monte_carlo::SampleValues>& gpu);

// Largest |a_k - b_k|; infinite when the sizes differ or a value is NaN.
double max_abs_difference(const std::vector<double>& a, const std::vector<double>& b);

// Runs every check: the word streams, the normals of a few samples, and `cases` on both backends.
SelftestReport run_selftest(const SelftestDevice& device, monte_carlo::Backend& cpu,
                            const std::vector<SelftestCase>& cases);

// The self-test's points (and the benchmark's, bench/gpu): N x D inputs, d-column projections, inner scale
// 1/sqrt(d), outer scale N^-n_exponent, seed derived from the self-test's seed and `case_number`.
monte_carlo::SweepPoint make_point(theory::Index N, theory::Index D, theory::Index d, theory::Activation activation,
                                   double n_exponent, std::uint64_t case_number, double sigma_x = 1, double sigma_t = 1,
                                   std::optional<double> mix = std::nullopt, theory::Index dv = 0);

// The elementwise map h (x^p for Pointwise::poly).
theory::Activation pointwise(theory::Pointwise h, int p = 1);

// "value,dQ,dK,dS": the estimands' words, comma-separated.
std::string estimand_list(const std::vector<monte_carlo::Estimand>& estimands);

// Samples per second of `backend` at `point` over `samples` samples (>= 1) after one warm-up sample (allocations,
// cuBLAS heuristics), timed on the wall clock; with the score phase's rate 2 N^2 d samples / seconds.
struct Throughput {
  std::string estimands;
  std::uint64_t samples = 0;
  double seconds = 0;
  double samples_per_second = 0;
  double score_tflops = 0;
};
Throughput measure_throughput(monte_carlo::Backend& backend, const monte_carlo::SweepPoint& point,
                              const std::vector<monte_carlo::Estimand>& estimands, std::uint64_t samples);

// The same at N = 4096, D = d = 64, phi = x^3: the roofline point of docs/gpu.md, timed by gpu-selftest.
Throughput measure_throughput(monte_carlo::Backend& backend, const std::vector<monte_carlo::Estimand>& estimands,
                              std::uint64_t samples);

}  // namespace attncheck::gpu
