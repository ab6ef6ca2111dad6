#pragma once
// The per-entry terms of the cross-normalization closed forms (cross_norm.hpp, THEORY.md fact 11), compiled for
// the CPU and, unchanged, inside the CUDA kernels of the Monte Carlo backend, so that the host tests of the
// closed forms pin the device arithmetic too.

#include "attncheck/theory/host_device.hpp"

namespace attncheck::theory {

// For row i, token j and value column k, with a = a_ij, p = softmax_col(V)_jk, q = P_mix(j, k),
// o = O_ik = (A P_mix)_ik and phat = (A softmax_col(V))_ik:
struct CrossNormEntryTerms {
  double grad_values;  // the (i,k),(j,k) entry of dO/dV: mix p (a - phat) + (1 - mix) a
  double grad_scores;  // the (i,k),(i,j) entry of dO/dS: a (q - o); also (g_ik)_j of the projection derivatives
};

ATTNCHECK_HD inline CrossNormEntryTerms cross_norm_entry_terms(double a, double p, double q, double o, double phat,
                                                               double mix) {
  return {mix * p * (a - phat) + (1 - mix) * a, a * (q - o)};
}

}  // namespace attncheck::theory
