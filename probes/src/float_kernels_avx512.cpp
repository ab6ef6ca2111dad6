// The float32 kernels built for AVX-512 (this file's compile options, probes/CMakeLists.txt). Eigen is compiled here
// under its own namespace: its inline functions instantiated with AVX-512 instructions must not be what the linker
// keeps for the rest of the program, which runs on CPUs without them. The products use Eigen's own kernels, not the
// BLAS, and run on the calling thread, as every product does inside the probe's parallel loops.
#if defined(ATTNCHECK_FLOAT_KERNELS_AVX512)
#undef EIGEN_USE_BLAS
#ifndef EIGEN_DONT_PARALLELIZE
#define EIGEN_DONT_PARALLELIZE
#endif
#define Eigen attncheck_eigen_avx512
#include <Eigen/Core>
#include <unsupported/Eigen/SpecialFunctions>

#include "attncheck/probes/float_kernels.hpp"

#include <algorithm>

namespace attncheck::probes::float_kernels::avx512 {
#include "float_kernels_body.inc"
}  // namespace attncheck::probes::float_kernels::avx512
#endif
