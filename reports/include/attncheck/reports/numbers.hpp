#pragma once
// Numbers as the reports print them: an estimate always with its standard error, digits matched to it.

#include <string>

namespace attncheck::reports {

// "12.34 ± 0.56": the standard error to two significant digits and the estimate to the same decimal place
// (scientific notation for very large or small magnitudes). A zero or non-finite SE prints the estimate alone
// with "± 0" / "± ?"; a non-finite estimate (none was computed) prints "-".
std::string format_estimate(double estimate, double se);

// A number to `digits` significant digits, e.g. 0.9876 or 1.235e+08.
std::string format_number(double x, int digits = 4);

// "[0.95, 1.01]"; "-" when an end is not finite.
std::string format_interval(double lo, double hi, int digits = 4);

}  // namespace attncheck::reports
