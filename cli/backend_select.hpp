#pragma once
// Which Monte Carlo backend runs a sweep: --backend auto|cpu|cuda.

#include "attncheck/monte_carlo/backend.hpp"
#include "attncheck/monte_carlo/tensor_power.hpp"
#include "attncheck/theory/common.hpp"

#include <memory>
#include <string>

namespace attncheck::cli {

// "cpu": the CPU backend with `threads` OpenMP threads (0: all cores) and score tiles of tile x tile. "cuda": refused with a UsageError
// while the program is built without CUDA support. "auto": CUDA when built with it and a device answers
// (said on stderr), otherwise the CPU.
std::unique_ptr<monte_carlo::Backend> select_backend(
    const std::string& requested, int threads = 0, theory::Index tile = 256,
    monte_carlo::EvaluationPath path = monte_carlo::EvaluationPath::automatic);

}  // namespace attncheck::cli
