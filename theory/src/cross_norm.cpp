#include "attncheck/theory/cross_norm.hpp"

#include "attncheck/theory/cross_norm_terms.hpp"
#include "attncheck/theory/softmax.hpp"

#include <fmt/format.h>

#include <cmath>
#include <span>

namespace attncheck::theory {

namespace {

void require_finite_values(const Matrix& values) {
  for (Index j = 0; j < values.rows(); ++j) {
    for (Index k = 0; k < values.cols(); ++k) {
      if (!std::isfinite(values(j, k))) {
        throw InputError(
            fmt::format("value V[{}][{}] (0-based) is {}: the column softmax needs finite values", j, k, values(j, k)));
      }
    }
  }
  if (values.rows() == 0 || values.cols() == 0) {
    throw InputError(
        fmt::format("V is {} x {}: it needs at least one token and one column", values.rows(), values.cols()));
  }
}

void require_alpha(double alpha) {
  if (!std::isfinite(alpha)) throw InputError(fmt::format("alpha = {} is not a finite number", alpha));
}

// A row of A that is not a probability vector would make every bound of fact 11 meaningless.
void require_row_stochastic(const Matrix& attention) {
  for (Index i = 0; i < attention.rows(); ++i) {
    double total = 0;
    for (Index j = 0; j < attention.cols(); ++j) {
      const double a = attention(i, j);
      if (!(a >= 0) || !std::isfinite(a)) {
        throw InputError(fmt::format("attention A[{}][{}] (0-based) = {} is not a probability", i, j, a));
      }
      total += a;
    }
    if (std::abs(total - 1) > 1e-9) {
      throw InputError(fmt::format("row {} (0-based) of the attention matrix sums to {:.17g}, not 1", i, total));
    }
  }
}

void require_shapes(const Matrix& attention, const Matrix& values) {
  if (attention.rows() != attention.cols() || attention.cols() != values.rows()) {
    throw InputError(fmt::format("shapes disagree: attention is {} x {}, V is {} x {} (need N x N and N x d_v)",
                                 attention.rows(), attention.cols(), values.rows(), values.cols()));
  }
}

}  // namespace

Matrix column_softmax(const Matrix& values) {
  require_finite_values(values);
  const Matrix transposed = values.transpose();
  return row_softmax(transposed).transpose();
}

ColumnSoftmaxNorms column_softmax_norms(const Matrix& values) {
  const Matrix transposed = column_softmax(values).transpose();  // one probability vector per row
  double softmax_sq = 0, jacobian_sq = 0;
  for (Index k = 0; k < transposed.rows(); ++k) {
    const RowSoftmaxNorms column = row_norms_from_probabilities(
        std::span<const double>(transposed.row(k).data(), static_cast<std::size_t>(transposed.cols())));
    softmax_sq += column.softmax_sq;
    jacobian_sq += column.jacobian_sq;
  }
  return {std::sqrt(softmax_sq), std::sqrt(jacobian_sq)};
}

Matrix mixed_values(const Matrix& values, double alpha) {
  require_alpha(alpha);
  if (alpha == 0) return values;
  const Matrix probabilities = column_softmax(values);
  if (alpha == 1) return probabilities;
  return alpha * probabilities + (1 - alpha) * values;
}

CrossNormNorms cross_norm_norms(const Matrix& attention, const Matrix& values, double alpha) {
  require_shapes(attention, values);
  require_row_stochastic(attention);
  require_alpha(alpha);
  const Matrix probabilities = column_softmax(values);
  const Matrix mixed = alpha == 1 ? probabilities : Matrix(alpha * probabilities + (1 - alpha) * values);
  const Matrix output = attention * mixed;
  const Matrix softmax_output = alpha == 1 ? output : Matrix(attention * probabilities);
  const Index n = attention.rows(), dv = values.cols();
  double grad_values_sq = 0, grad_scores_sq = 0;
  for (Index i = 0; i < n; ++i) {
    for (Index j = 0; j < n; ++j) {
      const double a = attention(i, j);
      for (Index k = 0; k < dv; ++k) {
        const CrossNormEntryTerms t =
            cross_norm_entry_terms(a, probabilities(j, k), mixed(j, k), output(i, k), softmax_output(i, k), alpha);
        grad_values_sq += t.grad_values * t.grad_values;
        grad_scores_sq += t.grad_scores * t.grad_scores;
      }
    }
  }
  return {output.norm(), std::sqrt(grad_values_sq), std::sqrt(grad_scores_sq)};
}

CrossNormNorms cross_norm_norms_from_scores(const Matrix& scores, const Matrix& values, double alpha) {
  return cross_norm_norms(row_softmax(scores), values, alpha);
}

double cross_norm_projection_grad_sq(const Matrix& attention, const Matrix& mixed, const Vector& row_weights,
                                     const Matrix& column_rows) {
  require_shapes(attention, mixed);
  if (row_weights.size() != attention.rows() || column_rows.rows() != attention.cols()) {
    throw InputError(fmt::format("shapes disagree: {} row weights and {} column rows for N = {}", row_weights.size(),
                                 column_rows.rows(), attention.rows()));
  }
  const Matrix output = attention * mixed;
  const Index n = attention.rows(), dv = mixed.cols();
  Matrix g(n, dv);  // column k holds g_ik for the current row i
  double total = 0;
  for (Index i = 0; i < n; ++i) {
    for (Index j = 0; j < n; ++j) {
      g.row(j) = attention(i, j) * (mixed.row(j) - output.row(i));
    }
    total += row_weights(i) * (column_rows.transpose() * g).squaredNorm();
  }
  return total;
}

double cross_norm_term_sq(std::span<const double> weights, std::span<const double> probabilities) {
  if (weights.size() != probabilities.size()) {
    throw InputError(
        fmt::format("cross_norm_term_sq: {} weights and {} probabilities", weights.size(), probabilities.size()));
  }
  double mean = 0;
  for (std::size_t j = 0; j < weights.size(); ++j) mean += weights[j] * probabilities[j];
  double total = 0;
  for (std::size_t j = 0; j < weights.size(); ++j) {
    const double entry = weights[j] * (probabilities[j] - mean);
    total += entry * entry;
  }
  return total;
}

CrossNormBounds cross_norm_bounds(Index tokens, Index value_dim) {
  const double n = static_cast<double>(tokens), dv = static_cast<double>(value_dim);
  return {std::sqrt(dv), std::sqrt(dv) / 2, std::sqrt(n * dv), std::sqrt(n * dv / 8), std::sqrt(n * dv / 8)};
}

namespace {

void require_small(Index n, Index dv) {
  if (n * dv > 512) {
    throw InputError(fmt::format("explicit cross-normalization Jacobians are for tests: N * d_v = {} > 512", n * dv));
  }
}

// d P_alpha(l, k) / d V(j, k): the column softmax Jacobian mixed with the identity; zero across columns.
double mixed_derivative(const Matrix& probabilities, Index l, Index j, Index k, double alpha) {
  const double softmax_part = probabilities(l, k) * ((l == j ? 1.0 : 0.0) - probabilities(j, k));
  return alpha * softmax_part + (1 - alpha) * (l == j ? 1.0 : 0.0);
}

}  // namespace

Matrix explicit_cross_norm_jacobian_values(const Matrix& attention, const Matrix& values, double alpha) {
  require_shapes(attention, values);
  const Index n = values.rows(), dv = values.cols();
  require_small(n, dv);
  const Matrix probabilities = column_softmax(values);
  Matrix jacobian = Matrix::Zero(n * dv, n * dv);
  for (Index i = 0; i < n; ++i) {
    for (Index k = 0; k < dv; ++k) {
      for (Index j = 0; j < n; ++j) {
        double entry = 0;
        for (Index l = 0; l < n; ++l) entry += attention(i, l) * mixed_derivative(probabilities, l, j, k, alpha);
        jacobian(i * dv + k, j * dv + k) = entry;
      }
    }
  }
  return jacobian;
}

Matrix explicit_cross_norm_jacobian_scores(const Matrix& scores, const Matrix& values, double alpha) {
  const Index n = values.rows(), dv = values.cols();
  require_small(n, dv);
  const Matrix mixed = mixed_values(values, alpha);
  // dO/dS = (dA/dS contracted with P_alpha): O(i,k) = sum_l A(i,l) P(l,k), and A's Jacobian is block-diagonal by row.
  const Matrix softmax_jacobian = explicit_softmax_jacobian(scores);
  Matrix jacobian = Matrix::Zero(n * dv, n * n);
  for (Index i = 0; i < n; ++i) {
    for (Index k = 0; k < dv; ++k) {
      for (Index j = 0; j < n; ++j) {
        double entry = 0;
        for (Index l = 0; l < n; ++l) entry += softmax_jacobian(i * n + l, i * n + j) * mixed(l, k);
        jacobian(i * dv + k, i * n + j) = entry;
      }
    }
  }
  return jacobian;
}

}  // namespace attncheck::theory
