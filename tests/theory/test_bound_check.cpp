// theory::within: exact comparison with a bound, allowing only rounding in forming the norm (1e-12 relative).
#include "attncheck/theory/bound_check.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

using attncheck::theory::kBoundRoundingSlack;
using attncheck::theory::within;

TEST_CASE("within accepts rounding above a bound and refuses anything larger") {
  CHECK(within(1.0, 1.0));
  CHECK(within(0.0, 0.0));
  CHECK(within(16.0 * (1 + 0.5 * kBoundRoundingSlack), 16.0));
  CHECK_FALSE(within(16.0 * (1 + 2 * kBoundRoundingSlack), 16.0));
  CHECK_FALSE(within(1e-300, 0.0));
  CHECK_FALSE(within(std::numeric_limits<double>::quiet_NaN(), 1.0));
  CHECK(within(1e300, std::numeric_limits<double>::infinity()));
}
