#include "attncheck/theory/attention.hpp"

#include "attncheck/theory/softmax.hpp"

#include <fmt/format.h>

#include <cmath>
#include <span>
#include <vector>

namespace attncheck::theory {

double OuterScale::at(Index n) const {
  return n_exponent == 0 ? factor : factor * std::pow(static_cast<double>(n), -n_exponent);
}

namespace {

std::string format_outer(const OuterScale& outer) {
  std::string text;
  if (outer.factor != 1) text = fmt::format("{:g}", outer.factor);
  if (outer.n_exponent == 0.5) {
    text += text.empty() ? "1/sqrt(N)" : "/sqrt(N)";
  } else if (outer.n_exponent != 0) {
    text += (text.empty() ? "" : "*") + fmt::format("N^{:g}", -outer.n_exponent);
  }
  return text.empty() ? "" : text + " * ";
}

std::string format_inner(double inner, Index d) {
  if (inner == 1) return "T";
  if (d > 0 && std::abs(inner * std::sqrt(static_cast<double>(d)) - 1) < 1e-15) return fmt::format("T/sqrt({})", d);
  return fmt::format("{:g}*T", inner);
}

const char* pointwise_name(Pointwise h) {
  switch (h) {
    case Pointwise::identity: return "identity";
    case Pointwise::poly: return "x^p";
    case Pointwise::relu: return "relu";
    case Pointwise::relu2: return "relu^2";
    case Pointwise::gelu: return "gelu";
    case Pointwise::softplus: return "softplus";
    case Pointwise::relu6: return "relu6";
    case Pointwise::sigmoid: return "sigmoid";
  }
  return "?";
}

void check_shapes(const Matrix& X, const Matrix& Q, const Matrix& K) {
  if (X.rows() == 0 || X.cols() == 0) throw InputError("X is empty");
  if (Q.rows() != X.cols() || K.rows() != X.cols() || Q.cols() != K.cols() || Q.cols() == 0) {
    throw InputError(fmt::format("shapes do not chain: X is {}x{}, Q is {}x{}, K is {}x{} (need Q, K of D x d)",
                                 X.rows(), X.cols(), Q.rows(), Q.cols(), K.rows(), K.cols()));
  }
}

}  // namespace

std::string describe(const AttentionMap& map, Index d) {
  const std::string outer = format_outer(map.outer);
  const std::string inner = format_inner(map.inner, d);
  switch (map.activation.kind) {
    case ActivationKind::softmax: return fmt::format("F = {}softmax({}) (row-wise)", outer, inner);
    case ActivationKind::matpow: return fmt::format("F = {}({})^{} (matrix power)", outer, inner, map.activation.p);
    case ActivationKind::pointwise:
      if (map.activation.h == Pointwise::poly) {
        return fmt::format("F = {}({})^{} (elementwise)", outer, inner, map.activation.p);
      }
      return fmt::format("F = {}{}({}) (elementwise)", outer, pointwise_name(map.activation.h), inner);
  }
  return "?";
}

Matrix scores(const Matrix& X, const Matrix& Q, const Matrix& K, double inner) {
  check_shapes(X, Q, K);
  const Matrix V = X * Q, U = X * K;
  return inner * (V * U.transpose());
}

Matrix apply(const AttentionMap& map, const Matrix& X, const Matrix& Q, const Matrix& K) {
  const Matrix S = scores(X, Q, K, map.inner);
  const double c = map.outer.at(X.rows());
  switch (map.activation.kind) {
    case ActivationKind::softmax: return c * row_softmax(S);
    case ActivationKind::matpow: {
      if (map.activation.p < 1) throw InputError(fmt::format("matrix power p = {} must be >= 1", map.activation.p));
      Matrix power = S;
      for (int k = 1; k < map.activation.p; ++k) power = power * S;
      return c * power;
    }
    case ActivationKind::pointwise:
      return c * S.unaryExpr([&](double s) { return pointwise_value(map.activation.h, map.activation.p, s); });
  }
  return {};
}

AttentionNorms attention_norms(const AttentionMap& map, const Matrix& X, const Matrix& Q, const Matrix& K) {
  check_shapes(X, Q, K);
  if (map.activation.kind == ActivationKind::matpow) {
    AttentionNorms out;
    out.value_fro = apply(map, X, Q, K).norm();
    return out;
  }
  return attention_norms_from_projections(map, X, X * Q, X * K);
}

namespace {

// One row's share of ||F||^2 and ||dF/dS||^2 from its attended scores `s`. On return `weights` holds, per
// attended entry, what the parameter derivatives need: the probability (softmax) or h'(s)^2 (elementwise).
struct RowTerms {
  double value_sq = 0, dS_sq = 0;
};

RowTerms row_terms(const AttentionMap& map, std::span<const double> s, std::span<double> weights, Index row) {
  RowTerms terms;
  if (map.activation.kind == ActivationKind::pointwise) {
    for (std::size_t j = 0; j < s.size(); ++j) {
      const double f = pointwise_value(map.activation.h, map.activation.p, s[j]);
      const double g = pointwise_derivative(map.activation.h, map.activation.p, s[j]);
      terms.value_sq += f * f;
      weights[j] = g * g;
      terms.dS_sq += g * g;
    }
    return terms;
  }
  if (map.activation.kind != ActivationKind::softmax) {
    throw InputError("the matrix-power reading needs Q and K themselves: use attention_norms");
  }
  if (s.empty()) {
    throw InputError(fmt::format("row {} (0-based) attends to nothing: softmax is undefined there", row));
  }
  // Masked entries have probability exactly 0, so the attended entries carry every term.
  softmax_row(s, weights, row);
  const RowSoftmaxNorms norms = row_norms_from_probabilities(weights);
  return {norms.softmax_sq, norms.jacobian_sq};
}

struct NormSums {
  double value_sq = 0, dS_sq = 0, dQ_sq = 0, dK_sq = 0;
};

// Adds row i: U_att, X_att hold the rows u_j, x_j of the keys row i attends to, u_sq_att, x_sq_att their squared
// norms; s_row and w_row are scratch of at least that many entries.
void add_row(const AttentionMap& map, Index i, const Eigen::Ref<const Matrix>& U_att,
             const Eigen::Ref<const Matrix>& X_att, const Eigen::Ref<const Vector>& u_sq_att,
             const Eigen::Ref<const Vector>& x_sq_att, const Matrix& V, double x_sq_i, double v_sq_i, Vector& s_row,
             Vector& w_row, NormSums& sums) {
  const Index visible = U_att.rows();
  s_row.head(visible).noalias() = map.inner * (U_att * V.row(i).transpose());
  const RowTerms terms = row_terms(map, {s_row.data(), static_cast<std::size_t>(visible)},
                                   {w_row.data(), static_cast<std::size_t>(visible)}, i);
  sums.value_sq += terms.value_sq;
  sums.dS_sq += terms.dS_sq;
  if (map.activation.kind == ActivationKind::pointwise) {
    for (Index j = 0; j < visible; ++j) {
      sums.dQ_sq += w_row[j] * x_sq_i * u_sq_att[j];
      sums.dK_sq += w_row[j] * x_sq_att[j] * v_sq_i;
    }
    return;
  }
  // Differences u_j - ubar_i are formed explicitly: expanding the square cancels when a row is near one-hot.
  const auto a = w_row.head(visible);
  const Eigen::RowVectorXd u_bar = a.transpose() * U_att;
  const Eigen::RowVectorXd x_bar = a.transpose() * X_att;
  double q_sum = 0, k_sum = 0;
  for (Index j = 0; j < visible; ++j) {
    q_sum += a[j] * a[j] * (U_att.row(j) - u_bar).squaredNorm();
    k_sum += a[j] * a[j] * (X_att.row(j) - x_bar).squaredNorm();
  }
  sums.dQ_sq += x_sq_i * q_sum;
  sums.dK_sq += v_sq_i * k_sum;
}

void check_projections(const AttentionMap& map, const Matrix& X, const Matrix& V, const Matrix& U) {
  const Index n = X.rows();
  if (n == 0 || V.rows() != n || U.rows() != n || V.cols() != U.cols() || V.cols() == 0) {
    throw InputError(fmt::format("projection shapes do not match: X is {}x{}, V is {}x{}, U is {}x{}", X.rows(),
                                 X.cols(), V.rows(), V.cols(), U.rows(), U.cols()));
  }
  if (map.activation.kind == ActivationKind::matpow) {
    throw InputError("the matrix-power reading needs Q and K themselves: use attention_norms");
  }
}

AttentionNorms norms_of_sums(const AttentionMap& map, Index n, const NormSums& sums) {
  const double c = map.outer.at(n);
  AttentionNorms out;
  out.value_fro = c * std::sqrt(sums.value_sq);
  out.dS_fro = c * std::sqrt(sums.dS_sq);
  out.dQ_fro = c * std::abs(map.inner) * std::sqrt(sums.dQ_sq);
  out.dK_fro = c * std::abs(map.inner) * std::sqrt(sums.dK_sq);
  return out;
}

void check_mask(const AttendedMask& attended, Index rows, Index cols) {
  if (attended.rows() != rows || attended.cols() != cols) {
    throw InputError(fmt::format("the mask is {}x{}, but the scores are {}x{}", attended.rows(), attended.cols(),
                                 rows, cols));
  }
}

}  // namespace

AttentionNorms attention_norms_from_projections(const AttentionMap& map, const Matrix& X, const Matrix& V,
                                                const Matrix& U, bool causal) {
  check_projections(map, X, V, U);
  const Index n = X.rows();
  const Vector x_sq = X.rowwise().squaredNorm(), u_sq = U.rowwise().squaredNorm(), v_sq = V.rowwise().squaredNorm();
  NormSums sums;
  Vector s_row(n), w_row(n);
  for (Index i = 0; i < n; ++i) {
    // The attended keys of a causal row are a prefix, so they are used in place.
    const Index visible = causal ? i + 1 : n;
    add_row(map, i, U.topRows(visible), X.topRows(visible), u_sq.head(visible), x_sq.head(visible), V, x_sq[i],
            v_sq[i], s_row, w_row, sums);
  }
  return norms_of_sums(map, n, sums);
}

AttentionNorms attention_norms_from_projections(const AttentionMap& map, const Matrix& X, const Matrix& V,
                                                const Matrix& U, const AttendedMask& attended) {
  check_projections(map, X, V, U);
  const Index n = X.rows();
  check_mask(attended, n, n);
  const Vector x_sq = X.rowwise().squaredNorm(), u_sq = U.rowwise().squaredNorm(), v_sq = V.rowwise().squaredNorm();
  NormSums sums;
  Vector s_row(n), w_row(n);
  std::vector<Index> keys;
  keys.reserve(static_cast<std::size_t>(n));
  for (Index i = 0; i < n; ++i) {
    keys.clear();
    for (Index j = 0; j < n; ++j) {
      if (attended(i, j)) keys.push_back(j);
    }
    const Matrix U_att = U(keys, Eigen::all), X_att = X(keys, Eigen::all);
    const Vector u_sq_att = u_sq(keys), x_sq_att = x_sq(keys);
    add_row(map, i, U_att, X_att, u_sq_att, x_sq_att, V, x_sq[i], v_sq[i], s_row, w_row, sums);
  }
  return norms_of_sums(map, n, sums);
}

AttentionNorms score_map_norms(const AttentionMap& map, const Matrix& scores, const AttendedMask* attended) {
  const Index rows = scores.rows(), cols = scores.cols();
  if (rows == 0 || cols == 0) throw InputError("the scores are empty");
  if (attended) check_mask(*attended, rows, cols);
  std::vector<double> s_row(static_cast<std::size_t>(cols)), w_row(static_cast<std::size_t>(cols));
  double value_sq = 0, dS_sq = 0;
  for (Index i = 0; i < rows; ++i) {
    std::size_t visible = 0;
    for (Index j = 0; j < cols; ++j) {
      if (!attended || (*attended)(i, j)) s_row[visible++] = scores(i, j);
    }
    const RowTerms terms = row_terms(map, {s_row.data(), visible}, {w_row.data(), visible}, i);
    value_sq += terms.value_sq;
    dS_sq += terms.dS_sq;
  }
  const double c = map.outer.at(rows);
  AttentionNorms out;
  out.value_fro = c * std::sqrt(value_sq);
  out.dS_fro = c * std::sqrt(dS_sq);
  return out;
}

Matrix explicit_parameter_jacobian(const AttentionMap& map, const Matrix& X, const Matrix& Q, const Matrix& K,
                                   Parameter parameter) {
  check_shapes(X, Q, K);
  const Index n = X.rows(), D = X.cols(), d = Q.cols();
  if (n * n * D * d > (Index{1} << 24)) {
    throw InputError(fmt::format("explicit Jacobian would have {} entries; it is for small test cases",
                                 n * n * D * d));
  }
  if (map.activation.kind == ActivationKind::matpow) {
    throw InputError("the matrix-power reading is supported for values only, not derivatives");
  }
  const Matrix V = X * Q, U = X * K;
  // dS_ij / dQ_ab = lambda x_ia u_jb;  dS_ij / dK_ab = lambda v_ib x_ja.
  Matrix dS_dP = Matrix::Zero(n * n, D * d);
  for (Index i = 0; i < n; ++i) {
    for (Index j = 0; j < n; ++j) {
      for (Index a = 0; a < D; ++a) {
        for (Index b = 0; b < d; ++b) {
          dS_dP(i * n + j, a * d + b) =
              map.inner * (parameter == Parameter::Q ? X(i, a) * U(j, b) : V(i, b) * X(j, a));
        }
      }
    }
  }
  const double c = map.outer.at(n);
  const Matrix S = map.inner * (V * U.transpose());
  if (map.activation.kind == ActivationKind::softmax) return c * (explicit_softmax_jacobian(S) * dS_dP);
  Matrix jacobian = dS_dP;
  for (Index i = 0; i < n; ++i) {
    for (Index j = 0; j < n; ++j) {
      jacobian.row(i * n + j) *= c * pointwise_derivative(map.activation.h, map.activation.p, S(i, j));
    }
  }
  return jacobian;
}

}  // namespace attncheck::theory
