#include "attncheck/theory/attention.hpp"

#include "attncheck/theory/vocabulary.hpp"

#include "attncheck/theory/softmax.hpp"
#include "rotary_kernel.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
#include <span>
#include <stdexcept>
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
      return fmt::format("F = {}{}({}) (elementwise)", outer, term_of(map.activation).formula_name, inner);
    case ActivationKind::expression:
      return fmt::format("F = {}phi({}), phi(x) = {}{}", outer, inner, map.activation.expression->text(),
                         map.activation.normalize_rows ? " (each row divided by its sum)" : " (elementwise)");
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
    case ActivationKind::expression: {
      const PhiProgram program =
          map.activation.expression->compile(static_cast<double>(S.rows()), static_cast<double>(Q.cols()));
      Matrix F(S.rows(), S.cols()), slopes(S.rows(), S.cols());
      std::vector<double> work;
      program.evaluate(S.data(), S.size(), F.data(), slopes.data(), work);
      if (map.activation.normalize_rows) {
        for (Index r = 0; r < F.rows(); ++r) {
          const double sum = F.row(r).sum();
          F.row(r) = sum == 0 ? Vector::Zero(F.cols()).transpose().eval() : (F.row(r) / sum).eval();
        }
      }
      return c * F;
    }
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

// base^(-2p/d) for p = 0 .. d/2 - 1: the frequencies of both layouts.
std::vector<double> frequencies_of(Index d, double base) {
  std::vector<double> out;
  for (Index p = 0; p < d / 2; ++p)
    out.push_back(std::pow(base, -2.0 * static_cast<double>(p) / static_cast<double>(d)));
  return out;
}

}  // namespace

Rotary Rotary::with_frequencies(Index d, std::vector<double> frequency, bool interleaved) {
  const auto pairs = static_cast<Index>(frequency.size());
  if (pairs < 1 || 2 * pairs > d) {
    throw InputError(
        fmt::format("a rotary embedding of {} pairs for heads of {} coordinates: need 1 .. d/2", pairs, d));
  }
  Rotary out;
  out.dimension = d;
  for (Index p = 0; p < pairs; ++p) {
    out.first.push_back(interleaved ? 2 * p : p);
    out.second.push_back(interleaved ? 2 * p + 1 : p + pairs);
  }
  out.frequency = std::move(frequency);
  return out;
}

Rotary Rotary::with_angles(Index d, Matrix angles, bool interleaved) {
  if (angles.rows() == 0) throw InputError("rotary angles for no position");
  if (!angles.allFinite()) throw InputError("a rotary angle is not finite");
  Rotary out = with_frequencies(d, std::vector<double>(static_cast<std::size_t>(angles.cols()), 0.0), interleaved);
  out.angles = std::move(angles);
  return out;
}

Rotary Rotary::interleaved(Index d, double base) { return with_frequencies(d, frequencies_of(d, base), true); }

Rotary Rotary::half_split(Index d, double base) { return with_frequencies(d, frequencies_of(d, base), false); }

Rotary Rotary::partial_half_split(Index d, Index rotated, double base) {
  return with_frequencies(d, frequencies_of(rotated, base), false);
}

void apply_rotary(const Rotary& rotary, Matrix& rows, double first_position) {
  if (rows.cols() != rotary.dimension) {
    throw InputError(
        fmt::format("rotary embedding of dimension {} applied to rows of {}", rotary.dimension, rows.cols()));
  }
  const bool table = rotary.angles.size() != 0;
  const auto first_row = static_cast<Index>(first_position);
  if (table && (static_cast<double>(first_row) != first_position || first_row < 0 ||
                first_row + rows.rows() > rotary.angles.rows())) {
    throw InputError(fmt::format("rows at positions {} .. {} for rotary angles of {} positions", first_position,
                                 first_position + static_cast<double>(rows.rows()) - 1, rotary.angles.rows()));
  }
  for (Index k = 0; k < rows.rows(); ++k) {
    const double position = first_position + static_cast<double>(k);
    for (std::size_t p = 0; p < rotary.pairs(); ++p) {
      const double angle = table ? rotary.angle(first_row + k, p) : position * rotary.frequency[p];
      const double c = std::cos(angle), s = std::sin(angle);
      const double a = rows(k, rotary.first[p]), b = rows(k, rotary.second[p]);
      rows(k, rotary.first[p]) = c * a - s * b;
      rows(k, rotary.second[p]) = s * a + c * b;
    }
  }
}

namespace {

// Softmax's ||dA/dW_K||_F^2 / lambda^2 for one row whose keys' parameter gradients are features z_k with
// <z_k, z_l> = B(k, l) (docs/THEORY.md): sum_j a_j^2 ||z_j - zbar||^2 with zbar = sum_l a_l z_l. Measured from
// the row's most probable key r (H(k, l) = B(k, l) - B(k, r) - B(r, l) + B(r, r), which vanishes on r's row and
// column), no term cancels when the row is near one-hot: the sums skip r, whose weight would otherwise cancel.
// What costs O(N^2) are two forms of B, w^T B w and u^T B w, with w = a and u = a^2 off r (0 at r); the rest is
// O(N) from B's diagonal and its column r.
struct CenteredRow {
  explicit CenteredRow(std::span<const double> a)
      : probabilities(a),
        r(static_cast<Index>(std::max_element(a.begin(), a.end()) - a.begin())),
        w(Eigen::Map<const Vector>(a.data(), static_cast<Index>(a.size()))) {
    w[r] = 0;
    u = w.cwiseAbs2();
  }

  template <class Kernel>
  double term(const Kernel& B, const detail::KernelForms& forms) const {
    const Index visible = w.size();
    const double b_rr = B(r, r);
    Vector g(visible);
    for (Index j = 0; j < visible; ++j) g[j] = B(j, r);
    const double others = w.sum();  // 1 - a_r, summed from the small terms
    const double weighted_g = w.dot(g), u_sum = u.sum();
    // a^T H a and sum_{j != r} a_j^2 (H a)_j, from the forms of B.
    const double a_h_a = forms.ww - 2 * others * weighted_g + b_rr * others * others;
    const double u_h_a = forms.uw - others * (u.dot(g) - b_rr * u_sum) - weighted_g * u_sum;
    double diagonal = 0;  // sum_{j != r} a_j^2 H(j, j)
    for (Index j = 0; j < visible; ++j) {
      if (j != r) diagonal += u[j] * (B(j, j) - 2 * g[j] + b_rr);
    }
    const double a_r = probabilities[static_cast<std::size_t>(r)];
    // a sum of squares; rounding must not make it negative
    return std::max(a_r * a_r * a_h_a + diagonal - 2 * u_h_a + u_sum * a_h_a, 0.0);
  }

  std::span<const double> probabilities;
  Index r;
  Vector w, u;
};

// The forms of a kernel given as a matrix: O(N^2).
detail::KernelForms dense_forms(const Matrix& B, const CenteredRow& row) {
  const Vector Bw = B * row.w;
  return {row.w.dot(Bw), row.u.dot(Bw)};
}

// Under rotary positions alone the kernel is B(k, l) = (x_k . x_l) C_i(k - l), C_i(m) = sum_p |v_i,p|^2
// cos(m theta_p) (+ the unrotated coordinates' share): O(N^2) per row from the Gram matrix of X.
double rotary_key_term(const Matrix& gram, std::span<const double> a, std::span<const double> c,
                       std::span<const Index> keys) {
  const auto visible = static_cast<Index>(a.size());
  const auto position = [&](Index k) { return keys[static_cast<std::size_t>(k)]; };
  const auto B = [&](Index k, Index l) {
    return gram(position(k), position(l)) * c[static_cast<std::size_t>(std::abs(position(k) - position(l)))];
  };
  const CenteredRow row(a);
  // Keys in one run of positions (a sliding window, a causal prefix, all) read the Gram rows in place.
  if (keys.back() - keys.front() == visible - 1) {
    detail::RotaryKernelRows run(1, keys.front(), visible);
    run.set_row(0, row.w, row.u, c.data());
    return row.term(B, run.forms(gram).front());
  }
  Matrix kernel(visible, visible);
  for (Index k = 0; k < visible; ++k) {
    for (Index l = 0; l < visible; ++l) kernel(k, l) = B(k, l);
  }
  return row.term(B, dense_forms(kernel, row));
}

// Softmax's keys under rotary positions: the Gram matrix of X, the cosines cos(m theta_p) for m = 0 .. N-1 and
// the coordinates in no pair, computed once per call.
struct RotaryKeys {
  RotaryKeys(const Rotary& embedding, const Matrix& X, Index head_dimension, const Matrix* given_gram)
      : rotary(embedding),
        own_gram(given_gram ? Matrix() : Matrix(X * X.transpose())),
        gram(given_gram ? *given_gram : own_gram) {
    if (gram.rows() != X.rows() || gram.cols() != X.rows()) {
      throw InputError(fmt::format("the Gram matrix is {}x{} for {} rows", gram.rows(), gram.cols(), X.rows()));
    }
    if (rotary.dimension != head_dimension) {
      throw InputError(
          fmt::format("rotary embedding of dimension {} for heads of dimension {}", rotary.dimension, head_dimension));
    }
    if (rotary.angles.size() != 0) throw std::logic_error("angles per position reached the Toeplitz rotary kernel");
    const Index n = X.rows();
    cosines.resize(n, static_cast<Index>(rotary.frequency.size()));
    for (Index m = 0; m < n; ++m) {
      for (Index p = 0; p < cosines.cols(); ++p) cosines(m, p) = std::cos(static_cast<double>(m) * rotary.frequency[p]);
    }
    std::vector<bool> paired(static_cast<std::size_t>(head_dimension), false);
    for (std::size_t p = 0; p < rotary.frequency.size(); ++p) {
      paired[static_cast<std::size_t>(rotary.first[p])] = paired[static_cast<std::size_t>(rotary.second[p])] = true;
    }
    for (Index k = 0; k < head_dimension; ++k) {
      if (!paired[static_cast<std::size_t>(k)]) unpaired.push_back(k);
    }
  }

  // C_i(m) for m = 0 .. N-1.
  Vector kernel_cosines(const Matrix& V, Index i) const {
    Vector pair_sq(cosines.cols());
    for (Index p = 0; p < pair_sq.size(); ++p) {
      pair_sq[p] = V(i, rotary.first[p]) * V(i, rotary.first[p]) + V(i, rotary.second[p]) * V(i, rotary.second[p]);
    }
    double unrotated = 0;
    for (Index k : unpaired) unrotated += V(i, k) * V(i, k);
    return (cosines * pair_sq).array() + unrotated;
  }

  // Row i's ||dA/dW_K||^2 / lambda^2 from its probabilities `a` over the keys at positions `keys` (any mask: the
  // rotation between two keys depends only on how far apart they are).
  double key_term(const Matrix& V, Index i, std::span<const double> a, std::span<const Index> keys) const {
    const Vector c_row = kernel_cosines(V, i);
    return rotary_key_term(gram, a, {c_row.data(), static_cast<std::size_t>(c_row.size())}, keys);
  }

  // The sum of key_term over rows `rows`, row k attending to the keys 0 .. probabilities[k].size() - 1 (a causal
  // prefix, or all). Row by row, the O(N^2) sweep of each row reads the whole Gram matrix from memory, which at long
  // contexts is the bound on its speed; here each Gram row is read once for the block and used by every row of it.
  double prefix_key_terms(const Matrix& V, std::span<const Index> rows, std::span<const Vector> probabilities) const {
    Index longest = 0;
    for (const Vector& a : probabilities) longest = std::max(longest, a.size());
    const auto block = static_cast<Index>(rows.size());
    detail::RotaryKernelRows run(block, 0, longest);
    std::vector<CenteredRow> centered;
    centered.reserve(static_cast<std::size_t>(block));
    std::vector<Vector> c(static_cast<std::size_t>(block));
    for (Index k = 0; k < block; ++k) {
      const Vector& a = probabilities[static_cast<std::size_t>(k)];
      const CenteredRow& row =
          centered.emplace_back(std::span<const double>(a.data(), static_cast<std::size_t>(a.size())));
      c[static_cast<std::size_t>(k)] = kernel_cosines(V, rows[static_cast<std::size_t>(k)]);
      run.set_row(k, row.w, row.u, c[static_cast<std::size_t>(k)].data());
    }
    const std::vector<detail::KernelForms> forms = run.forms(gram);
    double total = 0;
    for (Index k = 0; k < block; ++k) {
      const Vector& c_k = c[static_cast<std::size_t>(k)];
      const auto B = [&](Index row, Index col) { return gram(row, col) * c_k[std::abs(row - col)]; };
      total += centered[static_cast<std::size_t>(k)].term(B, forms[static_cast<std::size_t>(k)]);
    }
    return total;
  }

  const Rotary& rotary;
  Matrix own_gram;
  const Matrix& gram;
  Matrix cosines;
  std::vector<Index> unpaired;
};

}  // namespace

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
  if (map.activation.kind == ActivationKind::expression) {
    const PhiExpression& e = *map.activation.expression;
    if (map.activation.normalize_rows) {
      throw InputError(
          fmt::format("'{}' normalized by rows: measured by attncheck mc, not yet on a model's heads", e.text()));
    }
    if (e.uses_sizes()) throw std::logic_error("row_terms: an expression's N and d are bound by the caller");
    // One program per thread and expression: a head's rows share it.
    thread_local std::string compiled_text;
    thread_local std::optional<PhiProgram> program;
    thread_local std::vector<double> f, g, work;
    if (!program || compiled_text != e.text()) {
      program = e.compile(0, 0);
      compiled_text = e.text();
    }
    f.resize(s.size());
    g.resize(s.size());
    program->evaluate(s.data(), static_cast<Index>(s.size()), f.data(), g.data(), work);
    for (std::size_t j = 0; j < s.size(); ++j) {
      if (!std::isfinite(f[j]) || !std::isfinite(g[j])) {
        throw InputError(fmt::format("'{}' at the score {:.17g} (row {}, 0-based): phi = {}, phi' = {}, not finite",
                                     e.text(), s[j], row, f[j], g[j]));
      }
      terms.value_sq += f[j] * f[j];
      weights[j] = g[j] * g[j];
      terms.dS_sq += g[j] * g[j];
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

// Adds row i: U_att, X_att hold the rows u_j, x_j of the keys row i attends to, u_sq_att, x_sq_att their squared
// norms; s_row and w_row are scratch of at least that many entries.
void add_row(const AttentionMap& map, Index i, const Eigen::Ref<const Matrix>& U_att,
             const Eigen::Ref<const Matrix>& X_att, const Eigen::Ref<const Vector>& u_sq_att,
             const Eigen::Ref<const Vector>& x_sq_att, const Matrix& V, double x_sq_i, double v_sq_i, Vector& s_row,
             Vector& w_row, AttentionSquaredSums& sums, const RotaryKeys* rotary_keys = nullptr,
             std::span<const Index> keys = {}, Vector* deferred_probabilities = nullptr) {
  const Index visible = U_att.rows();
  s_row.head(visible).noalias() = map.inner * (U_att * V.row(i).transpose());
  const RowTerms terms = row_terms(map, {s_row.data(), static_cast<std::size_t>(visible)},
                                   {w_row.data(), static_cast<std::size_t>(visible)}, i);
  sums.value_sq += terms.value_sq;
  sums.dS_sq += terms.dS_sq;
  if (map.activation.kind != ActivationKind::softmax) {  // elementwise: built-in or an expression
    for (Index j = 0; j < visible; ++j) {
      sums.dQ_sq += w_row[j] * x_sq_i * u_sq_att[j];
      sums.dK_sq += w_row[j] * x_sq_att[j] * v_sq_i;
    }
    return;
  }
  // Differences u_j - ubar_i are formed explicitly: expanding the square cancels when a row is near one-hot.
  const auto a = w_row.head(visible);
  const Eigen::RowVectorXd u_bar = a.transpose() * U_att;
  double q_sum = 0, k_sum = 0;
  for (Index j = 0; j < visible; ++j) q_sum += a[j] * a[j] * (U_att.row(j) - u_bar).squaredNorm();
  // Under rotary keys the key term reads the Gram matrix instead, and the O(N D) mean of the keys' rows is not needed.
  if (!rotary_keys) {
    const Eigen::RowVectorXd x_bar = a.transpose() * X_att;
    for (Index j = 0; j < visible; ++j) k_sum += a[j] * a[j] * (X_att.row(j) - x_bar).squaredNorm();
  }
  sums.dQ_sq += x_sq_i * q_sum;
  // Rotary keys mix positions, so no rotation factors out of dA/dW_K (docs/THEORY.md). A caller that batches the
  // key terms of several rows (RotaryKeys::prefix_key_terms) takes the probabilities instead.
  if (deferred_probabilities) {
    *deferred_probabilities = a;
  } else {
    sums.dK_sq += rotary_keys ? rotary_keys->key_term(V, i, {w_row.data(), static_cast<std::size_t>(visible)}, keys)
                              : v_sq_i * k_sum;
  }
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

}  // namespace

AttentionSquaredSums& AttentionSquaredSums::operator+=(const AttentionSquaredSums& other) {
  value_sq += other.value_sq;
  dS_sq += other.dS_sq;
  dQ_sq += other.dQ_sq;
  dK_sq += other.dK_sq;
  return *this;
}

AttentionNorms attention_norms_from_sums(const AttentionMap& map, Index n, const AttentionSquaredSums& sums) {
  const double c = map.outer.at(n);
  AttentionNorms out;
  out.value_fro = c * std::sqrt(sums.value_sq);
  out.dS_fro = c * std::sqrt(sums.dS_sq);
  out.dQ_fro = c * std::abs(map.inner) * std::sqrt(sums.dQ_sq);
  out.dK_fro = c * std::abs(map.inner) * std::sqrt(sums.dK_sq);
  return out;
}

namespace {

void check_mask(const AttendedMask& attended, Index rows, Index cols) {
  if (attended.rows() != rows || attended.cols() != cols) {
    throw InputError(
        fmt::format("the mask is {}x{}, but the scores are {}x{}", attended.rows(), attended.cols(), rows, cols));
  }
}

// The rows [first, end) of `rows` within n rows.
std::pair<Index, Index> row_span(RowRange rows, Index n) {
  const Index end = rows.count == -1 ? n : rows.first + rows.count;
  if (rows.first < 0 || rows.first > n || rows.count < -1 || end < rows.first || end > n) {
    throw InputError(fmt::format("rows {} .. {} (0-based) are not within the {} rows", rows.first, end - 1, n));
  }
  return {rows.first, end};
}

// Rows `rows` without query/key norms or a cap: the rotary and plain overloads.
AttentionSquaredSums plain_row_sums(const AttentionMap& map, const Matrix& X, const Matrix& V, const Matrix& U,
                                    bool causal, const Rotary* rotary, const Matrix* gram, RowRange rows) {
  check_projections(map, X, V, U);
  const Index n = X.rows();
  const auto [first, end] = row_span(rows, n);
  const Vector x_sq = X.rowwise().squaredNorm(), u_sq = U.rowwise().squaredNorm(), v_sq = V.rowwise().squaredNorm();
  std::optional<RotaryKeys> rotary_keys;
  if (rotary && map.activation.kind == ActivationKind::softmax) rotary_keys.emplace(*rotary, X, V.cols(), gram);
  std::vector<Index> positions(static_cast<std::size_t>(n));
  std::iota(positions.begin(), positions.end(), Index{0});
  AttentionSquaredSums sums;
  Vector s_row(n), w_row(n);
  // Rotary keys' terms a block of rows at a time (RotaryKeys::prefix_key_terms).
  std::vector<Index> block_rows;
  std::vector<Vector> block_probabilities(static_cast<std::size_t>(kRotaryKeyBlockRows));
  for (Index i = first; i < end; ++i) {
    // The attended keys of a causal row are a prefix, so they are used in place.
    const Index visible = causal ? i + 1 : n;
    Vector* deferred = rotary_keys ? &block_probabilities[block_rows.size()] : nullptr;
    add_row(map, i, U.topRows(visible), X.topRows(visible), u_sq.head(visible), x_sq.head(visible), V, x_sq[i], v_sq[i],
            s_row, w_row, sums, rotary_keys ? &*rotary_keys : nullptr,
            std::span<const Index>(positions).first(static_cast<std::size_t>(visible)), deferred);
    if (!rotary_keys) continue;
    block_rows.push_back(i);
    if (static_cast<Index>(block_rows.size()) == kRotaryKeyBlockRows || i == end - 1) {
      sums.dK_sq +=
          rotary_keys->prefix_key_terms(V, block_rows, std::span(block_probabilities).first(block_rows.size()));
      block_rows.clear();
    }
  }
  return sums;
}

AttentionSquaredSums plain_row_sums(const AttentionMap& map, const Matrix& X, const Matrix& V, const Matrix& U,
                                    const AttendedMask& attended, const Rotary* rotary, const Matrix* gram,
                                    RowRange rows) {
  check_projections(map, X, V, U);
  const Index n = X.rows();
  check_mask(attended, n, n);
  const auto [first, end] = row_span(rows, n);
  std::optional<RotaryKeys> rotary_keys;
  if (rotary && map.activation.kind == ActivationKind::softmax) rotary_keys.emplace(*rotary, X, V.cols(), gram);
  const Vector x_sq = X.rowwise().squaredNorm(), u_sq = U.rowwise().squaredNorm(), v_sq = V.rowwise().squaredNorm();
  AttentionSquaredSums sums;
  Vector s_row(n), w_row(n);
  std::vector<Index> keys;
  keys.reserve(static_cast<std::size_t>(n));
  for (Index i = first; i < end; ++i) {
    keys.clear();
    for (Index j = 0; j < n; ++j) {
      if (attended(i, j)) keys.push_back(j);
    }
    const Matrix U_att = U(keys, Eigen::all), X_att = X(keys, Eigen::all);
    const Vector u_sq_att = u_sq(keys), x_sq_att = x_sq(keys);
    add_row(map, i, U_att, X_att, u_sq_att, x_sq_att, V, x_sq[i], v_sq[i], s_row, w_row, sums,
            rotary_keys ? &*rotary_keys : nullptr, keys);
  }
  return sums;
}

}  // namespace

AttentionNorms attention_norms_from_projections(const AttentionMap& map, const Matrix& X, const Matrix& V,
                                                const Matrix& U, bool causal, const Rotary* rotary,
                                                const Matrix* gram) {
  return attention_norms_from_projections(map, X, V, U, causal, ScoreMaps{.rotary = rotary, .gram = gram});
}

AttentionNorms attention_norms_from_projections(const AttentionMap& map, const Matrix& X, const Matrix& V,
                                                const Matrix& U, const AttendedMask& attended, const Rotary* rotary,
                                                const Matrix* gram) {
  return attention_norms_from_projections(map, X, V, U, attended, ScoreMaps{.rotary = rotary, .gram = gram});
}

Matrix rms_normalized(const Matrix& rows, const Vector& gain, double eps) {
  if (gain.size() != rows.cols()) {
    throw InputError(fmt::format("an RMSNorm gain of {} entries for rows of {}", gain.size(), rows.cols()));
  }
  Matrix out(rows.rows(), rows.cols());
  for (Index i = 0; i < rows.rows(); ++i)
    out.row(i) = rows.row(i) / std::sqrt(rows.row(i).squaredNorm() / static_cast<double>(rows.cols()) + eps);
  out.array().rowwise() *= gain.transpose().array();
  return out;
}

namespace {

void check_other_heads(const OtherHeads& others, const Matrix& rows, const HeadNorm& norm, const char* which) {
  if (norm.centred) throw InputError(fmt::format("a {} LayerNorm over all the heads is not measured", which));
  if (others.coordinates < 0 || others.squares.size() != rows.rows()) {
    throw InputError(fmt::format("the {} norm's other heads have {} squares ({} coordinates) for {} rows", which,
                                 others.squares.size(), others.coordinates, rows.rows()));
  }
}

}  // namespace

Matrix head_normalized(const Matrix& rows, const HeadNorm& norm, const OtherHeads* others) {
  if (others) {
    check_other_heads(*others, rows, norm, "head");
    if (norm.gain.size() != rows.cols()) {
      throw InputError(fmt::format("an RMSNorm gain of {} entries for rows of {}", norm.gain.size(), rows.cols()));
    }
    const double width = static_cast<double>(rows.cols() + others->coordinates);
    Matrix out(rows.rows(), rows.cols());
    for (Index i = 0; i < rows.rows(); ++i) {
      const double rms = std::sqrt((rows.row(i).squaredNorm() + others->squares[i]) / width + norm.eps);
      out.row(i) = rows.row(i).cwiseProduct(norm.gain.transpose()) / rms;
    }
    return out;
  }
  if (!norm.centred) return rms_normalized(rows, norm.gain, norm.eps);
  if (norm.bias.size() != 0 && norm.bias.size() != rows.cols()) {
    throw InputError(fmt::format("a LayerNorm bias of {} entries for rows of {}", norm.bias.size(), rows.cols()));
  }
  Matrix centred = rows;
  centred.colwise() -= rows.rowwise().mean();
  Matrix out = rms_normalized(centred, norm.gain, norm.eps);
  if (norm.bias.size() != 0) out.rowwise() += norm.bias.transpose();
  return out;
}

namespace {

using RowVector = Eigen::RowVectorXd;

// A head norm's Jacobian at each row p of P: diag(g) (C - w w^T) / r with r = sqrt(mean(c^2) + eps),
// w = c / (sqrt(d) r), c = C p, and C = I for an RMSNorm, I - 1 1^T / d for a LayerNorm (C w = w, so w w^T = C w w^T
// C). Its transpose sends y to (C (g . y) - w (w . (g . y))) / r, O(d); the bias does not enter.
//
// Over all the heads (`others`), with r over the width W = d + the others' coordinates and w = p / (sqrt(W) r) on the
// head's own coordinates, the map from all W raw coordinates to the head's d has the transpose
// y -> ((g . y) - w (w . (g . y))) / r on the head's coordinates and -(w . (g . y)) p' / (sqrt(W) r^2) on the others'
// raw coordinates p': transpose_times returns that multiple of p'.
struct NormJacobians {
  NormJacobians(const HeadNorm& norm, const Matrix* raw, const Matrix& normalized, const char* which,
                const OtherHeads* others)
      : gain(norm.gain.transpose()), centred(norm.centred) {
    if (!raw) throw InputError(fmt::format("the {} norm needs the {} projections before it", which, which));
    if (raw->rows() != normalized.rows() || raw->cols() != normalized.cols() || gain.size() != raw->cols()) {
      throw InputError(fmt::format("the {} projections are {}x{} before the norm (gain of {}), {}x{} after it", which,
                                   raw->rows(), raw->cols(), gain.size(), normalized.rows(), normalized.cols()));
    }
    if (!std::isfinite(norm.eps) || norm.eps < 0) {
      throw InputError(fmt::format("the {} norm's epsilon {} is not a finite number >= 0", which, norm.eps));
    }
    if (others) check_other_heads(*others, *raw, norm, which);
    const double width = static_cast<double>(raw->cols() + (others ? others->coordinates : 0));
    directions.resize(raw->rows(), raw->cols());
    inverse_rms.resize(raw->rows());
    for (Index i = 0; i < raw->rows(); ++i) {
      RowVector c = raw->row(i);
      if (centred) c.array() -= c.mean();
      const double rms = std::sqrt((c.squaredNorm() + (others ? others->squares[i] : 0.0)) / width + norm.eps);
      inverse_rms[i] = 1 / rms;
      directions.row(i) = c / (std::sqrt(width) * rms);
    }
    root_width = std::sqrt(width);
  }
  double transpose_times(Index i, Eigen::Ref<RowVector> y) const {
    y.array() *= gain.array();
    const double along = directions.row(i).dot(y);
    y -= along * directions.row(i);
    if (centred) y.array() -= y.mean();  // w has mean 0: C (z - w (w . z)) = z - mean(z) - w (w . z)
    y *= inverse_rms[i];
    return -along * inverse_rms[i] * inverse_rms[i] / root_width;
  }
  RowVector gain;
  bool centred = false;
  Matrix directions;
  Vector inverse_rms;
  double root_width = 1;
};

// R(t)^T y for positions t = 0 .. N-1 from a table of the angles' cosines and sines.
struct RotationsBack {
  RotationsBack(const Rotary& embedding, Index n, Index d) : rotary(embedding) {
    if (rotary.dimension != d) {
      throw InputError(fmt::format("rotary embedding of dimension {} for heads of dimension {}", rotary.dimension, d));
    }
    if (rotary.angles.size() != 0 && rotary.angles.rows() != n) {
      throw InputError(fmt::format("rotary angles of {} positions for {} rows", rotary.angles.rows(), n));
    }
    const auto pairs = static_cast<Index>(rotary.pairs());
    cosines.resize(n, pairs);
    sines.resize(n, pairs);
    for (Index t = 0; t < n; ++t) {
      for (Index p = 0; p < pairs; ++p) {
        cosines(t, p) = std::cos(rotary.angle(t, static_cast<std::size_t>(p)));
        sines(t, p) = std::sin(rotary.angle(t, static_cast<std::size_t>(p)));
      }
    }
  }
  void apply(Index t, Eigen::Ref<RowVector> y) const {
    for (Index p = 0; p < cosines.cols(); ++p) {
      const Index f = rotary.first[static_cast<std::size_t>(p)], s = rotary.second[static_cast<std::size_t>(p)];
      const double a = y[f], b = y[s];
      y[f] = cosines(t, p) * a + sines(t, p) * b;
      y[s] = -sines(t, p) * a + cosines(t, p) * b;
    }
  }
  const Rotary& rotary;
  Matrix cosines, sines;
};

// The maps of one call, prepared once: the norms' Jacobians, the rotations, the Gram matrix of X.
struct PreparedMaps {
  PreparedMaps(const AttentionMap& map, const ScoreMaps& maps, const Matrix& X, const Matrix& V, const Matrix& U)
      : cap(maps.logit_softcap) {
    if (!std::isfinite(cap) || cap < 0) {
      throw InputError(fmt::format("logit soft-cap {} is not a finite number >= 0 (0: none)", cap));
    }
    if ((maps.query_others && !maps.query_norm) || (maps.key_others && !maps.key_norm)) {
      throw InputError("the other heads' coordinates are given without a norm over all the heads");
    }
    if (maps.query_norm) query_norm.emplace(*maps.query_norm, maps.raw_queries, V, "query", maps.query_others);
    if (maps.key_norm) key_norm.emplace(*maps.key_norm, maps.raw_keys, U, "key", maps.key_others);
    query_others = maps.query_others;
    key_others = maps.key_others;
    if (key_others && map.activation.kind == ActivationKind::softmax &&
        (key_others->gram.rows() != X.rows() || key_others->gram.cols() != X.rows())) {
      throw InputError(fmt::format("the other heads' key Gram matrix is {}x{} for {} rows", key_others->gram.rows(),
                                   key_others->gram.cols(), X.rows()));
    }
    if (maps.rotary) rotations.emplace(*maps.rotary, X.rows(), V.cols());
    // Only softmax's key term reads the Gram matrix.
    if (map.activation.kind == ActivationKind::softmax && !maps.gram) own_gram = X * X.transpose();
    gram = maps.gram ? maps.gram : &own_gram;
    if (map.activation.kind == ActivationKind::softmax && (gram->rows() != X.rows() || gram->cols() != X.rows())) {
      throw InputError(fmt::format("the Gram matrix is {}x{} for {} rows", gram->rows(), gram->cols(), X.rows()));
    }
  }
  // M^T y for the map M from a raw projection at position t to the row the scores read: R(t) norm(.). Under a norm
  // over all the heads, the part on the other heads' raw coordinates is the returned multiple of them.
  double back(const std::optional<NormJacobians>& norm, Index t, Eigen::Ref<RowVector> y) const {
    if (rotations) rotations->apply(t, y);
    return norm ? norm->transpose_times(t, y) : 0.0;
  }
  double cap;
  std::optional<NormJacobians> query_norm, key_norm;
  const OtherHeads* query_others = nullptr;
  const OtherHeads* key_others = nullptr;
  std::optional<RotationsBack> rotations;
  Matrix own_gram;
  const Matrix* gram = nullptr;
};

// Row i of the general case (docs/THEORY.md, "Query and key norms, soft-capped logits"): s_j = lambda v_i . u_j
// over the attended keys, the softmax's logits capped, and dF_il/dW_Q = lambda x_i (M_i^T y_l)^T,
// dF_il/dW_K = lambda sum_j J_lj c_j x_j (M'_j^T v_i)^T through each position's map.
void add_general_row(const AttentionMap& map, Index i, std::span<const Index> keys, const Matrix& V, const Matrix& U,
                     const Vector& x_sq, const PreparedMaps& prepared, AttentionSquaredSums& sums) {
  const auto visible = static_cast<Index>(keys.size());
  const bool softmax = map.activation.kind == ActivationKind::softmax;
  const Matrix U_att = U(keys, Eigen::all);
  Vector s = map.inner * (U_att * V.row(i).transpose());
  // c_j = d(cap tanh(s_j / cap)) / ds_j multiplies every derivative through the logit.
  Vector c = Vector::Ones(visible);
  if (softmax && prepared.cap > 0) {
    for (Index j = 0; j < visible; ++j) {
      const double t = std::tanh(s[j] / prepared.cap);
      s[j] = prepared.cap * t;
      c[j] = 1 - t * t;
    }
  }
  Vector w(visible);
  const RowTerms terms =
      row_terms(map, {s.data(), static_cast<std::size_t>(visible)}, {w.data(), static_cast<std::size_t>(visible)}, i);
  sums.value_sq += terms.value_sq;
  sums.dS_sq += terms.dS_sq;
  const auto key = [&](Index j) { return keys[static_cast<std::size_t>(j)]; };
  // Queries: y_l = a_l (c_l u_l - sum_j a_j c_j u_j) for softmax (differences formed explicitly: a near one-hot
  // row would cancel them), u_l with weight h'(s_l)^2 for the elementwise maps.
  Matrix Y = U_att;
  if (softmax) {
    Y = c.asDiagonal() * U_att;
    const RowVector y_bar = w.transpose() * Y;
    for (Index l = 0; l < visible; ++l) Y.row(l) = w[l] * (Y.row(l) - y_bar);
  }
  // Under a norm over all the heads each M^T y also has a multiple of the other heads' raw coordinates, whose
  // squared length (queries) or Gram matrix (keys) adds to the head's own part.
  Vector y_sq = Vector::Zero(visible);
  if (prepared.query_norm) {
    for (Index l = 0; l < visible; ++l) {
      const double others = prepared.back(prepared.query_norm, i, Y.row(l));
      if (prepared.query_others) y_sq[l] = others * others * prepared.query_others->squares[i];
    }
  }
  y_sq += Y.rowwise().squaredNorm();
  sums.dQ_sq += x_sq[i] * (softmax ? y_sq.sum() : w.dot(y_sq));
  // Keys: z_j = c_j M'_j^T v_i, the key j's gradient direction in W_K (times x_j).
  Matrix Z = V.row(i).replicate(visible, 1);
  Vector z_others = Vector::Zero(visible);
  for (Index j = 0; j < visible; ++j) {
    z_others[j] = c[j] * prepared.back(prepared.key_norm, key(j), Z.row(j));
    Z.row(j) *= c[j];
  }
  if (!softmax) {
    for (Index j = 0; j < visible; ++j) {
      const double others = prepared.key_others ? z_others[j] * z_others[j] * prepared.key_others->squares[key(j)] : 0;
      sums.dK_sq += w[j] * x_sq[key(j)] * (Z.row(j).squaredNorm() + others);
    }
    return;
  }
  Matrix directions = Z * Z.transpose();
  if (prepared.key_others)
    directions += (z_others * z_others.transpose()).cwiseProduct(prepared.key_others->gram(keys, keys));
  const Matrix B = (*prepared.gram)(keys, keys).cwiseProduct(directions);
  const CenteredRow row({w.data(), static_cast<std::size_t>(visible)});
  sums.dK_sq += row.term([&](Index k, Index l) { return B(k, l); }, dense_forms(B, row));
}

// Angles per position break the Toeplitz kernel of plain_row_sums' rotary keys (C_i(t_k - t_l)): softmax's key
// term then goes through each position's rotation as the norms' maps do.
bool needs_general_rows(const AttentionMap& map, const ScoreMaps& maps) {
  const bool softmax = map.activation.kind == ActivationKind::softmax;
  return maps.query_norm || maps.key_norm || (maps.logit_softcap != 0 && softmax) ||
         (maps.rotary && maps.rotary->angles.size() != 0 && softmax);
}

}  // namespace

bool key_term_reads_gram(const AttentionMap& map, const ScoreMaps& maps) {
  return map.activation.kind == ActivationKind::softmax && (maps.rotary || needs_general_rows(map, maps));
}

AttentionSquaredSums attention_row_sums_from_projections(const AttentionMap& map, const Matrix& X, const Matrix& V,
                                                         const Matrix& U, bool causal, const ScoreMaps& maps,
                                                         RowRange rows) {
  if (!needs_general_rows(map, maps)) return plain_row_sums(map, X, V, U, causal, maps.rotary, maps.gram, rows);
  check_projections(map, X, V, U);
  const Index n = X.rows();
  const auto [first, end] = row_span(rows, n);
  const PreparedMaps prepared(map, maps, X, V, U);
  const Vector x_sq = X.rowwise().squaredNorm();
  std::vector<Index> positions(static_cast<std::size_t>(n));
  std::iota(positions.begin(), positions.end(), Index{0});
  AttentionSquaredSums sums;
  for (Index i = first; i < end; ++i) {
    const auto visible = static_cast<std::size_t>(causal ? i + 1 : n);
    add_general_row(map, i, std::span<const Index>(positions).first(visible), V, U, x_sq, prepared, sums);
  }
  return sums;
}

AttentionNorms attention_norms_from_projections(const AttentionMap& map, const Matrix& X, const Matrix& V,
                                                const Matrix& U, bool causal, const ScoreMaps& maps) {
  return attention_norms_from_sums(map, X.rows(), attention_row_sums_from_projections(map, X, V, U, causal, maps, {}));
}

AttentionSquaredSums attention_row_sums_from_projections(const AttentionMap& map, const Matrix& X, const Matrix& V,
                                                         const Matrix& U, const AttendedMask& attended,
                                                         const ScoreMaps& maps, RowRange rows) {
  if (!needs_general_rows(map, maps)) return plain_row_sums(map, X, V, U, attended, maps.rotary, maps.gram, rows);
  check_projections(map, X, V, U);
  const Index n = X.rows();
  check_mask(attended, n, n);
  const auto [first, end] = row_span(rows, n);
  const PreparedMaps prepared(map, maps, X, V, U);
  const Vector x_sq = X.rowwise().squaredNorm();
  AttentionSquaredSums sums;
  std::vector<Index> keys;
  for (Index i = first; i < end; ++i) {
    keys.clear();
    for (Index j = 0; j < n; ++j) {
      if (attended(i, j)) keys.push_back(j);
    }
    add_general_row(map, i, keys, V, U, x_sq, prepared, sums);
  }
  return sums;
}

AttentionNorms attention_norms_from_projections(const AttentionMap& map, const Matrix& X, const Matrix& V,
                                                const Matrix& U, const AttendedMask& attended, const ScoreMaps& maps) {
  return attention_norms_from_sums(map, X.rows(),
                                   attention_row_sums_from_projections(map, X, V, U, attended, maps, {}));
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
    throw InputError(fmt::format("explicit Jacobian would have {} entries; it is for small test cases", n * n * D * d));
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
          dS_dP(i * n + j, a * d + b) = map.inner * (parameter == Parameter::Q ? X(i, a) * U(j, b) : V(i, b) * X(j, a));
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
