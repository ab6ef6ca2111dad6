#include "backend_select.hpp"

#include "subcommand.hpp"

#include "attncheck/monte_carlo/cpu_backend.hpp"
#ifdef ATTNCHECK_HAVE_CUDA
#include "attncheck/gpu/cuda_backend.hpp"
#endif

#include <fmt/format.h>

#include <cstdio>

namespace attncheck::cli {

std::unique_ptr<monte_carlo::Backend> select_backend(const std::string& requested, int threads, theory::Index tile,
                                                     monte_carlo::EvaluationPath path) {
  if (requested == "cpu") return std::make_unique<monte_carlo::CpuBackend>(threads, tile, path);
  if (requested == "auto") {
#ifdef ATTNCHECK_HAVE_CUDA
    if (gpu::cuda_device_count() > 0) {
      fmt::print(stderr, "attncheck: backend auto: CUDA on device 0, {}\n", gpu::cuda_device_description(0));
      return gpu::make_cuda_backend(0);
    }
    fmt::print(stderr, "attncheck: backend auto: no CUDA device answers, using the CPU\n");
#else
    fmt::print(stderr, "attncheck: backend auto: built without CUDA support, using the CPU\n");
#endif
    return std::make_unique<monte_carlo::CpuBackend>(threads, tile, path);
  }
  if (requested == "cuda") {
#ifdef ATTNCHECK_HAVE_CUDA
    if (gpu::cuda_device_count() == 0) {
      throw UsageError("--backend cuda: no CUDA device answers (no GPU, or no driver) (use --backend cpu or auto)");
    }
    return gpu::make_cuda_backend(0);
#else
    throw UsageError("--backend cuda: this attncheck was built without CUDA support (use --backend cpu or auto)");
#endif
  }
  throw UsageError(fmt::format("--backend {}: not one of auto, cpu, cuda", requested));
}

}  // namespace attncheck::cli
