#include "attncheck/probes/float_kernels.hpp"

#include "attncheck/streams/cpu_features.hpp"

#include <Eigen/Core>
#include <unsupported/Eigen/SpecialFunctions>

#include <algorithm>

namespace attncheck::probes::float_kernels {

namespace portable {
#include "float_kernels_body.inc"
}  // namespace portable

#if defined(ATTNCHECK_FLOAT_KERNELS_AVX512)
namespace avx512 {
void product(Operand a, Operand b, float* c);
void gelu(float* x, std::int64_t n);
void softmax_rows(float* logits, std::int64_t rows, std::int64_t cols, std::int64_t first_row, bool causal);
}  // namespace avx512
#define ATTNCHECK_FLOAT_KERNEL(call) (streams::use_avx512_kernels() ? avx512::call : portable::call)
#else
#define ATTNCHECK_FLOAT_KERNEL(call) (portable::call)
#endif

void product(Operand a, Operand b, float* c) { ATTNCHECK_FLOAT_KERNEL(product(a, b, c)); }
void gelu(float* x, std::int64_t n) { ATTNCHECK_FLOAT_KERNEL(gelu(x, n)); }
void softmax_rows(float* logits, std::int64_t rows, std::int64_t cols, std::int64_t first_row, bool causal) {
  ATTNCHECK_FLOAT_KERNEL(softmax_rows(logits, rows, cols, first_row, causal));
}

std::string_view instruction_set() {
#if defined(ATTNCHECK_FLOAT_KERNELS_AVX512)
  if (streams::use_avx512_kernels()) return "avx512";
#endif
  return "portable";
}

}  // namespace attncheck::probes::float_kernels
