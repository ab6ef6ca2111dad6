#pragma once
// What the CUDA backend computes, decided on the host (and tested without a GPU): the papers' projected scores,
// their norms, score-var and C9's cross-normalized output, in double precision on the direct path. run_mc hands
// every other point to the CPU backend and says so.

#include "attncheck/monte_carlo/backend.hpp"
#include "attncheck/monte_carlo/backend_registry.hpp"

#include <string>
#include <vector>

namespace attncheck::gpu {

// Empty when the CUDA backend, made with `request`, evaluates these estimands of the point; otherwise why not.
std::string cuda_unsupported_reason(const monte_carlo::SweepPoint& point,
                                    const std::vector<monte_carlo::Estimand>& estimands,
                                    const monte_carlo::BackendRequest& request);

// Throws theory::InputError when the run as a whole asks what the CUDA backend never does (FP32 score tiles).
void check_cuda_request(const monte_carlo::BackendRequest& request);

}  // namespace attncheck::gpu
