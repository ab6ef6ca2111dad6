// Exact ||softmax(A)||_F and ||grad softmax(A)||_F (row-wise softmax, its Jacobian) of attention logits A.
#include <attncheck/theory/softmax.hpp>

#include <cmath>
#include <cstdio>
#include <limits>

int main() {
  const double masked = -std::numeric_limits<double>::infinity();  // -inf: a masked entry, probability 0
  attncheck::theory::Matrix logits(3, 4);                          // N = 3 queries, M = 4 keys
  logits << 2.0, 2.0, masked, masked,  // two equal top logits: the largest Jacobian a row can have
      0.5, 0.5, 0.5, 0.5,              // uniform
      9.0, masked, masked, masked;     // one key only
  const attncheck::theory::SoftmaxNorms norms = attncheck::theory::softmax_norms(logits);
  const attncheck::theory::SoftmaxBounds bounds = attncheck::theory::softmax_bounds(logits.rows());
  std::printf("||softmax(A)||_F = %.15g (bound sqrt(N) = %.6g)\n", norms.softmax_fro, bounds.softmax_paper);
  std::printf("||grad softmax(A)||_F = %.15g (exact sup sqrt(N)/2 = %.6g)\n", norms.grad_fro, bounds.grad_tight);
  // By hand, row by row: sum s^2 = 1/2, 1/4, 1 and sum s^2 - 2 sum s^3 + (sum s^2)^2 = 1/4, 3/16, 0.
  const bool exact = std::abs(norms.softmax_fro - std::sqrt(7.0) / 2) <= 1e-15 &&
                     std::abs(norms.grad_fro - std::sqrt(7.0) / 4) <= 1e-15;
  return exact ? 0 : 1;
}
