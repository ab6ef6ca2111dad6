#pragma once
// Exact moments of the scores under the i.i.d. Gaussian model (THEORY.md facts 3-5, 7, 9).
// X has i.i.d. N(0, sigma_x^2) entries, Q and K i.i.d. N(0, sigma_t^2) (sigma = standard deviation);
// s = lambda * t with t = x_i^T Q K^T x_j, the entries of T = X Q K^T X^T.
//
// Every moment is computed in log space, so that large p or large D do not overflow on the way; a value
// beyond the range of a double comes back as +infinity (callers report it out of range).

#include "attncheck/theory/attention.hpp"
#include "attncheck/theory/common.hpp"

#include <optional>
#include <string_view>

namespace attncheck::theory {

struct GaussianModel {
  Index D = 1;         // model dimension
  Index d = 1;         // head dimension
  double sigma_x = 1;  // standard deviation of the entries of X
  double sigma_t = 1;  // standard deviation of the entries of Q and K
  double inner = 1;    // lambda
};

// How the scores are formed. The first two form an N x N matrix from the projections v_i = Q^T x_i and
// u_j = K^T x_j; the last two are the scaling paper's (C8) pairs of vectors q, k in R^d, drawn directly.
enum class ScoreModel {
  projected,            // s_ij = lambda v_i . u_j: the papers' model
  projected_layernorm,  // qk-layernorm (the relu paper's setup): v_i and u_j each pass through LayerNorm at
                        // initialisation (centred over their d entries, divided by the root mean square of
                        // the centred entries; no epsilon), then s_ij = lambda LN(v_i) . LN(u_j)
  unit_pairs,           // q, k with i.i.d. N(0, 1) entries, independent of each other: s = lambda q . k
  sign_coupled_pairs,   // k with i.i.d. N(0, 1) entries and q_i = eps_i k_i, eps_i independent random signs:
                        // zero-mean, unit-variance, zero covariances (the proposition's literal hypothesis), but
                        // q and k dependent
};

// Var(s) of one off-diagonal score (one pair for the pair models), exactly: projected lambda^2 (sigma_x sigma_t)^4 D^2
// d (fact 3); qk-layernorm lambda^2 d^2 / (d - 1); i.i.d. unit pairs lambda^2 d (the proposition); sign-coupled pairs
// 3 lambda^2 d (q . k = sum eps_i k_i^2, uncorrelated terms with E k^4 = 3: the proposition's hypothesis is not
// enough). The pair models ignore sigma_x, sigma_t and D.
double score_variance(ScoreModel model, const GaussianModel& gaussian);

// E[chi2_k^r] = 2^r Gamma(k/2 + r) / Gamma(k/2), any real r > -k/2, and its logarithm.
double log_chi_squared_moment(double k, double r);
double chi_squared_moment(double k, double r);
// E|Z|^q for Z ~ N(0, 1), q > -1, and its logarithm.
double log_abs_normal_moment(double q);
double abs_normal_moment(double q);

// log E[|t_ij|^{2a} ||x_i||^{2b} ||u_j||^{2b}] (lambda left out), for i != j (diagonal = false) or i = j, real
// a, b >= 0. Given x_i, x_j and K, t_ij = (Q^T x_i) . u_j is N(0, sigma_t^2 ||x_i||^2 ||u_j||^2), so with m = a + b
//   i != j: E|Z|^{2a} sigma_t^{2a} E||x_i||^{2m} E||u_j||^{2m},  ||x||^2 = sigma_x^2 chi2_D,
//           ||u_j||^2 = sigma_t^2 ||x_j||^2 chi2_d;
//   i = j:  E|Z|^{2a} sigma_t^{2a} E[||x||^{2m} ||u||^{2m}] = E|Z|^{2a} sigma_t^{2a + 2m} E[chi2_d^m] sigma_x^{4m}
//   E[chi2_D^{2m}].
// b = 0 gives the score moments (facts 3 and 4); b = 1 the weights of the Q and K Jacobians (facts 7 and 9).
double log_projection_moment(const GaussianModel& model, bool diagonal, double a, double b);

// Off-diagonal (i != j): s_ij = lambda sigma_x^2 sigma_t^2 Z sqrt(A B C), A, C ~ chi2_D, B ~ chi2_d, so
// E|s_ij|^q = |lambda|^q (sigma_x sigma_t)^{2q} E|Z|^q (E[A^{q/2}])^2 E[B^{q/2}].
double offdiagonal_abs_moment(const GaussianModel& model, double q);

// Diagonal: given x, v = Q^T x and u = K^T x are independent N(0, ||x||^2 sigma_t^2 I_d), so
// t_ii = ||x||^2 sigma_t^2 (g . h) and E|s_ii|^q = |lambda|^q (sigma_x sigma_t)^{2q} E|Z|^q E[chi2_d^{q/2}]
// E[chi2_D^q]. For q = 2 this is fact 4: sigma_x^4 sigma_t^4 (D^2 + 2D) d lambda^2.
double diagonal_abs_moment(const GaussianModel& model, double q);

// With qk-layernorm, LN(v) has squared norm d and a direction uniform on the unit sphere of the (d-1)-dimensional
// subspace orthogonal to (1, ..., 1), independent of the scale; v_i and u_j are independent given x (Q and K are),
// on and off the diagonal alike. So s = lambda d c with c the cosine between two independent uniform directions:
// c^2 ~ Beta(1/2, (d-2)/2) and E|s|^q = |lambda d|^q Gamma((q+1)/2) Gamma((d-1)/2) / (sqrt(pi) Gamma((q+d-1)/2)).
// Needs d >= 2 (a single entry has nothing left after centring). sigma_x, sigma_t and D drop out.
double layernorm_score_abs_moment(const GaussianModel& model, double q);

// The integer-p product forms, (2p-1)!! [D(D+2)...(D+2p-2)]^2 [d(d+2)...(d+2p-2)] (fact 3), and
// (2p-1)!! [d(d+2)...(d+2p-2)] [D(D+2)...(D+4p-2)] for the diagonal; same values as above, kept as an
// independent check that the Gamma-function route is right.
double offdiagonal_even_moment_product(const GaussianModel& model, int p);
double diagonal_even_moment_product(const GaussianModel& model, int p);

// Fact 9 exactly as THEORY.md writes it, for F = (lambda T)^p elementwise, with [k]_p = k(k+2)...(k+2p-2):
// off-diagonal E[phi'(s_ij)^2 ||x_i||^2 ||u_j||^2] lambda^2 =
//   lambda^2 p^2 (lambda^2 sigma_x^4 sigma_t^4)^{p-1} sigma_x^4 sigma_t^2 [D]_p [d]_p [D]_{p-1} ((2p-1)!! + (2p-3)!!
//   (D-1)),
// diagonal lambda^2 p^2 lambda^{2p-2} sigma_t^{4p-2} sigma_x^{4p} [D]_{2p} (2p-3)!! [d]_p. The product forms, kept to
// check log_projection_moment(., ., p - 1, 1) against the notes ((-1)!! = 1).
double offdiagonal_parameter_weight_product(const GaussianModel& model, int p);
double diagonal_parameter_weight_product(const GaussianModel& model, int p);

// N(N-1) off + N diag: the expectation of a sum over all N x N entries whose off-diagonal and diagonal terms have
// these expectations.
double entry_sum(Index n, double off, double diag);

// E||c * (lambda T)^{o p}||_F^2 with the elementwise power: c^2 [N(N-1) E s_off^{2p} + N E s_diag^{2p}].
double expected_poly_fro_sq(const GaussianModel& model, Index n, int p, double outer);

// E||dF/dQ||_F^2 (= E||dF/dK||_F^2 by symmetry) for the linear map F = c * lambda T (p = 1, phi' = 1):
// ||dF/dQ||^2 = c^2 lambda^2 (sum_i ||x_i||^2)(sum_j ||K^T x_j||^2), and since K^T x ~ N(0, sigma_t^2 ||x||^2 I_d),
// E = c^2 lambda^2 sigma_x^4 sigma_t^2 d [N(N-1) D^2 + N D(D+2)] (the i = j terms carry E||x||^4).
double expected_linear_parameter_jacobian_fro_sq(const GaussianModel& model, Index n, double outer);

// E||dF/dQ||_F^2 (= E||dF/dK||_F^2) for F = c (lambda T)^p elementwise, any p >= 1 (fact 9):
// c^2 p^2 lambda^{2p} [N(N-1) E(t_off^{2p-2} ||x_i||^2 ||u_j||^2) + N E(t_ii^{2p-2} ||x_i||^2 ||u_i||^2)].
double expected_poly_parameter_jacobian_fro_sq(const GaussianModel& model, Index n, int p, double outer);

// Expectations of one entry's terms, off the diagonal (i != j) or on it, for an elementwise phi under the score
// model; absent where no closed form is known. The closed forms: x^p (and identity = x^1) from the moments above;
// relu and relu^2 because s and the weights ||x_i||, ||u_j|| are jointly symmetric under Q -> -Q, which flips
// every score, so E[h(s) w] = E[h(|s|) w] / 2 for h vanishing on the negatives (E||relu(S)||^2 = E||S||^2 / 2);
// sigmoid's mean 1/2 by the same symmetry (sigmoid(s) + sigmoid(-s) = 1).
struct EntryExpectations {
  std::optional<double> value;        // E phi(s)
  std::optional<double> value_sq;     // E phi(s)^2
  std::optional<double> value_4;      // E phi(s)^4
  std::optional<double> deriv_sq;     // E phi'(s)^2
  std::optional<double> deriv_4;      // E phi'(s)^4
  std::optional<double> q_weight;     // lambda^2 E[phi'(s)^2 ||x_i||^2 ||u_j||^2] (the Q and K Jacobians)
  std::optional<double> q_weight_sq;  // lambda^4 E[(phi'(s)^2 ||x_i||^2 ||u_j||^2)^2]
};
EntryExpectations entry_expectations(const Activation& activation, const GaussianModel& model, ScoreModel scores,
                                     bool diagonal);
// The same for phi = sum_k coefficients[k] s^k: every term a sum of E[s^k] (and E[s^k ||x_i||^2 ||u_j||^2]) over
// the coefficients of phi^2, phi^4, phi'^2, phi'^4, the odd powers vanishing by the symmetry Q -> -Q (which flips
// every score, diagonal and qk-layernorm ones included, and keeps the weights). x^p is the one-term case.
EntryExpectations polynomial_entry_expectations(const std::vector<double>& coefficients, const GaussianModel& model,
                                                ScoreModel scores, bool diagonal);

}  // namespace attncheck::theory
