#pragma once
// Launchers of the CUDA kernels in plain types (device pointers, sizes, scalars), so that the backend's C++
// side, compiled by the host compiler together with Eigen, never includes device code. Every launcher
// enqueues on `stream` and returns at once; launch errors are reported by the next checked CUDA call.

#include "attncheck/gpu/normal_layout.hpp"
#include "attncheck/theory/pointwise.hpp"

#include <cuda_runtime_api.h>

#include <cstdint>

namespace attncheck::gpu::detail {

// The value of the non-finite flag while no row has a non-finite score or per-entry term.
inline constexpr unsigned long long kNoBadRow = ~0ULL;

// Per-row totals are four doubles, in the order of monte_carlo::NormSums: value_sq, dS_sq, dQ_sq, dK_sq.
inline constexpr int kRowSumWidth = 4;

// X (batch x N x D), Q and K (batch x D x d) of samples first, ..., first + batch - 1, as draw_sample.
void draw_samples(std::uint64_t seed, std::uint64_t first, int batch, const NormalLayout& layout, double sigma_x,
                  double sigma_t, double* X, double* Q, double* K, cudaStream_t stream);

// Per row i of each sample: ||x_i||^2, ||v_i||^2, ||u_i||^2 and (v_i . u_i)^2, of the unscaled V = X Q.
struct RowNormArgs {
  int batch = 0;
  std::int64_t n = 0, D = 0, d = 0;
  const double *X = nullptr, *V = nullptr, *U = nullptr;
  double *x_sq = nullptr, *v_sq = nullptr, *u_sq = nullptr, *diag_sq = nullptr;
};
void row_norms(const RowNormArgs& args, cudaStream_t stream);

void scale(double* data, std::int64_t count, double factor, cudaStream_t stream);

// A strip of score rows row0, ..., row0 + rows - 1 of every sample in the batch: tile is batch x rows x n,
// row-major, entry (b, r, j) = lambda v_{row0 + r} . u_j of sample b.
struct StripArgs {
  int batch = 0;
  std::int64_t n = 0, D = 0, d = 0, row0 = 0, rows = 0;
  double* tile = nullptr;
  const double *X = nullptr, *U = nullptr;                        // batch x n x D, batch x n x d
  const double *x_sq = nullptr, *u_sq = nullptr, *v_sq = nullptr;  // batch x n
  double* row_sums = nullptr;                                      // batch x n x kRowSumWidth
  unsigned long long* bad = nullptr;  // smallest b * n + i of a row with a non-finite score or term
};

// Elementwise phi: the four row sums of entry_terms.hpp for every row of the strip.
void pointwise_strip(const StripArgs& args, theory::Pointwise h, int p, cudaStream_t stream);

// Softmax pass 1: row max (its first column into `top`, batch x rows) and normalizer; the tile is replaced by
// the probabilities, so that u_bar = A U and x_bar = A X are two GEMMs.
void softmax_probabilities(const StripArgs& args, std::int64_t* top, cudaStream_t stream);

// Softmax pass 2 on the probabilities: the row sums of entry_terms.hpp (u_bar: batch x rows x d, x_bar:
// batch x rows x D; either may be null when its estimand is not wanted).
void softmax_strip(const StripArgs& args, const std::int64_t* top, const double* u_bar, const double* x_bar,
                   cudaStream_t stream);

// out[w * batch + b] = sum over i of in[(b * n + i) * width + w], in an order fixed by the launch shape
// (column w of every sample is one contiguous slot of `batch` values).
void sum_rows(int batch, std::int64_t n, int width, const double* in, double* out, cudaStream_t stream);

// out[b] = sum over k of a[b * len + k] * c[b * len + k].
void batched_dot(int batch, std::int64_t len, const double* a, const double* c, double* out, cudaStream_t stream);

// Raw 32-bit words of subsequences first, ..., first + subsequences - 1 (blocks of four words each, out is
// subsequences x blocks x 4): `sequential` from curand_init(seed, k, 0) and repeated curand4, otherwise each
// block from its own curand_init(seed, k, 4 * block) as the sampling kernel does.
void philox_words(std::uint64_t seed, std::uint64_t first, int subsequences, int blocks, bool sequential,
                  std::uint32_t* out, cudaStream_t stream);

}  // namespace attncheck::gpu::detail
