#pragma once
// Types and conventions shared by every exact routine.

#include <Eigen/Dense>

#include <cstddef>
#include <stdexcept>
#include <string>

#include "attncheck/theory/host_device.hpp"

namespace attncheck::theory {

// Row-major so that a row of logits is contiguous, the unit every softmax routine works on.
using Matrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Vector = Eigen::VectorXd;
using Index = Eigen::Index;

// Bad input to an exact routine (NaN logit, all -inf row, shape mismatch). The message names the place.
class InputError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

}  // namespace attncheck::theory
