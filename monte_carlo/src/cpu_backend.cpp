#include "attncheck/monte_carlo/cpu_backend.hpp"

#include "attncheck/monte_carlo/backend_registry.hpp"

#include "attncheck/monte_carlo/entry_terms.hpp"
#include "attncheck/monte_carlo/sample_norms.hpp"
#include "attncheck/records/memory_budget.hpp"
#include "attncheck/streams/cpu_features.hpp"
#include "attncheck/streams/parallel.hpp"
#include "attncheck/streams/random_stream.hpp"
#include "attncheck/theory/cross_norm.hpp"
#include "attncheck/theory/softmax.hpp"

#include <fmt/format.h>

#if defined(ATTNCHECK_MC_OPENBLAS)
#include <cblas.h>
#endif

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <optional>
#include <type_traits>

namespace attncheck::monte_carlo {

using streams::box_muller_uniforms;
using streams::parallel_for;
using streams::PhiloxStream;
using theory::ActivationKind;
using theory::Index;
using theory::InputError;
using theory::Matrix;
using theory::Pointwise;
using theory::Vector;

namespace {

// C = A_rows * B_rows^T for row blocks of row-major matrices: the score tiles, the one product that
// dominates the run time. OpenBLAS when the build selected it (bench/monte_carlo measures both), else Eigen.
void multiply_transposed(const Matrix& A, Index a0, Index rows, const Matrix& B, Index b0, Index cols, Matrix& C) {
#if defined(ATTNCHECK_MC_OPENBLAS)
  cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<blasint>(rows), static_cast<blasint>(cols),
              static_cast<blasint>(A.cols()), 1.0, A.data() + a0 * A.cols(), static_cast<blasint>(A.cols()),
              B.data() + b0 * B.cols(), static_cast<blasint>(B.cols()), 0.0, C.data(), static_cast<blasint>(C.cols()));
#else
  C.topLeftCorner(rows, cols).noalias() = A.middleRows(a0, rows) * B.middleRows(b0, cols).transpose();
#endif
}

// The parallelism is ours (samples or row blocks of a sample): a GEMM library's own threads would nest inside
// it. Set once, before the first product, whoever calls.
void use_single_threaded_gemm() {
  static const bool done = [] {
    Eigen::setNbThreads(1);
#if defined(ATTNCHECK_MC_OPENBLAS)
    openblas_set_num_threads(1);
#endif
    return true;
  }();
  (void)done;
}

// C = A * B (or A^T * B): the projections X Q, X K and the d x d Gram matrices, through the same library. C is
// resized only when its shape changes, so a caller that keeps C from sample to sample allocates nothing.
// Row-major FP32: the projections of --precision mixed.
using MatrixF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

template <class M>
void product_into(const M& A, bool transpose_a, const M& B, M& C) {
  const Index rows = transpose_a ? A.cols() : A.rows(), inner = transpose_a ? A.rows() : A.cols();
  C.resize(rows, B.cols());
#if defined(ATTNCHECK_MC_OPENBLAS)
  const auto gemm = [](auto... args) {
    if constexpr (std::is_same_v<typename M::Scalar, float>) {
      cblas_sgemm(args...);
    } else {
      cblas_dgemm(args...);
    }
  };
  gemm(CblasRowMajor, transpose_a ? CblasTrans : CblasNoTrans, CblasNoTrans, static_cast<blasint>(rows),
       static_cast<blasint>(B.cols()), static_cast<blasint>(inner), typename M::Scalar(1), A.data(),
       static_cast<blasint>(A.cols()), B.data(), static_cast<blasint>(B.cols()), typename M::Scalar(0), C.data(),
       static_cast<blasint>(C.cols()));
#else
  (void)inner;
  if (transpose_a) {
    C.noalias() = A.transpose() * B;
  } else {
    C.noalias() = A * B;
  }
#endif
}

Matrix product(const Matrix& A, bool transpose_a, const Matrix& B) {
  Matrix C;
  product_into(A, transpose_a, B, C);
  return C;
}

[[noreturn]] void throw_nan_score(const Matrix& tile, Index rows, Index cols, Index i0, Index j0) {
  for (Index r = 0; r < rows; ++r) {
    for (Index c = 0; c < cols; ++c) {
      if (std::isnan(tile(r, c))) {
        throw InputError(fmt::format("NaN score at row {}, column {} (0-based)", i0 + r, j0 + c));
      }
    }
  }
  throw InputError(fmt::format("non-finite per-entry term in rows {}..{} (a score overflowed)", i0, i0 + rows - 1));
}

struct Shared {
  const Matrix& X;
  const Matrix& V;     // lambda X Q: the scale sits on V so that a tile is one GEMM
  const Matrix& U;     // X K
  const Vector& x_sq;  // row norms; v_sq of the unscaled X Q
  const Vector& u_sq;
  const Vector& v_sq;
  Index tile;
};

// One thread's per-sample matrices, kept from sample to sample: a sample of the same shape then allocates
// nothing. Fresh N x d matrices every sample cost page faults and the heap's trimming and regrowth, about a
// tenth of a sample's time at N = 1024 (measured with perf).
struct SampleScratch {
  Matrix U, Vraw, V;
  Vector x_sq, u_sq, v_sq;
  MatrixF X_fp32, Q_fp32, K_fp32, U_fp32, V_fp32;  // --precision mixed
};

SampleScratch& thread_scratch() {
  thread_local SampleScratch scratch;
  return scratch;
}

// Sums over one row segment of a score tile: phi^2, phi'^2, phi'^2 ||u_j||^2, phi'^2 ||x_j||^2 (entry_terms.hpp).
template <class Terms>
inline void reduce_row(const Terms& terms, const double* s, const double* u_sq, const double* x_sq, Index n,
                       double* sums) {
  double value_sq = 0, deriv_sq = 0, dq = 0, dk = 0;
#pragma omp simd reduction(+ : value_sq, deriv_sq, dq, dk)
  for (Index j = 0; j < n; ++j) {
    const EntryTerms<double> t = terms(s[j]);
    value_sq += t.value_sq;
    deriv_sq += t.deriv_sq;
    dq += t.deriv_sq * u_sq[j];
    dk += t.deriv_sq * x_sq[j];
  }
  sums[0] = value_sq;
  sums[1] = deriv_sq;
  sums[2] = dq;
  sums[3] = dk;
}

template <int P>
struct PolyTerms {
  EntryTerms<double> operator()(double s) const { return poly_entry_terms<P>(s); }
};

// The polynomial rows, the benchmarked hot loop, are also compiled for AVX2 + FMA and chosen at run time: the
// rest of the build targets baseline x86-64 so that one binary runs anywhere. (The choice changes the order of
// the SIMD partial sums, i.e. the last bits, per machine; never per thread count.)
using RowReducer = void (*)(const double*, const double*, const double*, Index, double*);
template <int P>
void reduce_poly_row_baseline(const double* s, const double* u_sq, const double* x_sq, Index n, double* sums) {
  reduce_row(PolyTerms<P>{}, s, u_sq, x_sq, n, sums);
}
template <int P>
__attribute__((target("avx2,fma"), flatten)) void reduce_poly_row_avx2(const double* s, const double* u_sq,
                                                                       const double* x_sq, Index n, double* sums) {
  reduce_row(PolyTerms<P>{}, s, u_sq, x_sq, n, sums);
}
template <int P>
RowReducer poly_row_reducer() {
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return avx2 ? &reduce_poly_row_avx2<P> : &reduce_poly_row_baseline<P>;
}

// One row block of an elementwise map: tiles lambda V_I U_J^T reduced row by row with `reduce`.
template <class Reduce>
NormSums<double> pointwise_block(const Shared& sh, Index i0, const Reduce& reduce) {
  const Index n = sh.V.rows();
  const Index ni = std::min(sh.tile, n - i0);
  Matrix S(ni, sh.tile);
  std::vector<PointwiseRowSums<double>> rows(static_cast<std::size_t>(ni));
  for (Index j0 = 0; j0 < n; j0 += sh.tile) {
    const Index nj = std::min(sh.tile, n - j0);
    multiply_transposed(sh.V, i0, ni, sh.U, j0, nj, S);
    for (Index r = 0; r < ni; ++r) {
      double sums[4];
      reduce(S.row(r).data(), sh.u_sq.data() + j0, sh.x_sq.data() + j0, nj, sums);
      if (!std::isfinite(sums[0] + sums[1] + sums[2] + sums[3])) throw_nan_score(S, ni, nj, i0, j0);
      PointwiseRowSums<double>& row = rows[static_cast<std::size_t>(r)];
      row.value_sq += sums[0];
      row.deriv_sq += sums[1];
      row.dq_inner += sums[2];
      row.dk_inner += sums[3];
    }
  }
  NormSums<double> block;
  for (Index r = 0; r < ni; ++r) {
    finish_pointwise_row(block, rows[static_cast<std::size_t>(r)], sh.x_sq[i0 + r], sh.v_sq[i0 + r]);
  }
  return block;
}

// One row block of the row softmax. Pass 1 (online): row max and its first column, normalizer l_i,
// sum of e^2 for the value, and ubar_i, xbar_i as e-weighted sums rescaled whenever the max moves.
// Pass 2, only for dS, dQ, dK: the probabilities with the final max and normalizer.
NormSums<double> softmax_block(const Shared& sh, Index i0, bool need_pass2, bool need_q, bool need_k) {
  const Index n = sh.V.rows(), d = sh.U.cols(), D = sh.X.cols();
  const Index ni = std::min(sh.tile, n - i0);
  Matrix S(ni, sh.tile), E;
  if (need_q || need_k) E.resize(ni, sh.tile);
  Vector row_max = Vector::Constant(ni, -std::numeric_limits<double>::infinity());
  Vector norm = Vector::Zero(ni), e_sq = Vector::Zero(ni);
  std::vector<Index> top(static_cast<std::size_t>(ni), 0);
  Matrix u_bar = Matrix::Zero(ni, need_q ? d : 0), x_bar = Matrix::Zero(ni, need_k ? D : 0);
  for (Index j0 = 0; j0 < n; j0 += sh.tile) {
    const Index nj = std::min(sh.tile, n - j0);
    multiply_transposed(sh.V, i0, ni, sh.U, j0, nj, S);
    for (Index r = 0; r < ni; ++r) {
      const double* s = S.row(r).data();
      Index arg = 0;
      for (Index j = 1; j < nj; ++j) {
        if (s[j] > s[arg]) arg = j;
      }
      const double tile_max = s[arg];
      if (std::isnan(tile_max) || !std::isfinite(S.row(r).head(nj).sum())) throw_nan_score(S, ni, nj, i0, j0);
      if (tile_max > row_max[r]) {
        const double rescale = std::exp(row_max[r] - tile_max);  // 0 on the first tile
        norm[r] *= rescale;
        e_sq[r] *= rescale * rescale;
        if (need_q) u_bar.row(r) *= rescale;
        if (need_k) x_bar.row(r) *= rescale;
        row_max[r] = tile_max;
        top[static_cast<std::size_t>(r)] = j0 + arg;
      }
      double l = 0, l2 = 0;
      const double m = row_max[r];
      for (Index j = 0; j < nj; ++j) {
        const double e = std::exp(s[j] - m);
        l += e;
        l2 += e * e;
        if (need_q || need_k) E(r, j) = e;
      }
      norm[r] += l;
      e_sq[r] += l2;
    }
    if (need_q) u_bar.noalias() += E.leftCols(nj) * sh.U.middleRows(j0, nj);
    if (need_k) x_bar.noalias() += E.leftCols(nj) * sh.X.middleRows(j0, nj);
  }
  NormSums<double> block;
  if (!need_pass2) {
    for (Index r = 0; r < ni; ++r) block.value_sq += e_sq[r] / (norm[r] * norm[r]);
    return block;
  }
  for (Index r = 0; r < ni; ++r) {
    if (need_q) u_bar.row(r) /= norm[r];
    if (need_k) x_bar.row(r) /= norm[r];
  }
  std::vector<SoftmaxRowSums<double>> rows(static_cast<std::size_t>(ni));
  for (Index j0 = 0; j0 < n; j0 += sh.tile) {
    const Index nj = std::min(sh.tile, n - j0);
    multiply_transposed(sh.V, i0, ni, sh.U, j0, nj, S);
    for (Index r = 0; r < ni; ++r) {
      SoftmaxRowSums<double>& row = rows[static_cast<std::size_t>(r)];
      const double m = row_max[r], l = norm[r];
      const Index t = top[static_cast<std::size_t>(r)];
      for (Index j = 0; j < nj; ++j) {
        const double a = std::exp(S(r, j) - m) / l;
        add_softmax_probability(row, a, j0 + j == t);
        if (a == 0) continue;  // underflowed: no contribution to any sum
        if (need_q) {
          row.dq_inner += a * a * squared_distance(sh.U.row(j0 + j).data(), u_bar.row(r).data(), static_cast<int>(d));
        }
        if (need_k) {
          row.dk_inner += a * a * squared_distance(sh.X.row(j0 + j).data(), x_bar.row(r).data(), static_cast<int>(D));
        }
      }
    }
  }
  for (Index r = 0; r < ni; ++r) {
    finish_softmax_row(block, rows[static_cast<std::size_t>(r)], sh.x_sq[i0 + r], sh.v_sq[i0 + r]);
  }
  return block;
}

void add_sums(double& total, double part) { total += part; }
void add_sums(NormSums<double>& total, const NormSums<double>& part) {
  total.value_sq += part.value_sq;
  total.dS_sq += part.dS_sq;
  total.dQ_sq += part.dQ_sq;
  total.dK_sq += part.dK_sq;
}

// The blocks of `tile` rows of n, block_sums(first row) each, on `threads` threads; their sums added in block
// order, so that the total is the same for any thread count.
template <class Sums, class Block>
Sums sum_row_blocks(Index n, Index tile, int threads, const Block& block_sums) {
  const Index blocks = (n + tile - 1) / tile;
  std::vector<Sums> partial(static_cast<std::size_t>(blocks));
  parallel_for(blocks, threads, [&](Index b) { partial[static_cast<std::size_t>(b)] = block_sums(b * tile); });
  Sums total{};
  for (const Sums& p : partial) add_sums(total, p);
  return total;
}

template <class Terms>
NormSums<double> tiled_sums(const Shared& sh, const EvaluationOptions& options, Terms&& block_sums) {
  return sum_row_blocks<NormSums<double>>(sh.X.rows(), sh.tile, options.threads, block_sums);
}

// ---- Expression activations (theory/expression.hpp) ---------------------------------------------------------------
// phi and phi' of one row segment at a time, in the calling thread's buffers.
struct ExpressionRow {
  const theory::PhiProgram& program;
  const theory::Activation& activation;
  std::vector<double>& f;
  std::vector<double>& g;
  std::vector<double>& work;

  static ExpressionRow of(const theory::PhiProgram& program, const theory::Activation& activation) {
    thread_local std::vector<double> f, g, work;
    return {program, activation, f, g, work};
  }
  // Fills f and g for s[0 .. n); refuses a non-finite value, naming the score (1/x at 0, exp(x^2) beyond 26.6).
  // exponent: the program computes u and u' of phi = exp(u), and the caller rescales.
  void evaluate(const double* s, Index n, bool exponent = false) {
    if (static_cast<Index>(f.size()) < n) {
      f.resize(static_cast<std::size_t>(n));
      g.resize(static_cast<std::size_t>(n));
    }
    program.evaluate(s, n, f.data(), g.data(), work);
    if (!theory::all_finite(Eigen::Map<const Vector>(f.data(), n)) ||
        !theory::all_finite(Eigen::Map<const Vector>(g.data(), n))) {
      for (Index j = 0; j < n; ++j) {
        if (!std::isfinite(f[j]) || !std::isfinite(g[j])) {
          throw InputError(fmt::format(
              "--phi '{}': {} = {} and its derivative {} at the score x = {:.17g}: not finite (the expression "
              "overflows or leaves its domain there); make the scores smaller (--inner-scale, --sigma-x, "
              "--sigma-t) or change phi",
              activation.expression->text(), exponent ? "the exponent u(x) of phi = exp(u)" : "phi(x)", f[j], g[j],
              s[j]));
        }
      }
    }
  }
};

NormSums<double> expression_tiles(const Shared& sh, const EvaluationOptions& options, const theory::PhiProgram& program,
                                  const theory::Activation& activation) {
  const auto reduce = [&](const double* s, const double* u_sq, const double* x_sq, Index n, double* sums) {
    ExpressionRow row = ExpressionRow::of(program, activation);
    row.evaluate(s, n);
    double value_sq = 0, deriv_sq = 0, dq = 0, dk = 0;
    for (Index j = 0; j < n; ++j) {
      const double f = row.f[static_cast<std::size_t>(j)], g = row.g[static_cast<std::size_t>(j)];
      value_sq += f * f;
      deriv_sq += g * g;
      dq += g * g * u_sq[j];
      dk += g * g * x_sq[j];
    }
    sums[0] = value_sq;
    sums[1] = deriv_sq;
    sums[2] = dq;
    sums[3] = dk;
  };
  return tiled_sums(sh, options, [&](Index i0) { return pointwise_block(sh, i0, reduce); });
}

// sum_k (b y_k - a ybar_k)^2 over a row of length n: the differences formed first, never expanded.
inline double weighted_squared_distance(double b, const double* y, double a, const double* ybar, int n) {
  double sum = 0;
  for (int k = 0; k < n; ++k) {
    const double diff = b * y[k] - a * ybar[k];
    sum += diff * diff;
  }
  return sum;
}

struct NormalizedSums {
  NormSums<double> norms;
  double rows_with_mass = 0;  // rows whose sum is not 0: each then sums to 1 (the row sums' total)
};
void add_sums(NormalizedSums& total, const NormalizedSums& part) {
  add_sums(total.norms, part.norms);
  total.rows_with_mass += part.rows_with_mass;
}

// One row block of F_ij = phi(s_ij) / Z_i, Z_i = sum_k phi(s_ik) (docs/THEORY.md "Expression activations"). With
// a = phi / Z and b = phi' / Z on a row, its Jacobian in the scores is b_k (delta_jk - a_j), so
//   ||J_row||^2 = sum_k b_k^2 ((1 - a_k)^2 + sum_{j != k} a_j^2),
// written as softmax's is (entry_terms.hpp) around the row's largest |a|, 1 - a_top = the others' sum:
//   sum_{k != top} b_k^2 (1 - 2 a_k) + (a_top^2 + rest_sq) sum_{k != top} b_k^2 + b_top^2 (rest_mass^2 + rest_sq);
// in W_Q (before lambda^2 ||x_i||^2) sum_j ||b_j u_j - a_j ubar_i||^2 with ubar_i = sum_k b_k u_k, in W_K the same
// with x for u and ||v_i||^2. Pass 1 forms Z_i, ubar_i and xbar_i, pass 2 (Jacobians only) the sums. When phi =
// exp(u), every phi and phi' of a row is taken relative to exp(max u), rescaled as the maximum moves (softmax's
// online pass); the ratios do not change.
NormalizedSums normalized_block(const Shared& sh, Index i0, const theory::PhiProgram& program,
                                const theory::Activation& activation, bool exponent, bool need_pass2, bool need_q,
                                bool need_k) {
  const Index n = sh.V.rows(), d = sh.U.cols(), D = sh.X.cols();
  const Index ni = std::min(sh.tile, n - i0);
  Matrix S(ni, sh.tile), G;
  if (need_q || need_k) G.resize(ni, sh.tile);
  Vector row_max = Vector::Constant(ni, exponent ? -std::numeric_limits<double>::infinity() : 0.0);
  Vector norm = Vector::Zero(ni), f_sq = Vector::Zero(ni), top_size = Vector::Constant(ni, -1.0);
  std::vector<Index> top(static_cast<std::size_t>(ni), 0);
  Matrix u_bar = Matrix::Zero(ni, need_q ? d : 0), x_bar = Matrix::Zero(ni, need_k ? D : 0);
  ExpressionRow row = ExpressionRow::of(program, activation);
  // An exponent program's u and u' in row.f, row.g become phi and phi' relative to exp(m).
  const auto to_weights = [&](Index nj, double m) {
    if (!exponent) return;
    for (Index j = 0; j < nj; ++j) {
      const double e = std::exp(row.f[static_cast<std::size_t>(j)] - m);
      row.g[static_cast<std::size_t>(j)] *= e;
      row.f[static_cast<std::size_t>(j)] = e;
    }
  };
  for (Index j0 = 0; j0 < n; j0 += sh.tile) {
    const Index nj = std::min(sh.tile, n - j0);
    multiply_transposed(sh.V, i0, ni, sh.U, j0, nj, S);
    for (Index r = 0; r < ni; ++r) {
      row.evaluate(S.row(r).data(), nj, exponent);
      if (exponent) {
        // The top is the row's first largest u, as softmax's is its first largest score.
        const auto largest = std::max_element(row.f.begin(), row.f.begin() + nj);
        if (*largest > row_max[r]) {
          const double rescale = std::exp(row_max[r] - *largest);  // 0 on the first tile
          norm[r] *= rescale;
          f_sq[r] *= rescale * rescale;
          if (need_q) u_bar.row(r) *= rescale;
          if (need_k) x_bar.row(r) *= rescale;
          row_max[r] = *largest;
          top[static_cast<std::size_t>(r)] = j0 + (largest - row.f.begin());
        }
      }
      to_weights(nj, row_max[r]);
      double l = 0, l2 = 0;
      for (Index j = 0; j < nj; ++j) {
        const double f = row.f[static_cast<std::size_t>(j)];
        l += f;
        l2 += f * f;
        if (!exponent && std::abs(f) > top_size[r]) {  // the first largest |phi|
          top_size[r] = std::abs(f);
          top[static_cast<std::size_t>(r)] = j0 + j;
        }
        if (need_q || need_k) G(r, j) = row.g[static_cast<std::size_t>(j)];
      }
      norm[r] += l;
      f_sq[r] += l2;
    }
    if (need_q) u_bar.noalias() += G.leftCols(nj) * sh.U.middleRows(j0, nj);
    if (need_k) x_bar.noalias() += G.leftCols(nj) * sh.X.middleRows(j0, nj);
  }
  NormalizedSums block;
  bool squares_overflow = false;  // sum phi^2 past the doubles: the value comes from pass 2's weights then
  for (Index r = 0; r < ni; ++r) {
    const bool finite_weights =
        (!need_q || theory::all_finite(u_bar.row(r))) && (!need_k || theory::all_finite(x_bar.row(r)));
    if (!std::isfinite(norm[r]) || !finite_weights) {
      throw InputError(fmt::format(
          "--phi '{}' --normalize rows: the sum of phi over row {} overflows; phi divided by a constant gives the "
          "same rows (divide it), and phi = exp(u) has its rows rescaled (write it so)",
          activation.expression->text(), i0 + r));
    }
    if (norm[r] != 0) block.rows_with_mass += 1;
    squares_overflow = squares_overflow || !std::isfinite(f_sq[r]);
  }
  if (!need_pass2 && !squares_overflow) {
    for (Index r = 0; r < ni; ++r) {
      if (norm[r] != 0) block.norms.value_sq += f_sq[r] / (norm[r] * norm[r]);
    }
    return block;
  }
  for (Index r = 0; r < ni; ++r) {
    if (norm[r] == 0) continue;
    if (need_q) u_bar.row(r) /= norm[r];
    if (need_k) x_bar.row(r) /= norm[r];
  }
  struct RowSums {
    double top_a = 0, top_b = 0, rest_mass = 0, rest_sq = 0, b_one_minus = 0, b_sq = 0, dq = 0, dk = 0;
  };
  std::vector<RowSums> rows(static_cast<std::size_t>(ni));
  // sum_{k != top} b_k u_k and b_k x_k: the top entry's b_t u_t - a_t ubar is b_t (1 - a_t) u_t - a_t (these), with
  // 1 - a_t the others' mass, so that a saturated row's top term is not a difference of nearly equal vectors.
  Matrix u_rest = Matrix::Zero(ni, need_q ? d : 0), x_rest = Matrix::Zero(ni, need_k ? D : 0);
  for (Index j0 = 0; j0 < n; j0 += sh.tile) {
    const Index nj = std::min(sh.tile, n - j0);
    multiply_transposed(sh.V, i0, ni, sh.U, j0, nj, S);
    for (Index r = 0; r < ni; ++r) {
      const double z = norm[r];
      if (z == 0) continue;  // a row of zeros: no term (the convention)
      row.evaluate(S.row(r).data(), nj, exponent);
      to_weights(nj, row_max[r]);
      RowSums& sums = rows[static_cast<std::size_t>(r)];
      const Index t = top[static_cast<std::size_t>(r)];
      for (Index j = 0; j < nj; ++j) {
        const double a = row.f[static_cast<std::size_t>(j)] / z, b = row.g[static_cast<std::size_t>(j)] / z;
        if (j0 + j == t) {
          sums.top_a = a;
          sums.top_b = b;
          continue;  // its dq and dk terms once the others' sums are known
        }
        sums.rest_mass += a;
        sums.rest_sq += a * a;
        sums.b_one_minus += b * b * (1 - 2 * a);
        sums.b_sq += b * b;
        if (a == 0 && b == 0) continue;
        if (need_q) u_rest.row(r) += b * sh.U.row(j0 + j);
        if (need_k) x_rest.row(r) += b * sh.X.row(j0 + j);
        if (need_q) {
          sums.dq += weighted_squared_distance(b, sh.U.row(j0 + j).data(), a, u_bar.row(r).data(), static_cast<int>(d));
        }
        if (need_k) {
          sums.dk += weighted_squared_distance(b, sh.X.row(j0 + j).data(), a, x_bar.row(r).data(), static_cast<int>(D));
        }
      }
    }
  }
  for (Index r = 0; r < ni; ++r) {
    if (norm[r] == 0) continue;
    RowSums& q = rows[static_cast<std::size_t>(r)];
    const Index t = top[static_cast<std::size_t>(r)];
    const double top_weight = q.top_b * q.rest_mass;
    if (need_q) q.dq += (top_weight * sh.U.row(t) - q.top_a * u_rest.row(r)).squaredNorm();
    if (need_k) q.dk += (top_weight * sh.X.row(t) - q.top_a * x_rest.row(r)).squaredNorm();
    const double top_sq = q.top_a * q.top_a;
    block.norms.value_sq += top_sq + q.rest_sq;
    block.norms.dS_sq +=
        q.b_one_minus + (top_sq + q.rest_sq) * q.b_sq + q.top_b * q.top_b * (q.rest_mass * q.rest_mass + q.rest_sq);
    block.norms.dQ_sq += sh.x_sq[i0 + r] * q.dq;
    block.norms.dK_sq += sh.v_sq[i0 + r] * q.dk;
  }
  if (!std::isfinite(block.norms.value_sq + block.norms.dS_sq + block.norms.dQ_sq + block.norms.dK_sq)) {
    throw InputError(fmt::format(
        "--phi '{}' --normalize rows: rows {}..{} have weights past the doubles (a row sum near 0 next to large "
        "phi); normalized rows of a phi that changes sign can do that",
        activation.expression->text(), i0, i0 + ni - 1));
  }
  return block;
}

NormalizedSums normalized_tiles(const Shared& sh, const EvaluationOptions& options, const theory::PhiProgram& program,
                                const theory::Activation& activation, bool exponent, bool need_pass2, bool need_q,
                                bool need_k) {
  return sum_row_blocks<NormalizedSums>(sh.X.rows(), sh.tile, options.threads, [&](Index i0) {
    return normalized_block(sh, i0, program, activation, exponent, need_pass2, need_q, need_k);
  });
}

// sum_ij phi(s_ij) of an elementwise map, tile by tile; block totals summed in block order. row_total(s, n) is
// sum_j phi(s[j]) over a row segment.
template <class RowTotal>
double pointwise_entry_total(const Shared& sh, const EvaluationOptions& options, const RowTotal& row_total) {
  const Index n = sh.V.rows();
  return sum_row_blocks<double>(n, sh.tile, options.threads, [&](Index i0) {
    const Index ni = std::min(sh.tile, n - i0);
    Matrix S(ni, sh.tile);
    double total = 0;
    for (Index j0 = 0; j0 < n; j0 += sh.tile) {
      const Index nj = std::min(sh.tile, n - j0);
      multiply_transposed(sh.V, i0, ni, sh.U, j0, nj, S);
      for (Index r = 0; r < ni; ++r) {
        const double row = row_total(S.row(r).data(), nj);
        if (!std::isfinite(row)) throw_nan_score(S, ni, nj, i0, j0);
        total += row;
      }
    }
    return total;
  });
}

template <int P>
NormSums<double> poly_tiles(const Shared& sh, const EvaluationOptions& options) {
  const RowReducer reduce = poly_row_reducer<P>();
  return tiled_sums(sh, options, [&](Index i0) { return pointwise_block(sh, i0, reduce); });
}

// ---- Fused score tiles of the elementwise powers x^P (P = 2..6) ---------------------------------------------
// A 12 x 16 (double) or 12 x 32 (float) block of scores lives in registers: its dot products over the d
// columns are one FMA chain per entry, and its per-entry terms are reduced there, so a score is never
// written to memory, and the panels of V and U are packed once per sample instead of once per GEMM call.
// Each row keeps 8 double lanes per sum; column c of a panel goes to lane c mod 8, columns in increasing
// order, lanes summed 0..7 at the end of the row, rows summed in row blocks of whole panels (the tile rounded
// down to a multiple of 12), blocks in order: the order is fixed by N and the tile, so it is the same for every
// thread count, and the AVX-512 kernel and the portable one do the same arithmetic in the same order.
constexpr int kPanelRows = 12;
constexpr int kLanes = 8;
template <class Real>
constexpr int panel_cols() {
  return 2 * 64 / static_cast<int>(sizeof(Real));  // two 512-bit registers
}

struct FusedWants {
  bool value = false, deriv = false, dq = false, dk = false;
};

struct alignas(64) PanelSums {
  double value[kPanelRows][kLanes], deriv[kPanelRows][kLanes], dq[kPanelRows][kLanes], dk[kPanelRows][kLanes];
};

// rows x depth of A (from row a0), k-major in panels of `width`: out[(panel * depth + k) * width + r]; rows past
// the end are zero (their scores are 0, and P >= 2 gives them no term).
template <class Real, class Source>
void pack_panels(const Source& A, Index a0, Index rows, int width, std::vector<Real>& out) {
  const Index depth = A.cols(), panels = (rows + width - 1) / width;
  out.assign(static_cast<std::size_t>(panels * depth * width), Real(0));
  for (Index r = 0; r < rows; ++r) {
    Real* dst = out.data() + (r / width) * depth * width + r % width;
    const auto* src = A.row(a0 + r).data();
    for (Index k = 0; k < depth; ++k) dst[k * width] = static_cast<Real>(src[k]);
  }
}

template <int P, class Real>
inline void add_portable_terms(Real s, double u_sq, double x_sq, const FusedWants& w, int r, int lane, PanelSums& acc) {
  const Real s_sq = s * s;
  Real s_sq_pm1 = s_sq;  // s^(2P-2)
  for (int k = 2; k < P; ++k) s_sq_pm1 *= s_sq;
  const double value = static_cast<double>(s_sq_pm1 * s_sq);
  const double deriv = static_cast<double>(Real(P * P) * s_sq_pm1);
  if (w.value) acc.value[r][lane] += value;
  if (w.deriv) acc.deriv[r][lane] += deriv;
  if (w.dq) acc.dq[r][lane] = std::fma(deriv, u_sq, acc.dq[r][lane]);
  if (w.dk) acc.dk[r][lane] = std::fma(deriv, x_sq, acc.dk[r][lane]);
}

// One row panel against column panels [q0, q1): the reference arithmetic, for CPUs without AVX-512.
template <int P, class Real>
void fused_panel_portable(const Real* vp, const Real* up, const double* u_sq, const double* x_sq, Index depth, Index q0,
                          Index q1, const FusedWants& w, PanelSums& acc) {
  constexpr int kCols = panel_cols<Real>();
  for (Index q = q0; q < q1; ++q) {
    const Real* u = up + q * depth * kCols;
    Real s[kPanelRows][kCols] = {};
    for (Index k = 0; k < depth; ++k) {
      for (int r = 0; r < kPanelRows; ++r) {
        for (int c = 0; c < kCols; ++c) s[r][c] = std::fma(vp[k * kPanelRows + r], u[k * kCols + c], s[r][c]);
      }
    }
    for (int r = 0; r < kPanelRows; ++r) {
      for (int c = 0; c < kCols; ++c) {
        add_portable_terms<P>(s[r][c], u_sq[q * kCols + c], x_sq[q * kCols + c], w, r, c % kLanes, acc);
      }
    }
  }
}

#define ATTNCHECK_AVX512 __attribute__((target("avx512f,fma")))

// Adds the terms of 8 entries (double: one group) or 16 (float: two groups of 8, converted) of row r to its lane
// accumulators: the groups in column order, as the portable kernel adds them (so the bits are the same), with
// one load and one store per accumulator.
template <int Groups>
ATTNCHECK_AVX512 inline void add_avx512_terms(const __m512d (&value)[Groups], const __m512d (&deriv)[Groups],
                                              const double* u_sq, const double* x_sq, const FusedWants& w, int r,
                                              PanelSums& acc) {
  if (w.value) {
    __m512d sum = _mm512_load_pd(acc.value[r]);
    for (int g = 0; g < Groups; ++g) sum = _mm512_add_pd(sum, value[g]);
    _mm512_store_pd(acc.value[r], sum);
  }
  if (w.deriv) {
    __m512d sum = _mm512_load_pd(acc.deriv[r]);
    for (int g = 0; g < Groups; ++g) sum = _mm512_add_pd(sum, deriv[g]);
    _mm512_store_pd(acc.deriv[r], sum);
  }
  if (w.dq) {
    __m512d sum = _mm512_load_pd(acc.dq[r]);
    for (int g = 0; g < Groups; ++g) sum = _mm512_fmadd_pd(deriv[g], _mm512_loadu_pd(u_sq + kLanes * g), sum);
    _mm512_store_pd(acc.dq[r], sum);
  }
  if (w.dk) {
    __m512d sum = _mm512_load_pd(acc.dk[r]);
    for (int g = 0; g < Groups; ++g) sum = _mm512_fmadd_pd(deriv[g], _mm512_loadu_pd(x_sq + kLanes * g), sum);
    _mm512_store_pd(acc.dk[r], sum);
  }
}

ATTNCHECK_AVX512 inline __m512d low_half(__m512 x) { return _mm512_cvtps_pd(_mm512_castps512_ps256(x)); }
ATTNCHECK_AVX512 inline __m512d high_half(__m512 x) {
  return _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)));
}

// The AVX-512 vocabulary of the fused kernel for one panel type: a register of Real, and how a register of
// per-entry terms reaches the FP64 lane accumulators (a float register holds 16 entries, two groups of 8 lanes).
template <class Real>
struct Avx512Simd;

template <>
struct Avx512Simd<double> {
  using Reg = __m512d;
  static constexpr int kWidth = 8;
  ATTNCHECK_AVX512 static Reg zero() { return _mm512_setzero_pd(); }
  ATTNCHECK_AVX512 static Reg load(const double* p) { return _mm512_loadu_pd(p); }
  ATTNCHECK_AVX512 static Reg broadcast(double x) { return _mm512_set1_pd(x); }
  ATTNCHECK_AVX512 static Reg mul(Reg a, Reg b) { return _mm512_mul_pd(a, b); }
  ATTNCHECK_AVX512 static Reg fmadd(Reg a, Reg b, Reg c) { return _mm512_fmadd_pd(a, b, c); }
  ATTNCHECK_AVX512 static void add_terms(Reg value, Reg deriv, const double* u_sq, const double* x_sq,
                                         const FusedWants& w, int r, PanelSums& acc) {
    const __m512d values[1] = {value}, derivs[1] = {deriv};
    add_avx512_terms(values, derivs, u_sq, x_sq, w, r, acc);
  }
};

template <>
struct Avx512Simd<float> {
  using Reg = __m512;
  static constexpr int kWidth = 16;
  ATTNCHECK_AVX512 static Reg zero() { return _mm512_setzero_ps(); }
  ATTNCHECK_AVX512 static Reg load(const float* p) { return _mm512_loadu_ps(p); }
  ATTNCHECK_AVX512 static Reg broadcast(float x) { return _mm512_set1_ps(x); }
  ATTNCHECK_AVX512 static Reg mul(Reg a, Reg b) { return _mm512_mul_ps(a, b); }
  ATTNCHECK_AVX512 static Reg fmadd(Reg a, Reg b, Reg c) { return _mm512_fmadd_ps(a, b, c); }
  ATTNCHECK_AVX512 static void add_terms(Reg value, Reg deriv, const double* u_sq, const double* x_sq,
                                         const FusedWants& w, int r, PanelSums& acc) {
    const __m512d values[2] = {low_half(value), high_half(value)}, derivs[2] = {low_half(deriv), high_half(deriv)};
    add_avx512_terms(values, derivs, u_sq, x_sq, w, r, acc);
  }
};

// s^(2P) and P^2 s^(2P-2), in Real.
template <int P, class Real>
ATTNCHECK_AVX512 inline void powers(typename Avx512Simd<Real>::Reg s, typename Avx512Simd<Real>::Reg& value,
                                    typename Avx512Simd<Real>::Reg& deriv) {
  using Simd = Avx512Simd<Real>;
  const typename Simd::Reg s_sq = Simd::mul(s, s);
  typename Simd::Reg s_sq_pm1 = s_sq;
  for (int k = 2; k < P; ++k) s_sq_pm1 = Simd::mul(s_sq_pm1, s_sq);
  value = Simd::mul(s_sq_pm1, s_sq);
  deriv = Simd::mul(Simd::broadcast(static_cast<Real>(P * P)), s_sq_pm1);
}

// One row panel against column panels [q0, q1): 12 rows x two registers of columns.
template <int P, class Real>
ATTNCHECK_AVX512 void fused_panel_avx512(const Real* vp, const Real* up, const double* u_sq, const double* x_sq,
                                         Index depth, Index q0, Index q1, const FusedWants& w, PanelSums& acc) {
  using Simd = Avx512Simd<Real>;
  using Reg = typename Simd::Reg;
  constexpr int kWidth = Simd::kWidth;
  constexpr int kCols = panel_cols<Real>();
  static_assert(kCols == 2 * kWidth, "a panel is two registers wide");
  for (Index q = q0; q < q1; ++q) {
    const Real* u = up + q * depth * kCols;
    Reg s[kPanelRows][2];
#pragma GCC unroll 12
    for (int r = 0; r < kPanelRows; ++r) s[r][0] = s[r][1] = Simd::zero();
    for (Index k = 0; k < depth; ++k) {
      const Reg b0 = Simd::load(u + k * kCols), b1 = Simd::load(u + k * kCols + kWidth);
#pragma GCC unroll 12
      for (int r = 0; r < kPanelRows; ++r) {
        const Reg a = Simd::broadcast(vp[k * kPanelRows + r]);
        s[r][0] = Simd::fmadd(a, b0, s[r][0]);
        s[r][1] = Simd::fmadd(a, b1, s[r][1]);
      }
    }
    const double* uq = u_sq + q * kCols;
    const double* xq = x_sq + q * kCols;
#pragma GCC unroll 12
    for (int r = 0; r < kPanelRows; ++r) {
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        Reg value, deriv;
        powers<P, Real>(s[r][h], value, deriv);
        Simd::add_terms(value, deriv, uq + kWidth * h, xq + kWidth * h, w, r, acc);
      }
    }
  }
}

// The portable kernel once more with AVX2 + FMA code generation (std::fma then is one instruction).
template <int P, class Real>
__attribute__((target("avx2,fma"))) void fused_panel_avx2(const Real* vp, const Real* up, const double* u_sq,
                                                          const double* x_sq, Index depth, Index q0, Index q1,
                                                          const FusedWants& w, PanelSums& acc) {
  fused_panel_portable<P>(vp, up, u_sq, x_sq, depth, q0, q1, w, acc);
}

enum class FusedIsa { avx512, avx2, portable };

FusedIsa fused_isa() {
  if (streams::use_avx512_kernels()) return FusedIsa::avx512;
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return avx2 ? FusedIsa::avx2 : FusedIsa::portable;
}

// A row block of `tile` rows through the fused kernel; U is packed once for the whole sample.
// V is sh.V, or its FP32 copy under --precision mixed.
template <int P, class Real, class Source>
NormSums<double> fused_block(const Shared& sh, const Source& V, const std::vector<Real>& u_packed,
                             const std::vector<double>& u_sq, const std::vector<double>& x_sq, const FusedWants& w,
                             FusedIsa isa, Index i0) {
  constexpr int kCols = panel_cols<Real>();
  const Index n = V.rows(), depth = V.cols();
  const Index ni = std::min(sh.tile, n - i0);
  const Index col_panels = (n + kCols - 1) / kCols;
  // Column chunks of ~128 KiB of packed U stay in L2 while every row panel of the block passes over them.
  const Index chunk = std::max<Index>(1, (128 * 1024) / static_cast<Index>(depth * kCols * sizeof(Real)));
  thread_local std::vector<Real> v_packed;  // kept from block to block, as SampleScratch
  pack_panels(V, i0, ni, kPanelRows, v_packed);
  const Index row_panels = (ni + kPanelRows - 1) / kPanelRows;
  thread_local std::vector<PanelSums> acc;
  acc.assign(static_cast<std::size_t>(row_panels), PanelSums{});
  for (Index q0 = 0; q0 < col_panels; q0 += chunk) {
    const Index q1 = std::min(col_panels, q0 + chunk);
    for (Index rp = 0; rp < row_panels; ++rp) {
      const Real* vp = v_packed.data() + rp * depth * kPanelRows;
      PanelSums& a = acc[static_cast<std::size_t>(rp)];
      switch (isa) {
        case FusedIsa::avx512:
          fused_panel_avx512<P>(vp, u_packed.data(), u_sq.data(), x_sq.data(), depth, q0, q1, w, a);
          break;
        case FusedIsa::avx2:
          fused_panel_avx2<P>(vp, u_packed.data(), u_sq.data(), x_sq.data(), depth, q0, q1, w, a);
          break;
        case FusedIsa::portable:
          fused_panel_portable<P>(vp, u_packed.data(), u_sq.data(), x_sq.data(), depth, q0, q1, w, a);
          break;
      }
    }
  }
  NormSums<double> block;
  for (Index r = 0; r < ni; ++r) {
    const PanelSums& a = acc[static_cast<std::size_t>(r / kPanelRows)];
    const int pr = static_cast<int>(r % kPanelRows);
    PointwiseRowSums<double> row;
    for (int l = 0; l < kLanes; ++l) {
      row.value_sq += a.value[pr][l];
      row.deriv_sq += a.deriv[pr][l];
      row.dq_inner += a.dq[pr][l];
      row.dk_inner += a.dk[pr][l];
    }
    finish_pointwise_row(block, row, sh.x_sq[i0 + r], sh.v_sq[i0 + r]);
  }
  return block;
}

// V and U: sh.V and sh.U, or their FP32 copies under --precision mixed.
template <int P, class Real, class Source>
NormSums<double> fused_poly_tiles(const Shared& sh, const Source& V, const Source& U, const EvaluationOptions& options,
                                  const FusedWants& w) {
  constexpr int kCols = panel_cols<Real>();
  const Index n = V.rows();
  // Kept from sample to sample, as SampleScratch; named by reference so that the row blocks' threads read this
  // thread's copies (a lambda does not capture a thread_local).
  thread_local std::vector<Real> kept_u_packed;
  thread_local std::vector<double> kept_u_sq, kept_x_sq;
  std::vector<Real>& u_packed = kept_u_packed;
  std::vector<double>& u_sq = kept_u_sq;
  std::vector<double>& x_sq = kept_x_sq;
  pack_panels(U, 0, n, kCols, u_packed);
  const std::size_t padded = static_cast<std::size_t>((n + kCols - 1) / kCols * kCols);
  u_sq.assign(padded, 0.0);
  x_sq.assign(padded, 0.0);
  std::copy(sh.u_sq.data(), sh.u_sq.data() + n, u_sq.begin());
  std::copy(sh.x_sq.data(), sh.x_sq.data() + n, x_sq.begin());
  const FusedIsa isa = fused_isa();
  // Row blocks of whole 12-row panels: a block of 256 rows would end in a panel of 4 rows padded to 12, about 3%
  // of the kernel's work spent on zeros at N = 1024; with 252 only the sample's last panel is partial.
  const Shared panel_blocks{
      sh.X, sh.V, sh.U, sh.x_sq, sh.u_sq, sh.v_sq, std::max<Index>(kPanelRows, sh.tile / kPanelRows * kPanelRows)};
  return tiled_sums(panel_blocks, options,
                    [&](Index i0) { return fused_block<P>(panel_blocks, V, u_packed, u_sq, x_sq, w, isa, i0); });
}

template <int P>
NormSums<double> fused_or_blas_poly_tiles(const Shared& sh, const EvaluationOptions& options, const FusedWants& w) {
  const auto finite = [](const NormSums<double>& t) { return std::isfinite(t.value_sq + t.dS_sq + t.dQ_sq + t.dK_sq); };
  if (options.precision == ScorePrecision::mixed) {
    const NormSums<double> total = fused_poly_tiles<P, float>(sh, sh.V, sh.U, options, w);
    if (finite(total)) return total;
    (void)poly_tiles<P>(sh, options);  // names the entry when the scores overflow in FP64 as well
    throw InputError(
        fmt::format("--precision mixed: a score or its power {} overflowed FP32 (largest finite "
                    "{:g}); use --precision double",
                    2 * P, std::numeric_limits<float>::max()));
  }
  // Without AVX-512 the BLAS score tiles and the vectorized row reduction stay the faster double path.
  if (fused_isa() != FusedIsa::avx512) return poly_tiles<P>(sh, options);
  const NormSums<double> total = fused_poly_tiles<P, double>(sh, sh.V, sh.U, options, w);
  if (!finite(total)) return poly_tiles<P>(sh, options);  // throws, naming the first NaN or overflowing row
  return total;
}

// sum_k a_k^2 of each row, accumulated in FP64.
void row_squared_norms(const MatrixF& A, Vector& out) {
  out.resize(A.rows());
  for (Index r = 0; r < A.rows(); ++r) {
    const float* a = A.row(r).data();
    double sum = 0;
#pragma omp simd reduction(+ : sum)
    for (Index k = 0; k < A.cols(); ++k) sum += static_cast<double>(a[k]) * static_cast<double>(a[k]);
    out[r] = sum;
  }
}

// --precision mixed on x^p, p = 2..6, when only norms are asked: the projections in FP32 as well (X, Q, K
// rounded, then SGEMM), since with the draws they were the part of a sample that FP32 scores left as it was.
// docs/THEORY.md "Mixed precision" bounds the error. Empty when a score or a power overflowed FP32: the FP64
// projections then name the entry or refuse the point, as without this step.
std::optional<NormSums<double>> fp32_projected_powers(const Matrix& X, const Matrix& Q, const Matrix& K, double lambda,
                                                      int p, const EvaluationOptions& options, const FusedWants& w) {
  SampleScratch& scratch = thread_scratch();
  scratch.X_fp32 = X.cast<float>();
  scratch.Q_fp32 = Q.cast<float>();
  scratch.K_fp32 = K.cast<float>();
  product_into(scratch.X_fp32, false, scratch.K_fp32, scratch.U_fp32);
  product_into(scratch.X_fp32, false, scratch.Q_fp32, scratch.V_fp32);
  scratch.x_sq = X.rowwise().squaredNorm();
  row_squared_norms(scratch.U_fp32, scratch.u_sq);
  row_squared_norms(scratch.V_fp32, scratch.v_sq);  // of X Q, before lambda, as everywhere
  scratch.V_fp32 *= static_cast<float>(lambda);
  // The fused kernel reads V and U from the FP32 copies; the FP64 ones are not formed.
  const Matrix not_formed;
  const Index tile = std::min(options.tile, X.rows());
  const Shared sh{X, not_formed, not_formed, scratch.x_sq, scratch.u_sq, scratch.v_sq, tile};
  const MatrixF& V = scratch.V_fp32;
  const MatrixF& U = scratch.U_fp32;
  NormSums<double> total;
  switch (p) {
    case 2: total = fused_poly_tiles<2, float>(sh, V, U, options, w); break;
    case 3: total = fused_poly_tiles<3, float>(sh, V, U, options, w); break;
    case 4: total = fused_poly_tiles<4, float>(sh, V, U, options, w); break;
    case 5: total = fused_poly_tiles<5, float>(sh, V, U, options, w); break;
    case 6: total = fused_poly_tiles<6, float>(sh, V, U, options, w); break;
    default: throw std::logic_error(fmt::format("fp32_projected_powers: p = {} has no fused kernel", p));
  }
  if (!std::isfinite(total.value_sq + total.dS_sq + total.dQ_sq + total.dK_sq)) return std::nullopt;
  return total;
}

NormSums<double> pointwise_tiles(const Shared& sh, const EvaluationOptions& options, Pointwise h, int p,
                                 const FusedWants& w) {
  if (h == Pointwise::poly) {
    switch (p) {
      case 2: return fused_or_blas_poly_tiles<2>(sh, options, w);
      case 3: return fused_or_blas_poly_tiles<3>(sh, options, w);
      case 4: return fused_or_blas_poly_tiles<4>(sh, options, w);
      case 5: return fused_or_blas_poly_tiles<5>(sh, options, w);
      case 6: return fused_or_blas_poly_tiles<6>(sh, options, w);
      default: break;
    }
  }
  const auto terms = [h, p](double s) { return pointwise_entry_terms(h, p, s); };
  const auto reduce = [&terms](const double* s, const double* u_sq, const double* x_sq, Index n, double* sums) {
    reduce_row(terms, s, u_sq, x_sq, n, sums);
  };
  return tiled_sums(sh, options, [&](Index i0) { return pointwise_block(sh, i0, reduce); });
}

double matrix_power_fro_sq(const Matrix& V, const Matrix& U, double inner, int p) {
  const Matrix cross = product(U, true, V);  // d x d
  Matrix M = Matrix::Identity(V.cols(), V.cols()) * std::pow(inner, p);
  for (int k = 1; k < p; ++k) M = M * cross;
  const Matrix gram_v = product(V, true, V), gram_u = product(U, true, U);
  return (M.transpose() * gram_v * M).cwiseProduct(gram_u).sum();
}

}  // namespace

void layer_normalize_rows(Matrix& rows) {
  const double width = static_cast<double>(rows.cols());
  for (Index r = 0; r < rows.rows(); ++r) {
    auto row = rows.row(r);
    row.array() -= row.mean();
    const double root_mean_square = std::sqrt(row.squaredNorm() / width);
    if (!(root_mean_square > 0)) throw InputError(fmt::format("qk-layernorm: row {} has no spread to normalize", r));
    row /= root_mean_square;
  }
}

double pair_sample_mean_square(const SweepPoint& point, std::uint64_t k) {
  PhiloxStream stream(point.seed, k);
  Matrix keys(point.N, point.d), queries(point.N, point.d);
  stream.fill_normal(keys.data(), keys.data() + keys.size(), 1.0);
  if (point.scores == theory::ScoreModel::sign_coupled_pairs) {
    for (Index e = 0; e < queries.size(); ++e) {
      const auto w = stream.next_block();
      const double uniform = box_muller_uniforms(w[0], w[1], w[2], w[3]).u;
      queries.data()[e] = uniform < 0.5 ? keys.data()[e] : -keys.data()[e];
    }
  } else {
    stream.fill_normal(queries.data(), queries.data() + queries.size(), 1.0);
  }
  return queries.cwiseProduct(keys).rowwise().sum().squaredNorm() / static_cast<double>(point.N);
}

void draw_sample(const SweepPoint& point, std::uint64_t k, SampleInputs& out) {
  PhiloxStream stream(point.seed, k);
  out.X.resize(point.N, point.D);
  out.Q.resize(point.D, point.d);
  out.K.resize(point.D, point.d);
  stream.fill_normal(out.X.data(), out.X.data() + out.X.size(), point.sigma_x);
  stream.fill_normal(out.Q.data(), out.Q.data() + out.Q.size(), point.sigma_t);
  stream.fill_normal(out.K.data(), out.K.data() + out.K.size(), point.sigma_t);
  if (point.mix) {
    out.W_V.resize(point.D, point.dv);
    stream.fill_normal(out.W_V.data(), out.W_V.data() + out.W_V.size(), point.sigma_t);
  }
}

SampleValues evaluate_cross_norm(const SweepPoint& point, const SampleInputs& in,
                                 const std::vector<Estimand>& estimands) {
  const EstimandRequest request = check_request(point, estimands);
  use_single_threaded_gemm();
  const Matrix U = product(in.X, false, in.K);
  const Matrix V = point.map.inner * product(in.X, false, in.Q);
  const Matrix attention = theory::row_softmax(V * U.transpose());
  const Matrix values = product(in.X, false, in.W_V);
  const theory::CrossNormNorms norms = theory::cross_norm_norms(attention, values, *point.mix);
  SampleTotals totals;
  totals.entries.value_sq = norms.output_fro * norms.output_fro;
  totals.entries.dS_sq = norms.grad_scores_fro * norms.grad_scores_fro;
  totals.values_grad_sq = norms.grad_values_fro * norms.grad_values_fro;
  if (request.dQ) {
    // lambda stays out of the key rows here: sample_values applies it, as for every other map.
    totals.entries.dQ_sq = theory::cross_norm_projection_grad_sq(attention, theory::mixed_values(values, *point.mix),
                                                                 in.X.rowwise().squaredNorm(), U);
  }
  return sample_values(request, point.map, point.N, totals);
}

double gram_frobenius_sq(const Matrix& V, const Matrix& U, double inner) {
  const Matrix gram_v = product(V, true, V), gram_u = product(U, true, U);
  return inner * inner * gram_v.cwiseProduct(gram_u).sum();
}

SampleValues evaluate_inputs(const theory::AttentionMap& map, const Matrix& X, const Matrix& Q, const Matrix& K,
                             const std::vector<Estimand>& estimands, const EvaluationOptions& options) {
  const Index n = X.rows();
  if (n == 0 || Q.rows() != X.cols() || K.rows() != X.cols() || Q.cols() != K.cols() || Q.cols() == 0) {
    throw InputError(fmt::format("shapes do not chain: X is {}x{}, Q is {}x{}, K is {}x{}", X.rows(), X.cols(),
                                 Q.rows(), Q.cols(), K.rows(), K.cols()));
  }
  if (options.tile < 1) throw InputError(fmt::format("tile size {} must be >= 1", options.tile));
  if (options.scores != theory::ScoreModel::projected && options.scores != theory::ScoreModel::projected_layernorm) {
    throw InputError(fmt::format("scores {}: pairs are drawn by the backend, not formed from X, Q, K",
                                 theory::term_of(options.scores).word));
  }
  const EstimandRequest request = check_request(map, options.scores, n, Q.cols(), estimands);
  use_single_threaded_gemm();
  const double lambda = map.inner;
  const theory::Activation& act = map.activation;
  if (act.kind == ActivationKind::expression && !act.normalize_rows) {
    if (const auto monomial = act.expression->monomial(static_cast<double>(n), static_cast<double>(Q.cols()))) {
      // c x^k is the built-in x^k times c: its kernels (the fused one included, in FP64 as the expression asks)
      // give the same sums faster than a program over score tiles.
      theory::AttentionMap builtin = map;
      builtin.activation = {ActivationKind::pointwise, Pointwise::poly, monomial->power};
      EvaluationOptions fp64 = options;
      fp64.precision = ScorePrecision::fp64;
      SampleValues values = evaluate_inputs(builtin, X, Q, K, estimands, fp64);
      for (const Estimand e : estimands) {
        if (e == Estimand::score_var) continue;  // of the scores, not of phi
        const bool signed_sum = e == Estimand::row_sum || e == Estimand::row_mean;
        values[static_cast<int>(e)] *= signed_sum ? monomial->coefficient : std::abs(monomial->coefficient);
      }
      return values;
    }
  }
  if (options.precision == ScorePrecision::mixed && request.any_norm() && !request.layernorm && !request.linear &&
      !request.matpow && !request.score_var && !request.any_row_sum() && act.kind == ActivationKind::pointwise &&
      act.h == Pointwise::poly && act.p >= 2 && act.p <= 6) {
    const FusedWants wants{request.value, request.dS, request.dQ, request.dK};
    if (const auto entries = fp32_projected_powers(X, Q, K, lambda, act.p, options, wants)) {
      SampleTotals totals;
      totals.entries = *entries;
      return sample_values(request, map, n, totals);
    }
  }
  SampleScratch& scratch = thread_scratch();
  Matrix& U = scratch.U;
  Matrix& Vraw = scratch.Vraw;
  product_into(X, false, K, U);
  product_into(X, false, Q, Vraw);
  if (request.layernorm) {
    layer_normalize_rows(Vraw);
    layer_normalize_rows(U);
  }
  SampleTotals totals;
  if (request.score_var || (request.linear && request.value)) totals.gram_dot = gram_frobenius_sq(Vraw, U, 1.0);
  if (request.score_var) totals.diagonal_sq = Vraw.cwiseProduct(U).rowwise().sum().squaredNorm();
  // The rows' squared norms of X, U and the unscaled V, kept in the thread's scratch.
  const auto row_norms = [&] {
    scratch.x_sq = X.rowwise().squaredNorm();
    scratch.u_sq = U.rowwise().squaredNorm();
    scratch.v_sq = Vraw.rowwise().squaredNorm();
  };
  if (act.kind == ActivationKind::expression) {
    // N and d as the expression reads them: this sample's rows and head dimension.
    const double n_value = static_cast<double>(n), d_value = static_cast<double>(Q.cols());
    const std::optional<theory::PhiProgram> exponent =
        act.normalize_rows ? act.expression->compile_exponent(n_value, d_value) : std::nullopt;
    const theory::PhiProgram program = exponent ? *exponent : act.expression->compile(n_value, d_value);
    row_norms();
    scratch.V = lambda * Vraw;
    const Shared sh{X, scratch.V, U, scratch.x_sq, scratch.u_sq, scratch.v_sq, std::min(options.tile, n)};
    if (act.normalize_rows) {
      const NormalizedSums sums = normalized_tiles(sh, options, program, act, exponent.has_value(),
                                                   request.dS || request.dQ || request.dK, request.dQ, request.dK);
      totals.entries = sums.norms;
      totals.entry_total = sums.rows_with_mass;
      return sample_values(request, map, n, totals);
    }
    if (request.any_row_sum()) {
      totals.entry_total = pointwise_entry_total(sh, options, [&](const double* s, Index count) {
        ExpressionRow row = ExpressionRow::of(program, act);
        row.evaluate(s, count);
        double total = 0;
        for (Index j = 0; j < count; ++j) total += row.f[static_cast<std::size_t>(j)];
        return total;
      });
    }
    if (request.any_norm()) totals.entries = expression_tiles(sh, options, program, act);
    return sample_values(request, map, n, totals);
  }
  if (request.any_row_sum()) {
    if (request.softmax) {
      totals.entry_total = static_cast<double>(n);  // every row of probabilities sums to 1
    } else if (request.linear) {
      totals.entry_total = lambda * Vraw.colwise().sum().dot(U.colwise().sum());
    } else {
      const Matrix V = lambda * Vraw;
      const Vector none = Vector::Zero(n);
      totals.entry_total =
          pointwise_entry_total({X, V, U, none, none, none, options.tile}, options, [&](const double* s, Index count) {
            double row = 0;
            for (Index j = 0; j < count; ++j) row += theory::pointwise_value(act.h, act.p, s[j]);
            return row;
          });
    }
  }
  if (request.any_norm() && request.matpow) {
    totals.matpow_sq = matrix_power_fro_sq(Vraw, U, 1.0, act.p);
  } else if (request.any_norm()) {
    row_norms();
    const Vector& x_sq = scratch.x_sq;
    const Vector& u_sq = scratch.u_sq;
    const Vector& v_sq = scratch.v_sq;
    if (request.linear) {
      totals.x_sq = x_sq.sum();
      totals.u_sq = u_sq.sum();
      totals.v_sq = v_sq.sum();
    } else {
      Matrix& V = scratch.V;
      V = lambda * Vraw;
      // A tile wider than N would only allocate columns no score fills.
      const Shared sh{X, V, U, x_sq, u_sq, v_sq, std::min(options.tile, n)};
      const bool jacobians = request.dS || request.dQ || request.dK;
      totals.entries =
          request.softmax
              ? tiled_sums(sh, options,
                           [&](Index i0) { return softmax_block(sh, i0, jacobians, request.dQ, request.dK); })
              : pointwise_tiles(sh, options, act.h, act.p,
                                FusedWants{request.value, request.dS, request.dQ, request.dK});
    }
  }
  return sample_values(request, map, n, totals);
}

const char* precision_name(ScorePrecision precision) { return precision == ScorePrecision::mixed ? "mixed" : "double"; }

bool uses_fp32_scores(const SweepPoint& point, const std::vector<Estimand>& estimands) {
  if (point.mix) return false;
  const EstimandRequest request = check_request(point, estimands);
  const theory::Activation& act = point.map.activation;
  return request.any_norm() && !request.linear && act.kind == ActivationKind::pointwise && act.h == Pointwise::poly &&
         act.p >= 2 && act.p <= 6;
}

double mixed_precision_relative_bound(int p, Index d, Index D) {
  const double unit = std::ldexp(1.0, -24);
  const double dd = static_cast<double>(d), DD = static_cast<double>(D);
  const double projection = 2 * std::sqrt(DD) * (DD + 4);
  return 2.0 * p * (dd + projection) * unit * std::sqrt(dd) + (projection + p + 1) * unit;
}

CpuBackend::CpuBackend(int threads, Index tile, EvaluationPath path, ScorePrecision precision)
    : threads_(streams::thread_count(threads)), tile_(tile), precision_(precision), path_(path) {
  if (tile < 1) throw InputError(fmt::format("tile size {} must be >= 1", tile));
  use_single_threaded_gemm();
}

std::string CpuBackend::describe() const {
  return fmt::format("cpu: {} OpenMP thread{}, score tiles of {} x {}", threads_, threads_ == 1 ? "" : "s", tile_,
                     tile_);
}

std::uint64_t CpuBackend::host_bytes_needed(const SweepPoint& point) const {
  using records::saturating_product;
  using records::saturating_sum;
  const auto u = [](Index v) { return static_cast<std::uint64_t>(std::max<Index>(v, 0)); };
  const std::uint64_t n = u(point.N), D = u(point.D), d = u(point.d), tile = u(std::min(tile_, point.N));
  if (point.mix) {
    // C9 holds the dense scores and attention, and about ten N x dv matrices (V, P, P_mix, O, A P, the
    // projection derivative's rows), besides X, the weights and the projections.
    const std::uint64_t dv = u(point.dv);
    const std::uint64_t sample =
        saturating_sum({saturating_product({3, n, n}), saturating_product({10, n, dv}), saturating_product({n, D}),
                        saturating_product({3, D, d}), saturating_product({D, dv}), saturating_product({3, n, d}),
                        saturating_product({d, dv})});
    return saturating_product({sizeof(double), static_cast<std::uint64_t>(threads_), sample});
  }
  // X; Q and K; V, U and lambda V; three row norms; the d x d products of the Gram and matrix-power paths;
  // under --precision mixed also the FP32 copies of X, V and U (half a double each).
  const std::uint64_t fp32 = precision_ == ScorePrecision::mixed
                                 ? saturating_sum({saturating_product({n, D}), saturating_product({2, n, d})}) / 2
                                 : 0;
  const std::uint64_t sample =
      saturating_sum({saturating_product({n, D}), saturating_product({2, D, d}), saturating_product({3, n, d}),
                      saturating_product({3, n}), saturating_product({6, d, d}), fp32});
  // A row block: the score tile and softmax's exponentials, its u_bar and x_bar rows, per-row sums.
  const std::uint64_t block = saturating_sum({saturating_product({2, tile, tile}), saturating_product({tile, d}),
                                              saturating_product({tile, D}), saturating_product({8, tile})});
  return saturating_product({sizeof(double), static_cast<std::uint64_t>(threads_), saturating_sum({sample, block})});
}

std::uint64_t CpuBackend::host_bytes_needed(const SweepPoint& point, const std::vector<Estimand>& estimands) const {
  if (path_for(point, estimands) != EvaluationPath::tensor) return host_bytes_needed(point);
  return records::saturating_product({static_cast<std::uint64_t>(threads_), tensor_path_bytes(point, estimands)});
}

void CpuBackend::evaluate(const SweepPoint& point, const std::vector<Estimand>& estimands, std::uint64_t first,
                          std::uint64_t count, std::vector<SampleValues>& out) {
  const std::size_t base = out.size();
  out.resize(base + count);
  if (count == 0) return;
  const EstimandRequest request = check_request(point, estimands);
  if (request.cross_norm) {
    parallel_for(static_cast<Index>(count), threads_, [&](Index k) {
      SampleInputs in;
      draw_sample(point, first + static_cast<std::uint64_t>(k), in);
      out[base + static_cast<std::size_t>(k)] = evaluate_cross_norm(point, in, estimands);
    });
    return;
  }
  if (request.pairs) {
    parallel_for(static_cast<Index>(count), threads_, [&](Index k) {
      SampleTotals totals;
      totals.pairs_sq_mean = pair_sample_mean_square(point, first + static_cast<std::uint64_t>(k));
      out[base + static_cast<std::size_t>(k)] = sample_values(request, point.map, point.N, totals);
    });
    return;
  }
  if (path_for(point, estimands) == EvaluationPath::tensor) {
    if (count >= static_cast<std::uint64_t>(threads_)) {
      parallel_for(static_cast<Index>(count), threads_, [&](Index k) {
        out[base + static_cast<std::size_t>(k)] =
            evaluate_tensor_sample(point, estimands, first + static_cast<std::uint64_t>(k), 1);
      });
    } else {
      for (std::uint64_t k = 0; k < count; ++k)
        out[base + k] = evaluate_tensor_sample(point, estimands, first + k, threads_);
    }
    return;
  }
  if (count >= static_cast<std::uint64_t>(threads_)) {
    const EvaluationOptions serial{tile_, 1, point.scores, precision_};
    parallel_for(static_cast<Index>(count), threads_, [&](Index k) {
      thread_local SampleInputs in;  // kept from sample to sample, as SampleScratch
      draw_sample(point, first + static_cast<std::uint64_t>(k), in);
      out[base + static_cast<std::size_t>(k)] = evaluate_inputs(point.map, in.X, in.Q, in.K, estimands, serial);
    });
    return;
  }
  const EvaluationOptions parallel{tile_, threads_, point.scores, precision_};
  SampleInputs in;
  for (std::uint64_t k = 0; k < count; ++k) {
    draw_sample(point, first + k, in);
    out[base + k] = evaluate_inputs(point.map, in.X, in.Q, in.K, estimands, parallel);
  }
}

namespace {

// In this file because every program that runs a sweep links CpuBackend (the default of run_mc), so the
// registration is never dropped with an unreferenced object file.
const bool registered = register_backend(
    {"cpu", "the CPU: samples (or a sample's row blocks) over OpenMP threads, score tiles by GEMM", 0,
     [] { return std::string(); },
     [](const BackendRequest& request) {
       return std::make_unique<CpuBackend>(request.threads, request.tile, request.path, request.precision);
     }});

}  // namespace

}  // namespace attncheck::monte_carlo
