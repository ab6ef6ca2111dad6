#include "attncheck/reports/claims.hpp"

#include <array>

namespace attncheck::reports {

namespace {
constexpr std::array<ClaimStatement, 9> kClaims{{
    {"C1", "v1: Thm 4.1 (4.1) / v2: Thm 4.1 (6)", "||softmax(A)||_F <= sqrt(N) for every A in R^{N x N}"},
    {"C2", "v1: Thm 4.1 (4.2) / v2: Thm 4.1 (7)",
     "||grad softmax(A)||_F <= 2 sqrt(N); grad softmax(A) is the (transposed) Jacobian of the map "
     "R^{NxN} -> R^{NxN}, an N^2 x N^2 matrix, block-diagonal by rows"},
    {"C3", "v1: Thm 4.2 (4.3) / v2: Thm 4.2 (8)",
     "X, Q, K i.i.d. Gaussian: E||(X Q K^T X^T / sqrt d)^p||_F = O(N) for p >= 1"},
    {"C4", "v1: Cor 4.3 (4.4) / v2: Cor 4.1 (9)", "with the factor 1/sqrt(N) in front: O(sqrt N)"},
    {"C5", "v1: Thm 4.4 (4.5) / v2: Thm 4.3 (10)",
     "E||d/dQ ((X Q K^T X^T)^p / sqrt d)|| = O(N) (sqrt(d) outside the power here)"},
    {"C6", "v1: Cor 4.5 (4.6) / v2: Cor 4.2 (11)",
     "with 1/sqrt(N): O(sqrt N); \"an analogous estimate holds for K\""},
    {"C7", "relu paper, Sec. 3",
     "at initialisation, with qk-layernorm, phi = L^{-alpha} h(.) for h in {relu, relu^2, gelu, softplus, identity, "
     "relu6, sigmoid}: with alpha = 1 the expected attention weight E_j[alpha_ij] is O(1/L), so row sums stay O(1); "
     "the factor L^{-1} is necessary (without it row sums grow like L). Checked on E[row sum] and E[row mean], with "
     "and without qk-layernorm; the Frobenius norm is a secondary series"},
    {"C8", "scaling paper, Prop. 5",
     "q, k with zero-mean, unit-variance entries and zero covariances: Var(q . k) = d_k. Checked for i.i.d. entries, "
     "for the literal hypothesis (q_i = eps_i k_i: zero covariances, dependent) and for the projected model q = Q^T x"},
    {"C9", "cross-normalization RFP",
     "softmax(c K Q^T) softmax^T(V) (softmax over columns of V) and the mix alpha*softmax^T(V) + (1-alpha)*V: "
     "||O||_F, ||dO/dV||_F, ||dO/dS||_F and ||dO/dW_Q||_F are O(sqrt N); at alpha = 1 deterministically (facts 10-11), "
     "for alpha < 1 checked by the asymptotic fit"},
}};
}  // namespace

std::optional<ClaimStatement> find_claim(std::string_view id) {
  for (const ClaimStatement& claim : kClaims) {
    if (claim.id == id) return claim;
  }
  return std::nullopt;
}

}  // namespace attncheck::reports
