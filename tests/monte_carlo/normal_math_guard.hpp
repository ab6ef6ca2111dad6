#pragma once
// Runs a scope on one Box-Muller path and restores the process's path afterwards, so that a failing check
// does not leave later tests on the forced path.
#include "attncheck/monte_carlo/random_stream.hpp"

struct NormalMathGuard {
  explicit NormalMathGuard(attncheck::monte_carlo::NormalMath math) { attncheck::monte_carlo::set_normal_math(math); }
  ~NormalMathGuard() { attncheck::monte_carlo::set_normal_math(saved); }
  NormalMathGuard(const NormalMathGuard&) = delete;
  NormalMathGuard& operator=(const NormalMathGuard&) = delete;
  attncheck::monte_carlo::NormalMath saved = attncheck::monte_carlo::normal_math();
};
