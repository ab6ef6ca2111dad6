#include "backend_select.hpp"

#include "subcommand.hpp"

#include "attncheck/monte_carlo/cpu_backend.hpp"

#include <fmt/format.h>

namespace attncheck::cli {

std::unique_ptr<monte_carlo::Backend> select_backend(const std::string& requested, int threads, theory::Index tile) {
  if (requested == "cpu" || requested == "auto") return std::make_unique<monte_carlo::CpuBackend>(threads, tile);
  if (requested == "cuda") {
    throw UsageError("--backend cuda: this attncheck was built without CUDA support (use --backend cpu or auto)");
  }
  throw UsageError(fmt::format("--backend {}: not one of auto, cpu, cuda", requested));
}

}  // namespace attncheck::cli
