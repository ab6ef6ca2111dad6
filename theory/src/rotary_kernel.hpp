#pragma once
// The O(N^2)-per-row sums of softmax's dA/dW_K under rotary keys (docs/THEORY.md), for rows that attend to one
// run of consecutive keys.

#include "attncheck/theory/common.hpp"

#include <vector>

namespace attncheck::theory::detail {

// w^T B w and u^T B w for one row's kernel B.
struct KernelForms {
  double ww = 0, uw = 0;
};

// Rows whose keys are the run offset .. offset + length - 1 of the Gram matrix G, with kernels
// B_k(j, l) = G(offset + j, offset + l) C_k(|j - l|). A row that attends to fewer keys has zero weights past them.
class RotaryKernelRows {
 public:
  RotaryKernelRows(Index rows, Index offset, Index length);
  Index rows() const { return rows_; }
  Index length() const { return length_; }
  // Row k's w and u (up to `length` entries each; zero past them) and C_k(m) for m = 0 .. length - 1. Rows not set
  // are zero.
  void set_row(Index k, const Vector& w, const Vector& u, const double* cosines);
  // Every row's forms: O(length^2 / 2) per row, each Gram row read once for all rows.
  std::vector<KernelForms> forms(const Matrix& gram) const;

 private:
  Index rows_, offset_, length_;
  // C_k(length - 1 - t) at t: C_k(j - l) for l = 0 .. j - 1 is then the contiguous run from length - 1 - j.
  std::vector<double> w_, u_, reversed_cosines_;
};

}  // namespace attncheck::theory::detail
