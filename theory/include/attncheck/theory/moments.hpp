#pragma once
// Exact moments of the scores under the i.i.d. Gaussian model (THEORY.md facts 3-5).
// X has i.i.d. N(0, sigma_x^2) entries, Q and K i.i.d. N(0, sigma_t^2) (sigma = standard deviation);
// s = lambda * T with T = X Q K^T X^T.

#include "attncheck/theory/common.hpp"

#include <optional>

namespace attncheck::theory {

struct GaussianModel {
  Index D = 1;           // model dimension
  Index d = 1;           // head dimension
  double sigma_x = 1;    // standard deviation of the entries of X
  double sigma_t = 1;    // standard deviation of the entries of Q and K
  double inner = 1;      // lambda
};

// E[chi2_k^r] = 2^r Gamma(k/2 + r) / Gamma(k/2), any real r > -k/2.
double chi_squared_moment(double k, double r);
// E|Z|^q for Z ~ N(0, 1), q > -1.
double abs_normal_moment(double q);

// Off-diagonal (i != j): s_ij = lambda sigma_x^2 sigma_t^2 Z sqrt(A B C), A, C ~ chi2_D, B ~ chi2_d, so
// E|s_ij|^q = |lambda|^q (sigma_x sigma_t)^{2q} E|Z|^q (E[A^{q/2}])^2 E[B^{q/2}].
double offdiagonal_abs_moment(const GaussianModel& model, double q);

// Diagonal: given x, v = Q^T x and u = K^T x are independent N(0, ||x||^2 sigma_t^2 I_d), so
// t_ii = ||x||^2 sigma_t^2 (g . h) and E|s_ii|^q = |lambda|^q (sigma_x sigma_t)^{2q} E|Z|^q E[chi2_d^{q/2}] E[chi2_D^q].
// For q = 2 this is fact 4: sigma_x^4 sigma_t^4 (D^2 + 2D) d lambda^2.
double diagonal_abs_moment(const GaussianModel& model, double q);

// The integer-p product forms, (2p-1)!! [D(D+2)...(D+2p-2)]^2 [d(d+2)...(d+2p-2)] (fact 3), and
// (2p-1)!! [d(d+2)...(d+2p-2)] [D(D+2)...(D+4p-2)] for the diagonal; same values as above, kept as an
// independent check that the Gamma-function route is right.
double offdiagonal_even_moment_product(const GaussianModel& model, int p);
double diagonal_even_moment_product(const GaussianModel& model, int p);

// E||c * (lambda T)^{o p}||_F^2 with the elementwise power: c^2 [N(N-1) E s_off^{2p} + N E s_diag^{2p}].
double expected_poly_fro_sq(const GaussianModel& model, Index n, int p, double outer);

// E||dF/dQ||_F^2 (= E||dF/dK||_F^2 by symmetry) for the linear map F = c * lambda T (p = 1, phi' = 1):
// ||dF/dQ||^2 = c^2 lambda^2 (sum_i ||x_i||^2)(sum_j ||K^T x_j||^2), and since K^T x ~ N(0, sigma_t^2 ||x||^2 I_d),
// E = c^2 lambda^2 sigma_x^4 sigma_t^2 d [N(N-1) D^2 + N D(D+2)] (the i = j terms carry E||x||^4).
double expected_linear_parameter_jacobian_fro_sq(const GaussianModel& model, Index n, double outer);

}  // namespace attncheck::theory
