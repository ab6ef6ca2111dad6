// Every device function of the CUDA backend, in one translation unit: nvcc is slow, and nothing here calls
// across units, so there is no device link step either. The per-entry math comes from entry_terms.hpp and
// pointwise.hpp, the very code the CPU backend runs; the kernels only lay rows and columns over threads.

#include "kernels.hpp"

#include "attncheck/monte_carlo/entry_terms.hpp"
#include "attncheck/theory/cross_norm_terms.hpp"

#include <curand_kernel.h>

#include <algorithm>
#include <cstdint>

namespace attncheck::gpu::detail {

namespace {

using monte_carlo::EntryTerms;
using monte_carlo::NormSums;
using monte_carlo::PointwiseRowSums;
using monte_carlo::SoftmaxRowSums;
using std::int64_t;

constexpr int kBlock = 256;
constexpr int kWarp = 32;
constexpr unsigned kFullMask = 0xffffffffu;
// Pairs drawn per thread: one curand_init per four pairs keeps the extra Philox evaluation of curand_init
// (it precomputes the first block) at a quarter per pair.
constexpr int kPairsPerThread = 4;

int blocks_for(int64_t threads) { return static_cast<int>((threads + kBlock - 1) / kBlock); }

// Sum over a group of G consecutive threads (G = 32: one warp; G = 256: the whole block), returned to every
// thread of the group. `scratch` holds kBlock / kWarp doubles of shared memory.
template <int G>
__device__ double group_sum(double v, double* scratch) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v += __shfl_down_sync(kFullMask, v, offset);
  if constexpr (G == kWarp) {
    return __shfl_sync(kFullMask, v, 0);
  } else {
    static_assert(G == kBlock, "groups are a warp or a block");
    __syncthreads();  // scratch may still be read by the previous call
    if (threadIdx.x % kWarp == 0) scratch[threadIdx.x / kWarp] = v;
    __syncthreads();
    double total = 0;
    for (int w = 0; w < kBlock / kWarp; ++w) total += scratch[w];  // same order in every thread
    return total;
  }
}

// The largest value of the group and its smallest column (the row's first largest entry, as the CPU).
template <int G>
__device__ void group_max_first(double& value, int64_t& column, double* scratch_value, int64_t* scratch_column) {
  const auto take = [&](double other_value, int64_t other_column) {
    if (other_value > value || (other_value == value && other_column < column)) {
      value = other_value;
      column = other_column;
    }
  };
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    take(__shfl_down_sync(kFullMask, value, offset), __shfl_down_sync(kFullMask, column, offset));
  }
  if constexpr (G == kWarp) {
    value = __shfl_sync(kFullMask, value, 0);
    column = __shfl_sync(kFullMask, column, 0);
  } else {
    __syncthreads();
    if (threadIdx.x % kWarp == 0) {
      scratch_value[threadIdx.x / kWarp] = value;
      scratch_column[threadIdx.x / kWarp] = column;
    }
    __syncthreads();
    value = scratch_value[0];
    column = scratch_column[0];
    for (int w = 1; w < kBlock / kWarp; ++w) take(scratch_value[w], scratch_column[w]);
  }
}

// Which row of which sample a group works on; false for the idle groups of the last block.
struct RowPlace {
  int64_t row_id, sample, row;  // row_id = sample * rows + strip row; row = index in the sample
  int lane;
};

template <int G>
__device__ bool place_row(const StripArgs& a, RowPlace& place) {
  place.row_id = static_cast<int64_t>(blockIdx.x) * (kBlock / G) + threadIdx.x / G;
  place.lane = static_cast<int>(threadIdx.x % G);
  if (place.row_id >= static_cast<int64_t>(a.batch) * a.rows) return false;
  place.sample = place.row_id / a.rows;
  place.row = a.row0 + place.row_id % a.rows;
  return true;
}

__device__ void store_row(const StripArgs& a, const RowPlace& place, const NormSums<double>& sums) {
  const int64_t at = place.sample * a.n + place.row;
  double* out = a.row_sums + at * kRowSumWidth;
  out[0] = sums.value_sq;
  out[1] = sums.dS_sq;
  out[2] = sums.dQ_sq;
  out[3] = sums.dK_sq;
  if (!isfinite(sums.value_sq + sums.dS_sq + sums.dQ_sq + sums.dK_sq)) {
    atomicMin(a.bad, static_cast<unsigned long long>(at));
  }
}

__global__ void draw_kernel(std::uint64_t seed, std::uint64_t first, int batch, NormalLayout layout, double sigma_x,
                            double sigma_t, double* X, double* Q, double* K, double* W_V) {
  const int64_t pairs = layout.total_pairs();
  const int64_t chunks = (pairs + kPairsPerThread - 1) / kPairsPerThread;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < batch * chunks; t += stride) {
    const int64_t b = t / chunks, pair0 = (t % chunks) * kPairsPerThread;
    curandStatePhilox4_32_10_t state;
    // Offsets count 32-bit words: 4 * pair0 is the state after pair0 calls of curand4 from offset 0.
    curand_init(seed, first + static_cast<std::uint64_t>(b), 4ULL * static_cast<std::uint64_t>(pair0), &state);
    for (int q = 0; q < kPairsPerThread && pair0 + q < pairs; ++q) {
      const double2 z = curand_normal2_double(&state);
      const NormalSlot slot = layout.slot(pair0 + q);
      double* target = X + b * layout.x_count;
      double sd = sigma_x;
      if (slot.target == DrawTarget::Q) {
        target = Q + b * layout.q_count;
        sd = sigma_t;
      } else if (slot.target == DrawTarget::K) {
        target = K + b * layout.k_count;
        sd = sigma_t;
      } else if (slot.target == DrawTarget::W_V) {
        target = W_V + b * layout.w_count;
        sd = sigma_t;
      }
      target[slot.element] = sd * z.x;
      if (slot.count == 2) target[slot.element + 1] = sd * z.y;
    }
  }
}

__global__ void row_norms_kernel(RowNormArgs a) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= a.batch * a.n) return;
  const double* x = a.X + t * a.D;
  const double* v = a.V + t * a.d;
  const double* u = a.U + t * a.d;
  double x_sq = 0, v_sq = 0, u_sq = 0, vu = 0;
  for (int64_t k = 0; k < a.D; ++k) x_sq += x[k] * x[k];
  for (int64_t k = 0; k < a.d; ++k) {
    v_sq += v[k] * v[k];
    u_sq += u[k] * u[k];
    vu += v[k] * u[k];
  }
  a.x_sq[t] = x_sq;
  a.v_sq[t] = v_sq;
  a.u_sq[t] = u_sq;
  a.diag_sq[t] = vu * vu;
}

__global__ void scale_kernel(double* data, int64_t count, double factor) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t < count) data[t] *= factor;
}

template <class Real>
struct GenericTerms {
  theory::Pointwise h;
  int p;
  __device__ EntryTerms<Real> operator()(Real s) const { return monte_carlo::pointwise_entry_terms(h, p, s); }
};

template <int P>
struct PolyTerms {
  __device__ EntryTerms<double> operator()(double s) const { return monte_carlo::poly_entry_terms<P>(s); }
};

template <int G, class Terms>
__global__ void pointwise_strip_kernel(StripArgs a, Terms terms) {
  __shared__ double scratch[kBlock / kWarp];
  RowPlace place;
  if (!place_row<G>(a, place)) return;
  const double* s = a.tile + place.row_id * a.n;
  const double* u_sq = a.u_sq + place.sample * a.n;
  const double* x_sq = a.x_sq + place.sample * a.n;
  PointwiseRowSums<double> row;
  for (int64_t j = place.lane; j < a.n; j += G) monte_carlo::add_entry(row, terms(s[j]), u_sq[j], x_sq[j]);
  row.value_sq = group_sum<G>(row.value_sq, scratch);
  row.deriv_sq = group_sum<G>(row.deriv_sq, scratch);
  row.dq_inner = group_sum<G>(row.dq_inner, scratch);
  row.dk_inner = group_sum<G>(row.dk_inner, scratch);
  if (place.lane != 0) return;
  NormSums<double> sums;
  monte_carlo::finish_pointwise_row(sums, row, x_sq[place.row], a.v_sq[place.sample * a.n + place.row]);
  store_row(a, place, sums);
}

template <int G>
__global__ void softmax_probabilities_kernel(StripArgs a, int64_t* top) {
  __shared__ double scratch[kBlock / kWarp];
  __shared__ int64_t scratch_column[kBlock / kWarp];
  RowPlace place;
  if (!place_row<G>(a, place)) return;
  double* s = a.tile + place.row_id * a.n;
  double row_max = -INFINITY;
  int64_t column = INT64_MAX;  // a lane without columns never wins a tie
  bool finite = true;
  for (int64_t j = place.lane; j < a.n; j += G) {
    const double v = s[j];
    finite = finite && isfinite(v);
    if (v > row_max) {  // strict: the first column of this lane's largest value
      row_max = v;
      column = j;
    }
  }
  group_max_first<G>(row_max, column, scratch, scratch_column);
  const bool row_finite = group_sum<G>(finite ? 0.0 : 1.0, scratch) == 0.0;
  double norm = 0;
  for (int64_t j = place.lane; j < a.n; j += G) norm += exp(s[j] - row_max);
  norm = group_sum<G>(norm, scratch);
  for (int64_t j = place.lane; j < a.n; j += G) s[j] = exp(s[j] - row_max) / norm;
  if (place.lane != 0) return;
  top[place.row_id] = row_finite ? column : 0;
  if (!row_finite) atomicMin(a.bad, static_cast<unsigned long long>(place.sample * a.n + place.row));
}

template <int G>
__global__ void softmax_strip_kernel(StripArgs a, const int64_t* top, const double* u_bar, const double* x_bar) {
  __shared__ double scratch[kBlock / kWarp];
  RowPlace place;
  if (!place_row<G>(a, place)) return;
  const double* prob = a.tile + place.row_id * a.n;
  const int64_t top_column = top[place.row_id];
  const double* U = a.U + place.sample * a.n * a.d;
  const double* X = a.X + place.sample * a.n * a.D;
  const double* ub = u_bar ? u_bar + place.row_id * a.d : nullptr;
  const double* xb = x_bar ? x_bar + place.row_id * a.D : nullptr;
  SoftmaxRowSums<double> row;
  for (int64_t j = place.lane; j < a.n; j += G) {
    const double p = prob[j];
    monte_carlo::add_softmax_probability(row, p, j == top_column);
    if (p == 0) continue;  // underflowed: no contribution to any sum
    if (ub) row.dq_inner += p * p * monte_carlo::squared_distance(U + j * a.d, ub, static_cast<int>(a.d));
    if (xb) row.dk_inner += p * p * monte_carlo::squared_distance(X + j * a.D, xb, static_cast<int>(a.D));
  }
  // Exactly one lane holds the top probability and the others hold 0, so a sum gathers it unchanged.
  row.top = group_sum<G>(row.top, scratch);
  row.rest_mass = group_sum<G>(row.rest_mass, scratch);
  row.rest_sq = group_sum<G>(row.rest_sq, scratch);
  row.rest_4 = group_sum<G>(row.rest_4, scratch);
  row.rest_one_minus = group_sum<G>(row.rest_one_minus, scratch);
  row.dq_inner = group_sum<G>(row.dq_inner, scratch);
  row.dk_inner = group_sum<G>(row.dk_inner, scratch);
  if (place.lane != 0) return;
  NormSums<double> sums;
  monte_carlo::finish_softmax_row(sums, row, a.x_sq[place.sample * a.n + place.row],
                                  a.v_sq[place.sample * a.n + place.row]);
  store_row(a, place, sums);
}

// One block per (sample, value column): max, normalizer, then the probabilities and the mix.
__global__ void cross_norm_values_kernel(int64_t n, int64_t dv, double mix, const double* values, double* probabilities,
                                         double* mixed, unsigned long long* bad) {
  __shared__ double scratch[kBlock / kWarp];
  __shared__ int64_t scratch_column[kBlock / kWarp];
  const int64_t b = blockIdx.x, k = blockIdx.y;
  const double* v = values + b * n * dv + k;
  double column_max = -INFINITY;
  int64_t row = INT64_MAX;
  int64_t first_bad = INT64_MAX;
  for (int64_t j = threadIdx.x; j < n; j += kBlock) {
    const double x = v[j * dv];
    if (!isfinite(x) && j < first_bad) first_bad = j;
    if (x > column_max) {
      column_max = x;
      row = j;
    }
  }
  group_max_first<kBlock>(column_max, row, scratch, scratch_column);
  if (first_bad != INT64_MAX) atomicMin(bad, static_cast<unsigned long long>(b * n + first_bad));
  double norm = 0;
  for (int64_t j = threadIdx.x; j < n; j += kBlock) norm += exp(v[j * dv] - column_max);
  norm = group_sum<kBlock>(norm, scratch);
  for (int64_t j = threadIdx.x; j < n; j += kBlock) {
    const int64_t at = b * n * dv + j * dv + k;
    const double p = exp(values[at] - column_max) / norm;
    probabilities[at] = p;
    mixed[at] = mix * p + (1 - mix) * values[at];
  }
}

// One block per (sample, row i): the entries of dO/dV and dO/dS of the row through the shared per-entry terms,
// then, for dQ, the d x dv matrix U^T G_i (column k of G_i is g_ik) one entry per thread step.
__global__ void cross_norm_rows_kernel(CrossNormRowArgs a) {
  __shared__ double scratch[kBlock / kWarp];
  const int64_t row_id = blockIdx.x, b = row_id / a.n, i = row_id % a.n;
  const double* attention = a.attention + b * a.n * a.n + i * a.n;
  const double* p = a.probabilities + b * a.n * a.dv;
  const double* q = a.mixed + b * a.n * a.dv;
  const double* o = a.output + b * a.n * a.dv + i * a.dv;
  const double* phat = a.softmax_output + b * a.n * a.dv + i * a.dv;
  double values_sq = 0, scores_sq = 0, output_sq = 0, query_sq = 0;
  for (int64_t j = threadIdx.x; j < a.n; j += kBlock) {
    const double a_ij = attention[j];
    for (int64_t k = 0; k < a.dv; ++k) {
      const theory::CrossNormEntryTerms t =
          theory::cross_norm_entry_terms(a_ij, p[j * a.dv + k], q[j * a.dv + k], o[k], phat[k], a.mix);
      values_sq += t.grad_values * t.grad_values;
      scores_sq += t.grad_scores * t.grad_scores;
    }
  }
  for (int64_t k = threadIdx.x; k < a.dv; k += kBlock) output_sq += o[k] * o[k];
  if (a.with_query) {
    const double* U = a.U + b * a.n * a.d;
    for (int64_t lk = threadIdx.x; lk < a.d * a.dv; lk += kBlock) {
      const int64_t l = lk / a.dv, k = lk % a.dv;
      double entry = 0;  // (U^T g_ik)_l = sum_j u_jl a_ij (q_jk - o_ik)
      for (int64_t j = 0; j < a.n; ++j) {
        entry += U[j * a.d + l] *
                 theory::cross_norm_entry_terms(attention[j], p[j * a.dv + k], q[j * a.dv + k], o[k], phat[k], a.mix)
                     .grad_scores;
      }
      query_sq += entry * entry;
    }
  }
  values_sq = group_sum<kBlock>(values_sq, scratch);
  scores_sq = group_sum<kBlock>(scores_sq, scratch);
  output_sq = group_sum<kBlock>(output_sq, scratch);
  query_sq = group_sum<kBlock>(query_sq, scratch);
  if (threadIdx.x != 0) return;
  double* out = a.row_sums + row_id * kRowSumWidth;
  out[0] = output_sq;
  out[1] = scores_sq;
  out[2] = a.with_query ? a.x_sq[row_id] * query_sq : 0.0;
  out[3] = values_sq;
  if (!isfinite(out[0] + out[1] + out[2] + out[3])) atomicMin(a.bad, static_cast<unsigned long long>(row_id));
}

// One block per (sample, column w): a fixed split over threads and a fixed tree, so repeated runs agree.
__global__ void sum_rows_kernel(std::int64_t n, int width, const double* in, double* out) {
  __shared__ double partial[kBlock];
  const int64_t b = blockIdx.x;
  const int w = static_cast<int>(blockIdx.y);
  double sum = 0;
  for (int64_t i = threadIdx.x; i < n; i += kBlock) sum += in[(b * n + i) * width + w];
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int half = kBlock / 2; half > 0; half /= 2) {
    if (static_cast<int>(threadIdx.x) < half) partial[threadIdx.x] += partial[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[w * gridDim.x + b] = partial[0];
}

__global__ void batched_dot_kernel(std::int64_t len, const double* a, const double* c, double* out) {
  __shared__ double partial[kBlock];
  const int64_t b = blockIdx.x;
  double sum = 0;
  for (int64_t k = threadIdx.x; k < len; k += kBlock) sum += a[b * len + k] * c[b * len + k];
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int half = kBlock / 2; half > 0; half /= 2) {
    if (static_cast<int>(threadIdx.x) < half) partial[threadIdx.x] += partial[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[b] = partial[0];
}

__global__ void philox_sequential_kernel(std::uint64_t seed, std::uint64_t first, int subsequences, int blocks,
                                         std::uint32_t* out) {
  const int s = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (s >= subsequences) return;
  curandStatePhilox4_32_10_t state;
  curand_init(seed, first + static_cast<std::uint64_t>(s), 0, &state);
  for (int c = 0; c < blocks; ++c) {
    const uint4 w = curand4(&state);
    std::uint32_t* o = out + (static_cast<int64_t>(s) * blocks + c) * 4;
    o[0] = w.x;
    o[1] = w.y;
    o[2] = w.z;
    o[3] = w.w;
  }
}

__global__ void philox_offset_kernel(std::uint64_t seed, std::uint64_t first, int subsequences, int blocks,
                                     std::uint32_t* out) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= static_cast<int64_t>(subsequences) * blocks) return;
  const std::uint64_t s = static_cast<std::uint64_t>(t / blocks), c = static_cast<std::uint64_t>(t % blocks);
  curandStatePhilox4_32_10_t state;
  curand_init(seed, first + s, 4 * c, &state);
  const uint4 w = curand4(&state);
  std::uint32_t* o = out + t * 4;
  o[0] = w.x;
  o[1] = w.y;
  o[2] = w.z;
  o[3] = w.w;
}

// A launch that failed (a bad configuration, no kernel image for this device), or work queued before it that did,
// is reported here, naming the kernel, before a later CUDA or cuBLAS call could take the error for its own.
void launched(const char* kernel) {
  const cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess) launch_failed(status, kernel);
}

// Rows of up to 2048 columns get a warp each (eight rows per block, 64 entries per lane at most); longer rows
// get a whole block, so that a strip of a few hundred long rows still fills the device.
constexpr int64_t kWarpRowLimit = 2048;

template <class Terms>
void pointwise_with(const StripArgs& a, Terms terms, cudaStream_t stream) {
  const int64_t rows = static_cast<int64_t>(a.batch) * a.rows;
  if (a.n <= kWarpRowLimit) {
    pointwise_strip_kernel<kWarp>
        <<<static_cast<int>((rows + kBlock / kWarp - 1) / (kBlock / kWarp)), kBlock, 0, stream>>>(a, terms);
  } else {
    pointwise_strip_kernel<kBlock><<<static_cast<int>(rows), kBlock, 0, stream>>>(a, terms);
  }
  launched("pointwise_strip_kernel");
}

}  // namespace

void draw_samples(std::uint64_t seed, std::uint64_t first, int batch, const NormalLayout& layout, double sigma_x,
                  double sigma_t, double* X, double* Q, double* K, double* W_V, cudaStream_t stream) {
  const int64_t chunks = (layout.total_pairs() + kPairsPerThread - 1) / kPairsPerThread;
  const int64_t threads = static_cast<int64_t>(batch) * chunks;
  const int grid = std::min(blocks_for(threads), 1 << 16);  // grid-stride beyond that
  draw_kernel<<<grid, kBlock, 0, stream>>>(seed, first, batch, layout, sigma_x, sigma_t, X, Q, K, W_V);
  launched("draw_kernel");
}

void row_norms(const RowNormArgs& args, cudaStream_t stream) {
  row_norms_kernel<<<blocks_for(static_cast<int64_t>(args.batch) * args.n), kBlock, 0, stream>>>(args);
  launched("row_norms_kernel");
}

void scale(double* data, std::int64_t count, double factor, cudaStream_t stream) {
  scale_kernel<<<blocks_for(count), kBlock, 0, stream>>>(data, count, factor);
  launched("scale_kernel");
}

void pointwise_strip(const StripArgs& args, theory::Pointwise h, int p, cudaStream_t stream) {
  // Compile-time exponents run branch-free, as on the CPU (the same poly_entry_terms<P>).
  if (h == theory::Pointwise::poly) {
    switch (p) {
      case 2: return pointwise_with(args, PolyTerms<2>{}, stream);
      case 3: return pointwise_with(args, PolyTerms<3>{}, stream);
      case 4: return pointwise_with(args, PolyTerms<4>{}, stream);
      case 5: return pointwise_with(args, PolyTerms<5>{}, stream);
      case 6: return pointwise_with(args, PolyTerms<6>{}, stream);
      default: break;
    }
  }
  pointwise_with(args, GenericTerms<double>{h, p}, stream);
}

void softmax_probabilities(const StripArgs& args, std::int64_t* top, cudaStream_t stream) {
  const int64_t rows = static_cast<int64_t>(args.batch) * args.rows;
  if (args.n <= kWarpRowLimit) {
    softmax_probabilities_kernel<kWarp>
        <<<static_cast<int>((rows + kBlock / kWarp - 1) / (kBlock / kWarp)), kBlock, 0, stream>>>(args, top);
  } else {
    softmax_probabilities_kernel<kBlock><<<static_cast<int>(rows), kBlock, 0, stream>>>(args, top);
  }
  launched("softmax_probabilities_kernel");
}

void softmax_strip(const StripArgs& args, const std::int64_t* top, const double* u_bar, const double* x_bar,
                   cudaStream_t stream) {
  const int64_t rows = static_cast<int64_t>(args.batch) * args.rows;
  if (args.n <= kWarpRowLimit) {
    softmax_strip_kernel<kWarp>
        <<<static_cast<int>((rows + kBlock / kWarp - 1) / (kBlock / kWarp)), kBlock, 0, stream>>>(args, top, u_bar,
                                                                                                  x_bar);
  } else {
    softmax_strip_kernel<kBlock><<<static_cast<int>(rows), kBlock, 0, stream>>>(args, top, u_bar, x_bar);
  }
  launched("softmax_strip_kernel");
}

void cross_norm_values(int batch, std::int64_t n, std::int64_t dv, double mix, const double* values,
                       double* probabilities, double* mixed, unsigned long long* bad, cudaStream_t stream) {
  cross_norm_values_kernel<<<dim3(static_cast<unsigned>(batch), static_cast<unsigned>(dv)), kBlock, 0, stream>>>(
      n, dv, mix, values, probabilities, mixed, bad);
  launched("cross_norm_values_kernel");
}

void cross_norm_rows(const CrossNormRowArgs& args, cudaStream_t stream) {
  cross_norm_rows_kernel<<<static_cast<unsigned>(static_cast<int64_t>(args.batch) * args.n), kBlock, 0, stream>>>(args);
  launched("cross_norm_rows_kernel");
}

void sum_rows(int batch, std::int64_t n, int width, const double* in, double* out, cudaStream_t stream) {
  sum_rows_kernel<<<dim3(static_cast<unsigned>(batch), static_cast<unsigned>(width)), kBlock, 0, stream>>>(n, width, in,
                                                                                                           out);
  launched("sum_rows_kernel");
}

void batched_dot(int batch, std::int64_t len, const double* a, const double* c, double* out, cudaStream_t stream) {
  batched_dot_kernel<<<static_cast<unsigned>(batch), kBlock, 0, stream>>>(len, a, c, out);
  launched("batched_dot_kernel");
}

void philox_words(std::uint64_t seed, std::uint64_t first, int subsequences, int blocks, bool sequential,
                  std::uint32_t* out, cudaStream_t stream) {
  if (sequential) {
    philox_sequential_kernel<<<blocks_for(subsequences), kBlock, 0, stream>>>(seed, first, subsequences, blocks, out);
  } else {
    philox_offset_kernel<<<blocks_for(static_cast<int64_t>(subsequences) * blocks), kBlock, 0, stream>>>(seed, first,
                                                                                                         subsequences,
                                                                                                         blocks, out);
  }
  launched("the Philox word kernel");
}

}  // namespace attncheck::gpu::detail
