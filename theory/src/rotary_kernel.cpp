#include "rotary_kernel.hpp"

#include <algorithm>

namespace attncheck::theory::detail {

namespace {

// For Gram rows r = 0, 1 (keys j and j + 1): sum_{l<n} w_l t_rl and sum_{l<n} u_l t_rl with t_rl = g_r[l] c_r[l],
// the loop that is the O(N^3) of a rotary head. Two Gram rows share each load of w and u; the lanes are independent
// accumulators, so that the compiler vectorizes the loop without reordering any one sum, and their count covers the
// latency of the multiply-adds.
inline void lower_sums_lanes(const double* g0, const double* g1, const double* c, const double* c1, const double* w,
                             const double* u, Index n, double* p, double* q) {
  constexpr int kLanes = 16;
  double p0[kLanes] = {}, q0[kLanes] = {}, p1[kLanes] = {}, q1[kLanes] = {};
  Index l = 0;
  for (; l + kLanes <= n; l += kLanes) {
    for (int lane = 0; lane < kLanes; ++lane) {
      const double t0 = g0[l + lane] * c[l + lane], t1 = g1[l + lane] * c1[l + lane];
      p0[lane] += w[l + lane] * t0;
      q0[lane] += u[l + lane] * t0;
      p1[lane] += w[l + lane] * t1;
      q1[lane] += u[l + lane] * t1;
    }
  }
  double sums[4] = {};
  for (; l < n; ++l) {
    const double t0 = g0[l] * c[l], t1 = g1[l] * c1[l];
    sums[0] += w[l] * t0;
    sums[1] += u[l] * t0;
    sums[2] += w[l] * t1;
    sums[3] += u[l] * t1;
  }
  for (int lane = 0; lane < kLanes; ++lane) {
    sums[0] += p0[lane];
    sums[1] += q0[lane];
    sums[2] += p1[lane];
    sums[3] += q1[lane];
  }
  p[0] = sums[0];
  q[0] = sums[1];
  p[1] = sums[2];
  q[1] = sums[3];
}

// The rest of the build targets baseline x86-64 so that one binary runs anywhere; this loop is also compiled for
// AVX2 and AVX-512 and chosen at run time, as the Monte Carlo engine's rows are. (The choice changes the order of
// the lanes' partial sums, i.e. the last bits, per machine.)
using LowerSums = void (*)(const double*, const double*, const double*, const double*, const double*, const double*,
                           Index, double*, double*);
void lower_sums_baseline(const double* g0, const double* g1, const double* c, const double* c1, const double* w,
                         const double* u, Index n, double* p, double* q) {
  lower_sums_lanes(g0, g1, c, c1, w, u, n, p, q);
}
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx2,fma"), flatten)) void lower_sums_avx2(const double* g0, const double* g1, const double* c,
                                                                  const double* c1, const double* w, const double* u,
                                                                  Index n, double* p, double* q) {
  lower_sums_lanes(g0, g1, c, c1, w, u, n, p, q);
}
__attribute__((target("avx512f,fma"), flatten)) void lower_sums_avx512(const double* g0, const double* g1,
                                                                       const double* c, const double* c1,
                                                                       const double* w, const double* u, Index n,
                                                                       double* p, double* q) {
  lower_sums_lanes(g0, g1, c, c1, w, u, n, p, q);
}
#endif

LowerSums lower_sums() {
#if defined(__x86_64__) && defined(__GNUC__)
  static const LowerSums chosen = [] {
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma")) return &lower_sums_avx512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return &lower_sums_avx2;
    return &lower_sums_baseline;
  }();
  return chosen;
#else
  return &lower_sums_baseline;
#endif
}

}  // namespace

RotaryKernelRows::RotaryKernelRows(Index rows, Index offset, Index length)
    : rows_(rows),
      offset_(offset),
      length_(length),
      w_(static_cast<std::size_t>(rows * length), 0.0),
      u_(w_.size(), 0.0),
      reversed_cosines_(w_.size(), 0.0) {}

void RotaryKernelRows::set_row(Index k, const Vector& w, const Vector& u, const double* cosines) {
  std::copy(w.begin(), w.end(), w_.begin() + k * length_);
  std::copy(u.begin(), u.end(), u_.begin() + k * length_);
  std::reverse_copy(cosines, cosines + length_, reversed_cosines_.begin() + k * length_);
}

// B is symmetric (G is, and C_k is even), so each form is its diagonal plus twice, or both ways, its lower
// triangle: with P_j = sum_{l<j} w_l B(j, l) and Q_j = sum_{l<j} u_l B(j, l),
//   w^T B w = sum_j w_j (w_j B(j, j) + 2 P_j),   u^T B w = sum_j u_j (w_j B(j, j) + P_j) + w_j Q_j.
std::vector<KernelForms> RotaryKernelRows::forms(const Matrix& gram) const {
  const LowerSums sums = lower_sums();
  std::vector<KernelForms> out(static_cast<std::size_t>(rows_));
  // Keys j and j + 1 together. On an odd length the last key j has no partner: its row is passed twice and the second
  // result is not used.
  for (Index j = 0; j < length_; j += 2) {
    const bool pair = j + 1 < length_;
    const Index j1 = pair ? j + 1 : j;
    const double* g0 = gram.row(offset_ + j).data() + offset_;
    const double* g1 = gram.row(offset_ + j1).data() + offset_;
    for (Index k = 0; k < rows_; ++k) {
      const double* w = w_.data() + k * length_;
      const double* u = u_.data() + k * length_;
      // Past the row's keys, or its most probable key.
      if (w[j] == 0 && u[j] == 0 && (!pair || (w[j1] == 0 && u[j1] == 0))) continue;
      const double* reversed = reversed_cosines_.data() + k * length_;
      double p[2], q[2];
      const double* c = reversed + (length_ - 1 - j);
      sums(g0, g1, c, pair ? c - 1 : c, w, u, j, p, q);
      KernelForms& f = out[static_cast<std::size_t>(k)];
      const auto add = [&](Index key, const double* g, double p_key, double q_key) {
        const double diagonal = w[key] * g[key] * reversed[length_ - 1];
        f.ww += w[key] * (diagonal + 2 * p_key);
        f.uw += u[key] * (diagonal + p_key) + w[key] * q_key;
      };
      add(j, g0, p[0], q[0]);
      if (pair) {
        // Key j + 1's sums also run over l = j, at distance 1.
        const double t = g1[j] * reversed[length_ - 2];
        add(j1, g1, p[1] + w[j] * t, q[1] + u[j] * t);
      }
    }
  }
  return out;
}

}  // namespace attncheck::theory::detail
