#pragma once
// The Box-Muller paths in tests: NormalMathGuard runs a scope on one path and restores the process's path
// afterwards, so that a failing check does not leave later tests on the forced path; vector_normal_maths lists
// the vectorized paths this CPU can test.
#include "attncheck/streams/random_stream.hpp"

#include <catch2/catch.hpp>

#include <vector>

struct NormalMathGuard {
  explicit NormalMathGuard(attncheck::streams::NormalMath math) { attncheck::streams::set_normal_math(math); }
  ~NormalMathGuard() { attncheck::streams::set_normal_math(saved); }
  NormalMathGuard(const NormalMathGuard&) = delete;
  NormalMathGuard& operator=(const NormalMathGuard&) = delete;
  attncheck::streams::NormalMath saved = attncheck::streams::normal_math();
};

// The vectorized paths this CPU has, warning for each it lacks (the tests comparing it then skip it).
inline std::vector<attncheck::streams::NormalMath> vector_normal_maths() {
  using attncheck::streams::NormalMath;
  std::vector<NormalMath> paths;
  for (const NormalMath math : {NormalMath::avx2, NormalMath::avx512}) {
    if (attncheck::streams::normal_math_supported(math)) {
      paths.push_back(math);
    } else {
      WARN("no " << attncheck::streams::normal_math_name(math)
                 << " normals here (CPU or libmvec): that path is not tested");
    }
  }
  return paths;
}
