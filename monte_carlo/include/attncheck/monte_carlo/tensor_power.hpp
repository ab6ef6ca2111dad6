#pragma once
// The tensor-power path: the norms of F = c (lambda V U^T)^{o p} (elementwise x^p) in O(N) per sample, exactly.
//
// With v_i = (X Q)_i, u_j = (X K)_j and m >= 0,
//   sum_ij w_i w'_j (v_i . u_j)^m = < sum_i w_i v_i^{(x)m}, sum_j w'_j u_j^{(x)m} >,
// and a symmetric tensor of order m in d dimensions has C(d + m - 1, m) distinct entries, one per monomial
// v^alpha (|alpha| = m), which enter the inner product with the multinomial weight m! / alpha!. Every estimand
// of x^p is such a sum (entry_terms.hpp, with g = p s^{p-1}):
//   ||F||^2 / c^2          = lambda^{2p}     sum_ij (v_i . u_j)^{2p}                     order 2p, w = w' = 1
//   ||dF/dS||^2 / c^2      = p^2 lambda^{2p-2} sum_ij (v_i . u_j)^{2p-2}                 order 2p - 2
//   ||dF/dQ||^2 / c^2      = p^2 lambda^{2p}   sum_ij ||x_i||^2 ||u_j||^2 (v_i . u_j)^{2p-2}
//   ||dF/dK||^2 / c^2      = p^2 lambda^{2p}   sum_ij ||v_i||^2 ||x_j||^2 (v_i . u_j)^{2p-2}
//   sum_ij F_ij / c        = lambda^p        sum_ij (v_i . u_j)^p                        order p
// The Jacobians are the full N^2 x (D d) ones: entry (i, j) of dF/dQ is g_ij lambda x_i u_j^T, whose squared
// norm ||x_i||^2 ||u_j||^2 g_ij^2 already separates, so no cross sum over (i, j, j') arises and all four
// estimands factor. (A gradient of a scalar loss would have one; it is not an estimand here.)
// Even orders m = 2h are formed as Gram matrices: v^{(x)2h} = v^{(x)h} (x) v^{(x)h}, and with the features
// phi(v)_alpha = sqrt(h! / alpha!) v^alpha (|alpha| = h), (v . u)^h = phi(v) . phi(u), so
//   sum_ij w_i w'_j (v_i . u_j)^{2h} = < sum_i w_i phi(v_i) phi(v_i)^T, sum_j w'_j phi(u_j) phi(u_j)^T >_F:
// one GEMM per row block (weights are squared norms, so sqrt(w) rides on the features). Odd orders (row sums of
// odd p) keep the order-m sums. Cost per row: the monomials of orders 1..p, C(d + p, p) - 1 products, and
// 2 C(d + p - 1, p)^2 flops per weight of the Gram update; memory O(block rows x monomials + Gram matrices),
// independent of N. The inputs are
// drawn in row blocks from the sample's own Philox stream in the documented order (cpu_backend.hpp), so both
// paths see the same numbers; only the rounding differs.

#include "attncheck/monte_carlo/backend.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace attncheck::monte_carlo {

// How a point's samples are evaluated: score tiles / Gram matrices (direct), tensor powers, or whichever
// the flop estimate finds cheaper (automatic).
enum class EvaluationPath { automatic, direct, tensor };
// "auto", "direct", "tensor", as --path spells them.
const char* evaluation_path_name(EvaluationPath path);

// Why the tensor path cannot take these estimands of the point (empty when it can): it needs elementwise x^p
// with p >= 1 (or the identity) on projected scores, and estimands among value, dS, dQ, dK, row-sum, row-mean.
std::optional<std::string> tensor_path_unsupported(const SweepPoint& point, const std::vector<Estimand>& estimands);

// Floating-point operations of one sample on each path (projections included, random draws not).
struct PathCosts {
  double direct = 0, tensor = 0;
};
PathCosts path_flops(const SweepPoint& point, const std::vector<Estimand>& estimands);

// The path a point takes: `requested` unless automatic; then tensor when supported and cheaper. Throws
// theory::InputError when tensor is requested and unsupported (naming why), or when its monomial table
// would be absurdly large.
EvaluationPath choose_path(EvaluationPath requested, const SweepPoint& point, const std::vector<Estimand>& estimands);

// Bytes one tensor-path sample holds (its row block, monomial table and accumulators), independent of N.
std::uint64_t tensor_path_bytes(const SweepPoint& point, const std::vector<Estimand>& estimands);

// Sample k of the point on the tensor path, its rows drawn block by block. `threads` share the row blocks;
// blocks are fixed in size and summed in order, so the values do not depend on the thread count.
SampleValues evaluate_tensor_sample(const SweepPoint& point, const std::vector<Estimand>& estimands, std::uint64_t k,
                                    int threads = 1);

// The same on given inputs (tests compare it with evaluate_inputs of cpu_backend.hpp).
SampleValues evaluate_tensor_inputs(const theory::AttentionMap& map, const theory::Matrix& X, const theory::Matrix& Q,
                                    const theory::Matrix& K, const std::vector<Estimand>& estimands);

}  // namespace attncheck::monte_carlo
