#pragma once
// How many samples the CUDA backend keeps in flight and how many score rows it forms at once. Host-only
// arithmetic, tested on the CPU.

#include <cstddef>
#include <cstdint>

namespace attncheck::gpu {

struct BatchPlan {
  std::int64_t samples = 1;     // samples drawn and reduced together (batched GEMMs and kernels)
  std::int64_t strip_rows = 1;  // score rows per sample in one strip: the buffer holds samples x strip_rows x N
};

// The default score buffer: half of the device's L2 cache, so that cuBLAS writes a strip and the reduction reads
// it back without a round trip to device memory; at least 8 MiB.
inline std::size_t default_score_buffer_bytes(int l2_cache_bytes) {
  const std::size_t half = l2_cache_bytes > 0 ? static_cast<std::size_t>(l2_cache_bytes) / 2 : 0;
  constexpr std::size_t kLeast = std::size_t{8} << 20;
  return half > kLeast ? half : kLeast;
}

// Most samples batched in one call: bounds the per-call bookkeeping and keeps grids within limits.
inline constexpr std::int64_t kMaxBatchSamples = 1 << 16;

// n: the point's N; count: samples asked for (>= 1); score_entries: doubles the score buffer holds;
// memory_samples: samples whose per-sample buffers fit in free device memory (>= 1).
// Small N: whole score matrices of many samples at once, so that small points are not launch-bound.
// Large N: one sample, as many full rows as the buffer holds (at least one).
inline BatchPlan plan_batch(std::int64_t n, std::int64_t count, std::int64_t score_entries,
                            std::int64_t memory_samples) {
  BatchPlan plan;
  const auto at_least_one = [](std::int64_t v) { return v < 1 ? std::int64_t{1} : v; };
  if (n <= score_entries / n) {  // n * n <= score_entries, without overflow
    plan.strip_rows = n;
    std::int64_t samples = score_entries / (n * n);
    if (samples > count) samples = count;
    if (samples > memory_samples) samples = memory_samples;
    if (samples > kMaxBatchSamples) samples = kMaxBatchSamples;
    plan.samples = at_least_one(samples);
  } else {
    plan.samples = 1;
    plan.strip_rows = at_least_one(score_entries / n);
  }
  return plan;
}

}  // namespace attncheck::gpu
