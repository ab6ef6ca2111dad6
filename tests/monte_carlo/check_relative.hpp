#pragma once
// The Monte Carlo tests' comparison of a computed value with a reference.

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <string>

namespace attncheck::testing {

// |got - want| <= rel * max(scale_floor, |want|): relative, or absolute below scale_floor, for references that
// may be near 0 (scale_floor 0: purely relative).
inline void check_relative(double got, double want, double rel, const std::string& what, double scale_floor = 0) {
  INFO(what << ": got " << got << ", want " << want << ", relative tolerance " << rel);
  CHECK(std::abs(got - want) <= rel * std::max(scale_floor, std::abs(want)));
}

}  // namespace attncheck::testing
