#pragma once
// Per-entry contributions to the squared Frobenius norms of F = c * phi(S) and of its Jacobians (THEORY.md
// fact 7), written once for the CPU tiles and, unchanged, for CUDA kernels. Header-only and free of Eigen.
//
// Elementwise phi, with g = phi'(s_ij):
//   ||F||^2      = c^2 sum_ij phi(s_ij)^2
//   ||dF/dS||^2  = c^2 sum_ij g^2
//   ||dF/dQ||^2  = c^2 lambda^2 sum_i ||x_i||^2 sum_j g^2 ||u_j||^2
//   ||dF/dK||^2  = c^2 lambda^2 sum_i ||v_i||^2 sum_j g^2 ||x_j||^2
// so a row i accumulates four sums over j and the row's own factors are applied once per row.
// Row softmax (a = probabilities, top = the row's first largest entry), as theory::row_norms_from_probabilities
// but accumulated entry by entry across column tiles, every term non-negative so near one-hot rows keep
// their digits:
//   ||J_row||^2 = a_top^2 (1 - a_top)^2 + a_top^2 rest_sq + sum_{k != top} a_k^2 (1 - a_k)^2 + rest_sq sum_sq - rest_4
// with 1 - a_top = rest_mass formed from the small entries.

#include "attncheck/theory/host_device.hpp"
#include "attncheck/theory/pointwise.hpp"

namespace attncheck::monte_carlo {

template <class Real>
struct EntryTerms {
  Real value_sq;  // phi(s)^2
  Real deriv_sq;  // phi'(s)^2, also the weight of ||u_j||^2 (dQ) and of ||x_j||^2 (dK)
};

template <class Real>
ATTNCHECK_HD inline EntryTerms<Real> pointwise_entry_terms(theory::Pointwise h, int p, Real s) {
  const Real f = theory::pointwise_value(h, p, s);
  const Real g = theory::pointwise_derivative(h, p, s);
  return {f * f, g * g};
}

// x^P with P fixed at compile time: branch-free, so a SIMD loop (and a GPU warp) runs it without divergence.
// Same values as pointwise_entry_terms(poly, P, s) up to the rounding of the product order.
template <int P, class Real>
ATTNCHECK_HD inline EntryTerms<Real> poly_entry_terms(Real s) {
  static_assert(P >= 1, "poly exponent must be >= 1");
  const Real s_sq = s * s;
  Real s_sq_pm1 = 1;  // s^(2P-2)
  for (int k = 1; k < P; ++k) s_sq_pm1 *= s_sq;
  return {s_sq_pm1 * s_sq, Real(P * P) * s_sq_pm1};
}

template <class Real>
struct PointwiseRowSums {
  Real value_sq = 0;  // sum_j phi(s_ij)^2
  Real deriv_sq = 0;  // sum_j phi'(s_ij)^2
  Real dq_inner = 0;  // sum_j phi'(s_ij)^2 ||u_j||^2
  Real dk_inner = 0;  // sum_j phi'(s_ij)^2 ||x_j||^2
};

template <class Real>
ATTNCHECK_HD inline void add_entry(PointwiseRowSums<Real>& row, EntryTerms<Real> t, Real u_sq_j, Real x_sq_j) {
  row.value_sq += t.value_sq;
  row.deriv_sq += t.deriv_sq;
  row.dq_inner += t.deriv_sq * u_sq_j;
  row.dk_inner += t.deriv_sq * x_sq_j;
}

// Row totals of the elementwise estimands, before the common factor c^2 (and lambda^2 for dQ, dK).
template <class Real>
struct NormSums {
  Real value_sq = 0, dS_sq = 0, dQ_sq = 0, dK_sq = 0;
};

template <class Real>
ATTNCHECK_HD inline void finish_pointwise_row(NormSums<Real>& total, const PointwiseRowSums<Real>& row, Real x_sq_i,
                                              Real v_sq_i) {
  total.value_sq += row.value_sq;
  total.dS_sq += row.deriv_sq;
  total.dQ_sq += x_sq_i * row.dq_inner;
  total.dK_sq += v_sq_i * row.dk_inner;
}

// The second pass over a softmax row, once its max, normalizer, ubar_i and xbar_i are known.
template <class Real>
struct SoftmaxRowSums {
  Real rest_mass = 0;       // sum_{k != top} a_k
  Real rest_sq = 0;         // sum_{k != top} a_k^2
  Real rest_4 = 0;          // sum_{k != top} a_k^4
  Real rest_one_minus = 0;  // sum_{k != top} a_k^2 (1 - a_k)^2
  Real top = 0;             // a_top
  Real dq_inner = 0;        // sum_j a_j^2 ||u_j - ubar_i||^2
  Real dk_inner = 0;        // sum_j a_j^2 ||x_j - xbar_i||^2
};

template <class Real>
ATTNCHECK_HD inline void add_softmax_probability(SoftmaxRowSums<Real>& row, Real a, bool is_top) {
  if (is_top) {
    row.top = a;
    return;
  }
  const Real a_sq = a * a;
  row.rest_mass += a;
  row.rest_sq += a_sq;
  row.rest_4 += a_sq * a_sq;
  row.rest_one_minus += a_sq * (Real(1) - a) * (Real(1) - a);
}

// sum_k (y_k - ybar_k)^2 over a row of length n: the differences are formed first, never expanded.
template <class Real>
ATTNCHECK_HD inline Real squared_distance(const Real* y, const Real* ybar, int n) {
  Real sum = 0;
  for (int k = 0; k < n; ++k) {
    const Real diff = y[k] - ybar[k];
    sum += diff * diff;
  }
  return sum;
}

template <class Real>
ATTNCHECK_HD inline void finish_softmax_row(NormSums<Real>& total, const SoftmaxRowSums<Real>& row, Real x_sq_i,
                                            Real v_sq_i) {
  const Real top_sq = row.top * row.top;
  const Real sum_sq = top_sq + row.rest_sq;
  total.value_sq += sum_sq;
  total.dS_sq += top_sq * row.rest_mass * row.rest_mass + top_sq * row.rest_sq + row.rest_one_minus +
                 row.rest_sq * sum_sq - row.rest_4;
  total.dQ_sq += x_sq_i * row.dq_inner;
  total.dK_sq += v_sq_i * row.dk_inner;
}

}  // namespace attncheck::monte_carlo
