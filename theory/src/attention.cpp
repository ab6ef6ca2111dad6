#include "attncheck/theory/attention.hpp"

#include "attncheck/theory/softmax.hpp"

#include <fmt/format.h>

#include <cmath>
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

AttentionNorms attention_norms_from_projections(const AttentionMap& map, const Matrix& X, const Matrix& V,
                                                const Matrix& U, bool causal) {
  const Index n = X.rows();
  if (n == 0 || V.rows() != n || U.rows() != n || V.cols() != U.cols() || V.cols() == 0) {
    throw InputError(fmt::format("projection shapes do not match: X is {}x{}, V is {}x{}, U is {}x{}", X.rows(),
                                 X.cols(), V.rows(), V.cols(), U.rows(), U.cols()));
  }
  if (map.activation.kind == ActivationKind::matpow) {
    throw InputError("the matrix-power reading needs Q and K themselves: use attention_norms");
  }
  const double c = map.outer.at(n);
  const double lambda = map.inner;
  const Vector x_sq = X.rowwise().squaredNorm(), u_sq = U.rowwise().squaredNorm(), v_sq = V.rowwise().squaredNorm();
  double value_sq = 0, dS_sq = 0, dQ_sq = 0, dK_sq = 0;
  Vector s_row(n), a_row(n);
  for (Index i = 0; i < n; ++i) {
    const Index visible = causal ? i + 1 : n;
    s_row.head(visible).noalias() = lambda * (U.topRows(visible) * V.row(i).transpose());
    if (map.activation.kind == ActivationKind::pointwise) {
      for (Index j = 0; j < visible; ++j) {
        const double f = pointwise_value(map.activation.h, map.activation.p, s_row[j]);
        const double g = pointwise_derivative(map.activation.h, map.activation.p, s_row[j]);
        value_sq += f * f;
        dS_sq += g * g;
        dQ_sq += g * g * x_sq[i] * u_sq[j];
        dK_sq += g * g * x_sq[j] * v_sq[i];
      }
      continue;
    }
    // Masked entries have probability exactly 0, so the visible prefix carries every term.
    const std::span<double> a{a_row.data(), static_cast<std::size_t>(visible)};
    softmax_row({s_row.data(), static_cast<std::size_t>(visible)}, a, i);
    const RowSoftmaxNorms row = row_norms_from_probabilities(a);
    value_sq += row.softmax_sq;
    dS_sq += row.jacobian_sq;
    // Differences u_j - ubar_i are formed explicitly: expanding the square cancels when a row is near one-hot.
    const auto a_visible = a_row.head(visible);
    const Eigen::RowVectorXd u_bar = a_visible.transpose() * U.topRows(visible);
    const Eigen::RowVectorXd x_bar = a_visible.transpose() * X.topRows(visible);
    double q_sum = 0, k_sum = 0;
    for (Index j = 0; j < visible; ++j) {
      q_sum += a_row[j] * a_row[j] * (U.row(j) - u_bar).squaredNorm();
      k_sum += a_row[j] * a_row[j] * (X.row(j) - x_bar).squaredNorm();
    }
    dQ_sq += x_sq[i] * q_sum;
    dK_sq += v_sq[i] * k_sum;
  }
  AttentionNorms out;
  out.value_fro = c * std::sqrt(value_sq);
  out.dS_fro = c * std::sqrt(dS_sq);
  out.dQ_fro = c * std::abs(lambda) * std::sqrt(dQ_sq);
  out.dK_fro = c * std::abs(lambda) * std::sqrt(dK_sq);
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
