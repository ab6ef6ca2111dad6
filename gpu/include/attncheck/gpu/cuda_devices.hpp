#pragma once
// What the rest of the program may ask about CUDA, in every build: the CUDA backend (gpu/src/cuda_backend.cpp)
// defines these functions, and a build without CUDA links gpu/src/cuda_absent.cpp instead, where no device
// answers and the reason says that CUDA was not built. Callers therefore need no #ifdef.

#include "attncheck/gpu/selftest.hpp"
#include "attncheck/monte_carlo/backend.hpp"
#include "attncheck/records/errors.hpp"
#include "attncheck/theory/common.hpp"

#include <memory>
#include <string>

namespace attncheck::gpu {

// A CUDA device that cannot do what was asked (lost device, launch failure): the command line ends with the
// device-failure exit code and this message, never with an uncaught exception.
class CudaError : public records::DeviceError {
 public:
  using records::DeviceError::DeviceError;
};

// Whether this attncheck was built with the CUDA backend (a device may still be absent).
bool built_with_cuda();

// Devices that answer. 0, not an error, when there is no driver, no GPU, or a driver older than the runtime,
// or when this attncheck was built without CUDA.
int cuda_device_count();

// Empty when device 0 answers; otherwise why no CUDA device can be used ("no CUDA device answers (no GPU, or no
// driver)", "built without CUDA support (...)").
std::string cuda_unavailable_reason();

// "NVIDIA H100 80GB HBM3 (sm_90, 132 SMs, 79.1 GiB)"; throws CudaError for a device that does not answer.
std::string cuda_device_description(int device);

// The device side of the self-test on `device`: its own Philox words and draws, and two CUDA backends (the
// default score buffer, and kSmallScoreBufferBytes) that `hooks` points to and this object owns.
struct SelftestTarget {
  std::unique_ptr<monte_carlo::Backend> backend, small_buffer_backend;
  SelftestDevice hooks;
};
// Throws CudaError naming the device when it does not answer.
SelftestTarget cuda_selftest_target(int device);

}  // namespace attncheck::gpu
