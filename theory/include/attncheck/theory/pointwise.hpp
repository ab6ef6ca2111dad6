#pragma once
// Elementwise activations h and their derivatives: one definition for the CPU and for CUDA kernels.
// Header-only and free of Eigen so that nvcc compiles it as device code.

#include "attncheck/theory/host_device.hpp"

#include <cmath>

namespace attncheck::theory {

// The h of the relu paper (Sec. 3) plus the polynomial x^p of the polynomial-activation paper.
enum class Pointwise : int { identity = 0, poly, relu, relu2, gelu, softplus, relu6, sigmoid };

template <class Real>
ATTNCHECK_HD inline Real integer_power(Real x, int p) {
  Real result = 1;
  for (int k = 0; k < p; ++k) result *= x;
  return result;
}

// GELU in its exact form x * Phi(x); Phi via erfc so that the derivative below is exact too, and so that the left
// tail keeps its digits (1 + erf(x) cancels: 1e-5 relative at x = -7, 0 below -8.3).
template <class Real>
ATTNCHECK_HD inline Real standard_normal_cdf(Real x) {
  return Real(0.5) * erfc(-x * Real(0.70710678118654752440));
}
template <class Real>
ATTNCHECK_HD inline Real standard_normal_pdf(Real x) {
  return Real(0.39894228040143267794) * exp(Real(-0.5) * x * x);
}

// log(1 + e^x) without overflow for large x and without losing digits for very negative x.
template <class Real>
ATTNCHECK_HD inline Real softplus(Real x) {
  return x > Real(0) ? x + log1p(exp(-x)) : log1p(exp(x));
}
template <class Real>
ATTNCHECK_HD inline Real logistic(Real x) {
  if (x >= Real(0)) return Real(1) / (Real(1) + exp(-x));
  const Real e = exp(x);
  return e / (Real(1) + e);
}

template <class Real>
ATTNCHECK_HD inline Real pointwise_value(Pointwise h, int p, Real x) {
  switch (h) {
    case Pointwise::identity: return x;
    case Pointwise::poly: return integer_power(x, p);
    case Pointwise::relu: return x > Real(0) ? x : Real(0);
    case Pointwise::relu2: return x > Real(0) ? x * x : Real(0);
    case Pointwise::gelu: return x * standard_normal_cdf(x);
    case Pointwise::softplus: return softplus(x);
    case Pointwise::relu6: return x <= Real(0) ? Real(0) : (x >= Real(6) ? Real(6) : x);
    case Pointwise::sigmoid: return logistic(x);
  }
  return Real(0);
}

// Derivative h'(x). At the kinks of relu and relu6 the right derivative at 0 is 0 and at 6 is 0, the
// convention of the deep-learning frameworks (a set of measure zero under the Gaussian model).
template <class Real>
ATTNCHECK_HD inline Real pointwise_derivative(Pointwise h, int p, Real x) {
  switch (h) {
    case Pointwise::identity: return Real(1);
    case Pointwise::poly: return p == 0 ? Real(0) : Real(p) * integer_power(x, p - 1);
    case Pointwise::relu: return x > Real(0) ? Real(1) : Real(0);
    case Pointwise::relu2: return x > Real(0) ? Real(2) * x : Real(0);
    case Pointwise::gelu: return standard_normal_cdf(x) + x * standard_normal_pdf(x);
    case Pointwise::softplus: return logistic(x);
    case Pointwise::relu6: return (x > Real(0) && x < Real(6)) ? Real(1) : Real(0);
    case Pointwise::sigmoid: {
      const Real s = logistic(x);
      return s * (Real(1) - s);
    }
  }
  return Real(0);
}

}  // namespace attncheck::theory
