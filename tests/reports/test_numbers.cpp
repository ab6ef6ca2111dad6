#include "attncheck/reports/numbers.hpp"

#include <catch2/catch.hpp>
#include <rapidcheck/catch.h>

#include <cmath>
#include <cstdio>
#include <string>

using attncheck::reports::format_estimate;
using attncheck::reports::format_interval;
using attncheck::reports::format_number;

TEST_CASE("an estimate is printed with its standard error to two significant digits", "[numbers]") {
  CHECK(format_estimate(96.1, 0.4) == "96.10 ± 0.40");
  CHECK(format_estimate(383.2, 1.1) == "383.2 ± 1.1");
  CHECK(format_estimate(0.99078, 0.00412) == "0.9908 ± 0.0041");
  CHECK(format_estimate(15500, 300) == "15500 ± 300");
  CHECK(format_estimate(1.23456e9, 3.4e6) == "(1.2346 ± 0.0034)e+09");
  CHECK(format_estimate(2.5e-6, 1.5e-8) == "(2.500 ± 0.015)e-06");
  CHECK(format_estimate(5, 0) == "5 ± 0");
  CHECK(format_estimate(5, std::nan("")) == "5 ± ?");
}

TEST_CASE("intervals and plain numbers keep the requested significant digits", "[numbers]") {
  CHECK(format_interval(0.985, 1.007) == "[0.985, 1.007]");
  CHECK(format_number(123456789.0) == "1.235e+08");
  CHECK(format_number(0.5) == "0.5");
}

namespace {
// Reads "a ± b" or "(a ± b)eK" back into numbers.
bool parse_estimate(const std::string& text, double& estimate, double& se) {
  double a = 0, b = 0;
  int exponent = 0;
  if (std::sscanf(text.c_str(), "(%lf ± %lf)e%d", &a, &b, &exponent) == 3) {
    estimate = a * std::pow(10.0, exponent);
    se = b * std::pow(10.0, exponent);
    return true;
  }
  if (std::sscanf(text.c_str(), "%lf ± %lf", &a, &b) == 2) {
    estimate = a;
    se = b;
    return true;
  }
  return false;
}
}  // namespace

TEST_CASE("the printed estimate is within a twentieth of a standard error of the true one", "[numbers][property]") {
  rc::prop("rounding stays far below the uncertainty", [] {
    const double mantissa = *rc::gen::inRange(1, 9999) / 1000.0;
    const int exponent = *rc::gen::inRange(-8, 12);
    const double estimate = mantissa * std::pow(10.0, exponent);
    const double relative = *rc::gen::inRange(1, 5000) / 10000.0;  // SE from 0.01% to 50% of the estimate
    const double se = estimate * relative;
    double parsed_estimate = 0, parsed_se = 0;
    const std::string text = format_estimate(estimate, se);
    RC_ASSERT(parse_estimate(text, parsed_estimate, parsed_se));
    RC_ASSERT(std::fabs(parsed_estimate - estimate) <= 0.051 * se);
    RC_ASSERT(std::fabs(parsed_se - se) <= 0.051 * se);
  });
}
