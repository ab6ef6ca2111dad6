#pragma once
// Runs a scope on one Box-Muller path and restores the process's path afterwards, so that a failing check
// does not leave later tests on the forced path.
#include "attncheck/streams/random_stream.hpp"

struct NormalMathGuard {
  explicit NormalMathGuard(attncheck::streams::NormalMath math) { attncheck::streams::set_normal_math(math); }
  ~NormalMathGuard() { attncheck::streams::set_normal_math(saved); }
  NormalMathGuard(const NormalMathGuard&) = delete;
  NormalMathGuard& operator=(const NormalMathGuard&) = delete;
  attncheck::streams::NormalMath saved = attncheck::streams::normal_math();
};
