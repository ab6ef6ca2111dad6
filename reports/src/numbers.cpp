#include "attncheck/reports/numbers.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace attncheck::reports {

std::string format_number(double x, int digits) {
  if (std::isnan(x)) return "NaN";
  return fmt::format("{:.{}g}", x, digits);
}

std::string format_interval(double lo, double hi, int digits) {
  if (!std::isfinite(lo) || !std::isfinite(hi)) return "-";
  return fmt::format("[{}, {}]", format_number(lo, digits), format_number(hi, digits));
}

std::string format_estimate(double estimate, double se) {
  if (!std::isfinite(estimate)) return "-";
  if (!std::isfinite(se)) return fmt::format("{} ± ?", format_number(estimate, 6));
  if (se == 0) return fmt::format("{} ± 0", format_number(estimate, 6));
  const int se_exponent = static_cast<int>(std::floor(std::log10(std::fabs(se))));
  const double magnitude = std::max(std::fabs(estimate), std::fabs(se));
  const int value_exponent = static_cast<int>(std::floor(std::log10(magnitude)));
  const int decimals = 1 - se_exponent;  // two significant digits of the SE
  if (value_exponent < 6 && value_exponent >= -3 && decimals >= 0 && decimals <= 8) {
    return fmt::format("{:.{}f} ± {:.{}f}", estimate, decimals, se, decimals);
  }
  if (value_exponent < 6 && decimals < 0) {  // SE of 100 or more on a value below 10^6: whole numbers
    const double unit = std::pow(10.0, -decimals);
    return fmt::format("{:.0f} ± {:.0f}", std::round(estimate / unit) * unit, std::round(se / unit) * unit);
  }
  // Scientific: both in units of the estimate's power of ten.
  const double scale = std::pow(10.0, value_exponent);
  const int mantissa_decimals = std::clamp(value_exponent - se_exponent + 1, 0, 15);
  return fmt::format("({:.{}f} ± {:.{}f})e{:+03d}", estimate / scale, mantissa_decimals, se / scale, mantissa_decimals,
                     value_exponent);
}

}  // namespace attncheck::reports
