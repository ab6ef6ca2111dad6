#pragma once
// The CPU backend: Philox draws, Eigen GEMMs and tiled on-the-fly reductions of the score matrix.
//
// Sample k of a point draws from PhiloxStream(point.seed, k), in this fixed order: X (N x D, row-major),
// then Q (D x d, row-major), then K (D x d, row-major), then for C9 only W_V (D x dv, row-major); each matrix consumes
// whole normal pairs (an odd count discards its last spare draw), so every backend that follows the order sees the same
// numbers.
//
// C8's pair models (theory::ScoreModel::unit_pairs, sign_coupled_pairs) draw, for sample k, the N key vectors
// (N x d N(0, 1) entries, row-major), then either the N query vectors the same way (unit pairs) or one block per
// entry for its sign (sign-coupled: eps = +1 when the block's first 53-bit uniform is below 1/2).
//
// Paths, chosen per estimand:
// - score-var, and every estimand of the linear maps (poly p = 1, identity): O(N d^2) from the Gram
//   matrices (fact 6: ||S||_F^2 = lambda^2 <V^T V, U^T U>_F) and row norms; no score is formed.
// - matrix-power reading (value only): S^p = lambda^p V (U^T V)^(p-1) U^T, so with M = lambda^p (U^T V)^(p-1),
//   ||S^p||_F^2 = tr(M^T V^T V M U^T U): also O(N d^2 + p d^3), any N, no N x N matrix.
// - qk-layernorm: the rows of X Q and X K are layer-normalized first; every path above then applies to them.
// - row sums (row-sum, row-mean): sum_ij phi(s_ij), for the linear maps lambda (sum_i v_i) . (sum_j u_j), for softmax
//   N, otherwise a tiled pass of its own.
// - elementwise x^p on projected scores (value, dS, dQ, dK, row sums): tensor powers, O(N C(d + 2p, 2p)) per
//   sample and exact (tensor_power.hpp), when the flop estimate says it is cheaper or --path tensor asks.
// - every other map: score tiles of tile x tile entries, lambda V_I U_J^T by GEMM, reduced on the fly with
//   the per-entry terms of entry_terms.hpp (softmax: a first pass for the row max, normalizer, ubar_i and
//   xbar_i with online rescaling, a second for the probabilities). Memory O(N (D + d) + tile^2) per thread.
//   The powers x^p, p = 2..6, on CPUs with AVX-512 (and under --precision mixed on any CPU): register blocks of
//   12 x 16 scores (FP32: 12 x 32) from packed panels of V and U, reduced in registers, never stored. Under
//   --precision mixed with only norms asked, V and U are themselves projected in FP32 (SGEMM).
// Threads: samples in parallel when a call has at least as many samples as threads, otherwise the row
// blocks of one sample; partial sums are combined in a fixed order, so the values do not depend on threads.

#include "attncheck/monte_carlo/backend.hpp"
#include "attncheck/monte_carlo/tensor_power.hpp"
#include "attncheck/theory/common.hpp"

namespace attncheck::monte_carlo {

struct SampleInputs {
  theory::Matrix X, Q, K;
  theory::Matrix W_V;  // C9 only (point.mix set): D x dv, drawn after K with sigma_t
};

// Sample k of the point, in the documented order.
void draw_sample(const SweepPoint& point, std::uint64_t k, SampleInputs& out);

// ||lambda V U^T||_F^2 = lambda^2 <V^T V, U^T U>_F (fact 6).
double gram_frobenius_sq(const theory::Matrix& V, const theory::Matrix& U, double inner);

struct EvaluationOptions {
  theory::Index tile = 256;
  int threads = 1;                                            // threads over the row blocks of this one sample
  theory::ScoreModel scores = theory::ScoreModel::projected;  // projected or projected_layernorm
  ScorePrecision precision = ScorePrecision::fp64;
};

// LayerNorm at initialisation on every row (no scale, shift or epsilon): centred, divided by the root mean
// square of the centred entries. Throws theory::InputError naming a row without spread.
void layer_normalize_rows(theory::Matrix& rows);

// (q . k)^2 averaged over the N pairs of sample k of a pair model (before lambda).
double pair_sample_mean_square(const SweepPoint& point, std::uint64_t k);

// The requested estimands of F on these inputs (NaN for those not requested). Throws theory::InputError for
// an estimand the map does not have (derivatives of the matrix power) or a NaN score (naming where).
SampleValues evaluate_inputs(const theory::AttentionMap& map, const theory::Matrix& X, const theory::Matrix& Q,
                             const theory::Matrix& K, const std::vector<Estimand>& estimands,
                             const EvaluationOptions& options = {});

// C9's estimands of one drawn sample: S = lambda X W_Q (X W_K)^T, A = row_softmax(S), V = X W_V and
// O = A P_mix, through theory/cross_norm.hpp's closed forms on the dense N x N attention (O(N^2 d_v) for value,
// dV, dS; O(N^2 d_v d) for dQ). Throws theory::InputError for estimands C9 does not have.
SampleValues evaluate_cross_norm(const SweepPoint& point, const SampleInputs& inputs,
                                 const std::vector<Estimand>& estimands);

class CpuBackend final : public Backend {
 public:
  // threads <= 0: OpenMP's default (all cores).
  explicit CpuBackend(int threads = 0, theory::Index tile = 256, EvaluationPath path = EvaluationPath::automatic,
                      ScorePrecision precision = ScorePrecision::fp64);
  std::string name() const override { return "cpu"; }
  std::string describe() const override;
  int threads() const override { return threads_; }
  ScorePrecision precision() const { return precision_; }
  // The most bytes an evaluate() call holds for this point on the direct path: every thread's inputs,
  // projections, d x d Gram matrices and score tiles (saturating: absurd sizes compare as too large, never wrap).
  std::uint64_t host_bytes_needed(const SweepPoint& point) const;
  // The same on the path these estimands of the point take.
  std::uint64_t host_bytes_needed(const SweepPoint& point, const std::vector<Estimand>& estimands) const override;
  // direct or tensor: what evaluate() does with this point (throws as choose_path does).
  EvaluationPath path_for(const SweepPoint& point, const std::vector<Estimand>& estimands) const {
    return choose_path(path_, point, estimands);
  }
  const char* evaluation_path(const SweepPoint& point, const std::vector<Estimand>& estimands) const override {
    return evaluation_path_name(path_for(point, estimands));
  }
  void evaluate(const SweepPoint& point, const std::vector<Estimand>& estimands, std::uint64_t first,
                std::uint64_t count, std::vector<SampleValues>& out) override;

 private:
  int threads_;
  theory::Index tile_;
  ScorePrecision precision_;
  EvaluationPath path_;
};

// Whether --precision mixed forms this point's scores in FP32: the tiled elementwise powers x^p, p = 2..6
// (every other map and path, the Gram and matrix-power ones included, stays FP64).
bool uses_fp32_scores(const SweepPoint& point, const std::vector<Estimand>& estimands);

// Relative error bound of --precision mixed on each per-sample sum (E||F||^2 and the Jacobians' squared norms)
// at exponent p, head dimension d and model dimension D, for Gaussian inputs (docs/THEORY.md "Mixed precision"):
// with r = 2 sqrt(D) (D + 4) from the FP32 projections, 2p (d + r) 2^-24 sqrt(d) + (r + p + 1) 2^-24.
double mixed_precision_relative_bound(int p, theory::Index d, theory::Index D);

}  // namespace attncheck::monte_carlo
