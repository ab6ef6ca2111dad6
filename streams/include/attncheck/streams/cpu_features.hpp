#pragma once
// Which instruction set the kernels built more than once (the Monte Carlo panels, the mixed-precision forward's
// float32 kernels) run on.

namespace attncheck::streams {

// True when the CPU has AVX-512 (F, DQ, BW, VL) with AVX2 and FMA, and ATTNCHECK_NO_AVX512 is unset. The variable (any
// value) takes the portable kernels, as a CPU without AVX-512 would; it is read on every call, so that a test can
// compare both paths in one process.
bool use_avx512_kernels();

}  // namespace attncheck::streams
