#include "attncheck/streams/cpu_features.hpp"

#include <cstdlib>

namespace attncheck::streams {

bool use_avx512_kernels() {
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool cpu = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
                          __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
                          __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return cpu && std::getenv("ATTNCHECK_NO_AVX512") == nullptr;
#else
  return false;
#endif
}

}  // namespace attncheck::streams
