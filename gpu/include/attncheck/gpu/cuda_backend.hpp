#pragma once
// The CUDA backend behind the Backend interface of backend.hpp. Host-only header: using it needs no CUDA
// include. Sample k of a point uses cuRAND's Philox stream curand_init(point seed, k, 0), the stream the CPU
// backend draws from, in the CPU's order (normal_layout.hpp); the per-entry math is entry_terms.hpp, shared
// with the CPU. Score strips are formed in double by cuBLAS and reduced on the fly; the N x N matrix never
// exists (memory O(N (D + d)) per sample plus a score buffer of about half the L2 cache).

#include "attncheck/gpu/selftest.hpp"
#include "attncheck/monte_carlo/backend.hpp"
#include "attncheck/records/errors.hpp"
#include "attncheck/theory/common.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace attncheck::gpu {

// A CUDA device that cannot do what was asked (lost device, launch failure): the command line ends with the
// device-failure exit code and this message, never with an uncaught exception.
class CudaError : public records::DeviceError {
 public:
  using records::DeviceError::DeviceError;
};

// Devices that answer. 0, not an error, when there is no driver, no GPU, or a driver older than the runtime.
int cuda_device_count();

// "NVIDIA H100 80GB HBM3 (sm_90, 132 SMs, 79.1 GiB)"; throws CudaError for a device that does not answer.
std::string cuda_device_description(int device);

struct CudaBackendOptions {
  // Bytes of the score-strip buffer; 0 picks half of the device's L2 cache (at least 8 MiB), so that cuBLAS
  // writes a strip and the reduction reads it back without a round trip to device memory.
  std::size_t score_buffer_bytes = 0;
};

// Throws CudaError naming the device when it does not answer.
std::unique_ptr<monte_carlo::Backend> make_cuda_backend(int device, const CudaBackendOptions& options = {});

// For the self-test: the raw 32-bit words of subsequences first, ..., first + subsequences - 1 (each
// `blocks` blocks of four words, concatenated): `sequential` from curand_init(seed, k, 0) and repeated
// curand4, otherwise every block from its own curand_init(seed, k, 4 * block), as the sampling kernel does.
std::vector<std::uint32_t> device_philox_words(int device, std::uint64_t seed, std::uint64_t first,
                                               int subsequences, int blocks, bool sequential);

// For the self-test: X, Q, K of sample k as the sampling kernel draws them (row-major).
DrawnSample device_draw_sample(int device, const monte_carlo::SweepPoint& point, std::uint64_t k);

}  // namespace attncheck::gpu
