#include "attncheck/gpu/cuda_scope.hpp"

#include "attncheck/monte_carlo/sample_norms.hpp"
#include "attncheck/theory/vocabulary.hpp"

#include <fmt/format.h>

namespace attncheck::gpu {

std::string cuda_unsupported_reason(const monte_carlo::SweepPoint& point,
                                    const std::vector<monte_carlo::Estimand>& estimands,
                                    const monte_carlo::BackendRequest& request) {
  if (request.path == monte_carlo::EvaluationPath::tensor) return "--path tensor is the CPU's";
  const monte_carlo::EstimandRequest asked = monte_carlo::check_request(point, estimands);
  if (point.map.activation.kind == theory::ActivationKind::expression) {
    return fmt::format("--phi {}: expression activations are evaluated on the CPU backend",
                       theory::phi_label(point.map.activation));
  }
  if (asked.layernorm || asked.pairs || asked.any_row_sum()) {
    return fmt::format(
        "scores {}{}: the CUDA backend computes the papers' projected scores without row sums; use --backend cpu",
        theory::term_of(point.scores).word, asked.any_row_sum() ? " with row sums" : "");
  }
  return {};
}

void check_cuda_request(const monte_carlo::BackendRequest& request) {
  if (request.precision == monte_carlo::ScorePrecision::mixed) {
    throw theory::InputError(
        "--precision mixed: FP32 score tiles exist on the CPU backend only, not on cuda (use --backend cpu or "
        "--precision double)");
  }
}

}  // namespace attncheck::gpu
