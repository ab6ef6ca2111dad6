#pragma once
// The float32 kernels of the mixed-precision forward pass (`probe --precision mixed`): matrix products, GELU and the
// context's softmax. They are compiled twice, with AVX-512 code generation and portably (products through the BLAS),
// and chosen at run time (streams::use_avx512_kernels): OpenBLAS releases that do not know a CPU run its AVX2
// kernels even where it has AVX-512, at half the speed. The AVX-512 build compiles its own copy of Eigen under
// another namespace, so that no inline function it instantiates can stand in for the portable build's; hence this
// header names no Eigen type, and the kernels take raw storage. Each gives the same bits wherever its data lies in
// memory (float_kernels_body.inc says how), so that the heap's layout, which changes with the probe's threads, does not
// change a result.

#include <cstdint>
#include <string_view>

namespace attncheck::probes::float_kernels {

// rows x cols float32 values at `data`, stored by rows or by columns.
struct Operand {
  const float* data = nullptr;
  std::int64_t rows = 0, cols = 0;
  bool row_major = true;
};

// c = a b, c row-major (a.rows x b.cols); a.cols == b.rows.
void product(Operand a, Operand b, float* c);
// x <- x Phi(x) (GELU with erf) for n values.
void gelu(float* x, std::int64_t n);
// Each of `rows` rows of `cols` finite logits (row-major), the row of position first_row + r, replaced by its softmax
// over the keys it attends: every key, or with `causal` keys 0 .. first_row + r; the others 0.
void softmax_rows(float* logits, std::int64_t rows, std::int64_t cols, std::int64_t first_row, bool causal);

// "avx512" or "portable": the build the kernels run now.
std::string_view instruction_set();

}  // namespace attncheck::probes::float_kernels
