#pragma once
// The CUDA backend behind the Backend interface of backend.hpp. Host-only header: using it needs no CUDA
// include. Sample k of a point uses cuRAND's Philox stream curand_init(point seed, k, 0), the stream the CPU
// backend draws from, in the CPU's order (normal_layout.hpp); the per-entry math is entry_terms.hpp, shared
// with the CPU. Score strips are formed in double by cuBLAS and reduced on the fly; the N x N matrix never
// exists (memory O(N (D + d)) per sample plus a score buffer of about half the L2 cache).

#include "attncheck/gpu/cuda_devices.hpp"
#include "attncheck/monte_carlo/backend.hpp"
#include "attncheck/monte_carlo/backend_registry.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>

namespace attncheck::gpu {

struct CudaBackendOptions {
  // Bytes of the score-strip buffer; 0 picks default_score_buffer_bytes (batch_plan.hpp): half of the device's L2
  // cache (at least 8 MiB), so that cuBLAS writes a strip and the reduction reads it back from L2.
  std::size_t score_buffer_bytes = 0;
  // What the run asks (the CPU's path and precision decide which points the CPU takes instead).
  monte_carlo::BackendRequest request;
};

// Throws CudaError naming the device when it does not answer.
std::unique_ptr<monte_carlo::Backend> make_cuda_backend(int device, const CudaBackendOptions& options = {});

}  // namespace attncheck::gpu
