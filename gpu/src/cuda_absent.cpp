// cuda_devices.hpp in a build without CUDA (linked instead of cuda_backend.cpp): no device answers, and the
// reason says how to build with CUDA.

#include "attncheck/gpu/cuda_devices.hpp"
#include "attncheck/monte_carlo/backend_registry.hpp"

namespace attncheck::gpu {
namespace {

const char* const kReason = "built without CUDA support (configure with -DATTNCHECK_CUDA=ON on a machine with nvcc)";

// Registered unavailable, so that --backend cuda says why rather than that no such backend exists.
const bool registered = monte_carlo::register_backend(
    {"cuda", "an NVIDIA GPU through CUDA (not in this build)", 10, [] { return std::string(kReason); },
     [](const monte_carlo::BackendRequest&) -> std::unique_ptr<monte_carlo::Backend> { throw CudaError(kReason); }});

}  // namespace

bool built_with_cuda() { return false; }

int cuda_device_count() { return 0; }

std::string cuda_unavailable_reason() { return kReason; }

std::string cuda_device_description(int device) {
  (void)device;
  throw CudaError(kReason);
}

SelftestTarget cuda_selftest_target(int device) {
  (void)device;
  throw CudaError(kReason);
}

}  // namespace attncheck::gpu
