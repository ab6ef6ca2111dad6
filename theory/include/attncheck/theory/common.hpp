#pragma once
// Types and conventions shared by every exact routine.

#include <Eigen/Dense>

#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>

#include "attncheck/theory/host_device.hpp"

namespace attncheck::theory {

// Row-major so that a row of logits is contiguous, the unit every softmax routine works on.
using Matrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Vector = Eigen::VectorXd;
using Index = Eigen::Index;

// Whether every entry of m is finite, in one vectorized sum: x * 0 is 0 for finite x and NaN for an infinity or a NaN.
// Eigen's allFinite() compares entry by entry and stops at the first failure, a scalar loop that cost as much as a
// float32 product's kernel on the forward pass's N x N logits.
template <class Derived>
bool all_finite(const Eigen::DenseBase<Derived>& m) {
  using Scalar = typename Derived::Scalar;
  return m.size() == 0 || !std::isnan((m.derived().array() * Scalar(0)).sum());
}

// `text` as it may reach a terminal or a log: every control character (C0, DEL and C1, which start terminal escape
// sequences; NUL, which would end the message where C strings are read) and every byte that is not part of valid
// UTF-8 written as \xNN, except newline and tab unless `one_line`. Idempotent: what it returns it returns unchanged.
std::string printable(std::string_view text, bool one_line = false);

// An error message as every error type keeps it: printable, and at most a few thousand bytes (its start and its end,
// saying how much was left out between): messages quote file names and file contents, which may be any size.
std::string message_text(std::string_view message);

// Bad input to an exact routine (NaN logit, all -inf row, shape mismatch). The message names the place; it is made
// a message_text here, once for every thrower.
class InputError : public std::invalid_argument {
 public:
  explicit InputError(const std::string& message) : std::invalid_argument(message_text(message)) {}
  explicit InputError(const char* message) : InputError(std::string(message)) {}
};

}  // namespace attncheck::theory
