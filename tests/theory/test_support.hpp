#pragma once
// Random test matrices and a finite-difference Jacobian, shared by the theory tests.

#include "attncheck/streams/random_stream.hpp"
#include "attncheck/theory/common.hpp"

#include <cstdint>
#include <functional>

namespace attncheck::testing {

inline theory::Matrix random_matrix(theory::Index rows, theory::Index cols, double sd, std::uint64_t seed,
                                    std::uint64_t stream = 0) {
  theory::Matrix m(rows, cols);
  streams::PhiloxStream(seed, stream).fill_normal(m.data(), m.data() + m.size(), sd);
  return m;
}

// Central differences of vec(f(P)) in every entry of P: (size of f) x (size of P), step h relative to |P_ab|.
inline theory::Matrix finite_difference_jacobian(const std::function<theory::Matrix(const theory::Matrix&)>& f,
                                                 const theory::Matrix& at, double h = 1e-6) {
  const theory::Index outputs = f(at).size();
  theory::Matrix jacobian(outputs, at.size());
  for (theory::Index k = 0; k < at.size(); ++k) {
    theory::Matrix plus = at, minus = at;
    const double step = h * std::max(1.0, std::abs(at.data()[k]));
    plus.data()[k] += step;
    minus.data()[k] -= step;
    const theory::Matrix difference = (f(plus) - f(minus)) / (2 * step);
    jacobian.col(k) = Eigen::Map<const Eigen::VectorXd>(difference.data(), outputs);
  }
  return jacobian;
}

inline double relative_difference(double a, double b) {
  const double scale = std::max(std::abs(a), std::abs(b));
  return scale == 0 ? 0 : std::abs(a - b) / scale;
}

}  // namespace attncheck::testing
