#pragma once
// Launchers of the CUDA kernels in plain types (device pointers, sizes, scalars), so that the backend's C++
// side, compiled by the host compiler together with Eigen, never includes device code. Every launcher
// enqueues on `stream` and returns at once, having checked its launch (launch_failed).

#include "attncheck/gpu/normal_layout.hpp"
#include "attncheck/theory/pointwise.hpp"

#include <cuda_runtime_api.h>

#include <cstdint>

namespace attncheck::gpu::detail {

// The value of the non-finite flag while no row has a non-finite score or per-entry term.
inline constexpr unsigned long long kNoBadRow = ~0ULL;

// Throws CudaError naming the kernel whose launch found `status` (cuda_backend.cpp: the host side, where the error
// types and messages live).
[[noreturn]] void launch_failed(cudaError_t status, const char* kernel);

// Per-row totals are four doubles, in the order of monte_carlo::NormSums: value_sq, dS_sq, dQ_sq, dK_sq.
inline constexpr int kRowSumWidth = 4;

// X (batch x N x D), Q and K (batch x D x d), and C9's W_V (batch x D x d_v; null when layout.w_count is 0) of
// samples first, ..., first + batch - 1, as draw_sample.
void draw_samples(std::uint64_t seed, std::uint64_t first, int batch, const NormalLayout& layout, double sigma_x,
                  double sigma_t, double* X, double* Q, double* K, double* W_V, cudaStream_t stream);

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
  const double *X = nullptr, *U = nullptr;                         // batch x n x D, batch x n x d
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

// C9, one block per (sample, value column k) of `values` (batch x n x dv, row-major): `probabilities` gets the
// column softmax and `mixed` mix * probabilities + (1 - mix) * values. A non-finite value lowers `bad` to its
// b * n + j.
void cross_norm_values(int batch, std::int64_t n, std::int64_t dv, double mix, const double* values,
                       double* probabilities, double* mixed, unsigned long long* bad, cudaStream_t stream);

// C9's per-row sums, one block per (sample, row i), from the attention A (batch x n x n, rows probabilities) and
// the batch x n x dv matrices P (column softmax), P_mix, O = A P_mix and A P (= O at mix 1). Row i's four slots of
// `row_sums` get, through theory::cross_norm_entry_terms: ||o_i||^2, sum_jk (dO/dS)^2, ||x_i||^2 sum_k ||U^T g_ik||^2
// (dQ before lambda^2; 0 unless `with_query`) and sum_jk (dO/dV)^2.
struct CrossNormRowArgs {
  int batch = 0;
  std::int64_t n = 0, d = 0, dv = 0;
  double mix = 1;
  bool with_query = false;
  const double *attention = nullptr, *probabilities = nullptr, *mixed = nullptr, *output = nullptr,
               *softmax_output = nullptr;
  const double *U = nullptr, *x_sq = nullptr;  // batch x n x d (unscaled X K), batch x n
  double* row_sums = nullptr;                  // batch x n x kRowSumWidth
  unsigned long long* bad = nullptr;
};
void cross_norm_rows(const CrossNormRowArgs& args, cudaStream_t stream);

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
