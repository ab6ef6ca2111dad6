#pragma once
// Per-entry math is compiled for the CPU and, unchanged, inside CUDA kernels.
#if defined(__CUDACC__)
#define ATTNCHECK_HD __host__ __device__
#else
#define ATTNCHECK_HD
#endif
