#include "attncheck/theory/softmax.hpp"

#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <vector>

namespace attncheck::theory {

void softmax_row(std::span<const double> logits, std::span<double> probabilities, Index row_for_errors) {
  if (logits.empty()) throw InputError(fmt::format("row {} is empty", row_for_errors));
  double row_max = -std::numeric_limits<double>::infinity();
  for (std::size_t j = 0; j < logits.size(); ++j) {
    const double z = logits[j];
    if (std::isnan(z)) {
      throw InputError(fmt::format("NaN logit at row {}, column {} (0-based)", row_for_errors, j));
    }
    if (z == std::numeric_limits<double>::infinity()) {
      throw InputError(
          fmt::format("+inf logit at row {}, column {} (0-based): softmax is undefined there", row_for_errors, j));
    }
    if (z > row_max) row_max = z;
  }
  if (row_max == -std::numeric_limits<double>::infinity()) {
    throw InputError(
        fmt::format("every logit of row {} (0-based) is -inf: the row has no probability mass", row_for_errors));
  }
  double total = 0;
  for (std::size_t j = 0; j < logits.size(); ++j) {
    // logits[j] - row_max may be -inf (for -inf or for -1e308 against +1e308); exp gives the right 0.
    probabilities[j] = std::exp(logits[j] - row_max);
    total += probabilities[j];
  }
  for (double& p : probabilities) p /= total;
}

double softmax_row_entropy(std::span<const double> logits, Index row_for_errors) {
  std::vector<double> probabilities(logits.size());
  softmax_row(logits, probabilities, row_for_errors);
  std::size_t top = 0;
  for (std::size_t j = 1; j < logits.size(); ++j) {
    if (logits[j] > logits[top]) top = j;
  }
  // With Z = sum_j exp(s_j - top), -log a_j = log Z + (top - s_j); log Z = log1p(rest) from the rest's mass
  // directly, as 1 + rest rounds it away on near one-hot rows.
  double rest = 0, spread = 0;
  for (std::size_t j = 0; j < logits.size(); ++j) {
    if (j == top || probabilities[j] == 0) continue;
    rest += std::exp(logits[j] - logits[top]);
    spread += probabilities[j] * (logits[top] - logits[j]);
  }
  return std::log1p(rest) + spread;
}

double mean_softmax_row_entropy(const Matrix& logits) {
  double total = 0;
  for (Index i = 0; i < logits.rows(); ++i) {
    total += softmax_row_entropy({logits.row(i).data(), static_cast<std::size_t>(logits.cols())}, i);
  }
  return total / static_cast<double>(logits.rows());
}

Matrix row_softmax(const Matrix& logits) {
  Matrix out(logits.rows(), logits.cols());
  for (Index i = 0; i < logits.rows(); ++i) {
    softmax_row({logits.row(i).data(), static_cast<std::size_t>(logits.cols())},
                {out.row(i).data(), static_cast<std::size_t>(out.cols())}, i);
  }
  return out;
}

RowSoftmaxNorms row_norms_from_probabilities(std::span<const double> s) {
  std::size_t top = 0;
  for (std::size_t k = 1; k < s.size(); ++k) {
    if (s[k] > s[top]) top = k;
  }
  // 1 - s_top and sum_{k != top} s_k^2 are formed from the small entries directly: subtracting from 1 or
  // from sum s^2 would cancel every digit on near one-hot rows.
  double rest_mass = 0, rest_sq = 0;
  for (std::size_t k = 0; k < s.size(); ++k) {
    if (k == top) continue;
    rest_mass += s[k];
    rest_sq += s[k] * s[k];
  }
  const double top_sq = s[top] * s[top];
  const double sum_sq = top_sq + rest_sq;
  // ||diag(s) - s s^T||_F^2 = sum_k s_k^2 (1 - s_k)^2 + sum_k s_k^2 (sum_sq - s_k^2): every term is >= 0.
  // For k != top, s_k^2 <= sum_sq / 2, so sum_sq - s_k^2 does not cancel.
  double jacobian_sq = top_sq * rest_mass * rest_mass + top_sq * rest_sq;
  for (std::size_t k = 0; k < s.size(); ++k) {
    if (k == top) continue;
    const double sk_sq = s[k] * s[k];
    jacobian_sq += sk_sq * (1 - s[k]) * (1 - s[k]) + sk_sq * (sum_sq - sk_sq);
  }
  return {sum_sq, jacobian_sq};
}

RowSoftmaxNorms row_softmax_norms(std::span<const double> logits, Index row_for_errors) {
  std::vector<double> probabilities(logits.size());
  softmax_row(logits, probabilities, row_for_errors);
  return row_norms_from_probabilities(probabilities);
}

SoftmaxNorms softmax_norms(const Matrix& logits) {
  if (logits.rows() == 0 || logits.cols() == 0) throw InputError("softmax of an empty matrix");
  SoftmaxNorms out;
  std::vector<double> probabilities(static_cast<std::size_t>(logits.cols()));
  double softmax_sq = 0, grad_sq = 0;
  for (Index i = 0; i < logits.rows(); ++i) {
    softmax_row({logits.row(i).data(), probabilities.size()}, probabilities, i);
    const RowSoftmaxNorms row = row_norms_from_probabilities(probabilities);
    softmax_sq += row.softmax_sq;
    grad_sq += row.jacobian_sq;
    if (i == 0 || row.jacobian_sq > out.max_row_jacobian_sq) {
      out.max_row_jacobian_sq = row.jacobian_sq;
      out.worst_row = i;
    }
  }
  out.softmax_fro = std::sqrt(softmax_sq);
  out.grad_fro = std::sqrt(grad_sq);
  return out;
}

Matrix explicit_softmax_jacobian(const Matrix& logits) {
  const Index rows = logits.rows(), cols = logits.cols();
  const Index size = rows * cols;
  if (size > 4096) {
    throw InputError(
        fmt::format("explicit softmax Jacobian of a {}x{} matrix would have {} entries; "
                    "it is meant for small test cases (N*M <= 4096)",
                    rows, cols, size * size));
  }
  const Matrix probabilities = row_softmax(logits);
  Matrix jacobian = Matrix::Zero(size, size);
  for (Index i = 0; i < rows; ++i) {
    for (Index j = 0; j < cols; ++j) {
      for (Index k = 0; k < cols; ++k) {
        const double s_j = probabilities(i, j), s_k = probabilities(i, k);
        jacobian(i * cols + j, i * cols + k) = (j == k ? s_j : 0.0) - s_j * s_k;
      }
    }
  }
  return jacobian;
}

SoftmaxBounds softmax_bounds(Index rows) {
  const double root = std::sqrt(static_cast<double>(rows));
  return {root, 2 * root, root / 2};
}

}  // namespace attncheck::theory
