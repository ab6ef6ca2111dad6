#include "attncheck/records/claims.hpp"

#include <fmt/format.h>

#include <array>

namespace attncheck::records {

namespace {
constexpr std::string_view kValueGrowth = "D^p (sigma_x sigma_t)^{2p} (sqrt(d) inside the power)";
constexpr std::string_view kGradientGrowth = "sigma_x^{2p} sigma_t^{2p-1} D^p d^{(p-1)/2} (sqrt(d) outside the power)";

constexpr std::array<Claim, 9> kClaims{{
    {"C1", "Thm 4.1 (4.1)", "Thm 4.1 (6)", "||softmax(A)||_F <= sqrt(N) for every A in R^{N x N}", 0.5, "", false},
    {"C2", "Thm 4.1 (4.2)", "Thm 4.1 (7)",
     "||grad softmax(A)||_F <= 2 sqrt(N); grad softmax(A) is the (transposed) Jacobian of the map "
     "R^{NxN} -> R^{NxN}, an N^2 x N^2 matrix, block-diagonal by rows",
     0.5, "", false},
    {"C3", "Thm 4.2 (4.3)", "Thm 4.2 (8)", "X, Q, K i.i.d. Gaussian: E||(X Q K^T X^T / sqrt d)^p||_F = O(N) for p >= 1",
     1.0, kValueGrowth},
    {"C4", "Cor 4.3 (4.4)", "Cor 4.1 (9)", "with the factor 1/sqrt(N) in front: O(sqrt N)", 0.5, kValueGrowth},
    {"C5", "Thm 4.4 (4.5)", "Thm 4.3 (10)", "E||d/dQ ((X Q K^T X^T)^p / sqrt d)||_F = O(N) (sqrt(d) outside the power)",
     1.0, kGradientGrowth},
    {"C6", "Cor 4.5 (4.6)", "Cor 4.2 (11)", "with 1/sqrt(N): O(sqrt N), and the same for K", 0.5, kGradientGrowth},
    {"C7", "relu paper, Sec. 3", "relu paper, Sec. 3",
     "at initialisation, with qk-layernorm, phi = L^-alpha h(q.k/sqrt d) for h in {relu, relu^2, gelu, softplus, "
     "identity, relu6, sigmoid}: with alpha = 1 the mean attention weight E_j[phi_ij] is O(1/L), so row sums stay "
     "O(1); the factor L^-1 is necessary (with alpha < 1 row sums grow like L^(1-alpha)). Checked as E[row sum] = "
     "O(L^(1-alpha)) and E[row mean] = O(L^-alpha), with and without qk-layernorm; the Frobenius norm is a secondary "
     "series",
     std::nullopt, ""},
    {"C8", "scaling paper, Prop. 5", "scaling paper, Prop. 5",
     "q, k with zero-mean, unit-variance entries and zero covariances: Var(q . k) = d_k. Checked for i.i.d. "
     "entries (the proposition's intent), for the literal hypothesis (q_i = eps_i k_i: zero covariances, "
     "dependent), and for the projected model q = Q^T x, k = K^T x' of a transformer at initialisation",
     1.0, ""},
    {"C9", "cross-normalization RFP", "cross-normalization RFP",
     "O = softmax(X W_Q W_K^T X^T / sqrt d) P_alpha with P_alpha = alpha softmax_col(X W_V) + (1 - alpha) X W_V "
     "(mix alpha; alpha = 1 is softmax(S) softmax^T(V)): ||O||_F, ||dO/dV||_F, ||dO/dS||_F and ||dO/dW_Q||_F "
     "are O(sqrt N). At alpha = 1 facts 10-11 bound every input: ||O||_F <= sqrt(N d_v), ||dO/dV||_F and "
     "||dO/dS||_F <= sqrt(N d_v / 8); for alpha < 1 nothing bounds them in V",
     0.5, ""},
}};
}  // namespace

std::string Claim::numbering() const {
  if (v1 == v2) return std::string(v1);
  return fmt::format("v1: {} / v2: {}", v1, v2);
}

std::span<const Claim> all_claims() { return kClaims; }

std::vector<std::string_view> sampled_claim_ids() {
  std::vector<std::string_view> ids;
  for (const Claim& claim : kClaims) {
    if (claim.sampled) ids.push_back(claim.id);
  }
  return ids;
}

std::optional<Claim> find_claim(std::string_view id) {
  for (const Claim& claim : kClaims) {
    if (claim.id == id) return claim;
  }
  return std::nullopt;
}

}  // namespace attncheck::records
