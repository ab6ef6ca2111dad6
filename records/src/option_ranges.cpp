#include "attncheck/records/option_ranges.hpp"

#include "attncheck/theory/common.hpp"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <optional>
#include <sstream>
#include <string_view>

namespace attncheck::records {

namespace {

std::string_view trimmed(std::string_view text) {
  const auto first = text.find_first_not_of(" \t");
  if (first == std::string_view::npos) return {};
  return text.substr(first, text.find_last_not_of(" \t") - first + 1);
}

// The whole text as a number of type T (an optional leading '+' allowed), or nothing.
template <class T>
std::optional<T> whole(std::string_view text) {
  text = trimmed(text);
  if (!text.empty() && text.front() == '+') text.remove_prefix(1);
  T value{};
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

std::string real_message_of(const std::string& text, RealRange range) {
  const auto value = whole<double>(text);
  const std::string wanted =
      fmt::format("a finite number {} {:g} and <= {:g}", range.above_min ? ">" : ">=", range.min, range.max);
  if (!value || !std::isfinite(*value)) return fmt::format("'{}' is not {}", text, wanted);
  if (*value < range.min || (range.above_min && *value == range.min) || *value > range.max) {
    return fmt::format("{} is out of range: give {}", text, wanted);
  }
  return {};
}

template <class T>
std::string integer_message(const std::string& text, T min, T max) {
  const auto value = whole<T>(text);
  const std::string wanted = fmt::format("a whole number from {} to {}", min, max);
  if (!value) {
    // Negative text for an unsigned range, or digits past the type: say out of range rather than "not a number".
    const auto as_real = whole<double>(text);
    if (as_real && std::isfinite(*as_real) && *as_real == std::floor(*as_real)) {
      return fmt::format("{} is out of range: give {}", text, wanted);
    }
    return fmt::format("'{}' is not {}", text, wanted);
  }
  if (*value < min || *value > max) return fmt::format("{} is out of range: give {}", text, wanted);
  return {};
}

}  // namespace

std::string real_problem(const std::string& text, RealRange range) { return real_message_of(text, range); }
std::string integer_problem(const std::string& text, std::int64_t min, std::int64_t max) {
  return integer_message(text, min, max);
}
std::string unsigned_problem(const std::string& text, std::uint64_t min, std::uint64_t max) {
  return integer_message(text, min, max);
}

double check_real(const std::string& option, double value, RealRange range) {
  const std::string problem = real_problem(fmt::format("{}", value), range);
  if (!problem.empty()) throw theory::InputError(fmt::format("{}: {}", option, problem));
  return value;
}

std::int64_t check_integer(const std::string& option, std::int64_t value, std::int64_t min, std::int64_t max) {
  const std::string problem = integer_problem(std::to_string(value), min, max);
  if (!problem.empty()) throw theory::InputError(fmt::format("{}: {}", option, problem));
  return value;
}

std::int64_t parse_integer(const std::string& text, const std::string& option, std::int64_t min, std::int64_t max) {
  const std::string problem = integer_problem(text, min, max);
  if (!problem.empty()) throw theory::InputError(fmt::format("{}: {}", option, problem));
  return *whole<std::int64_t>(text);
}

std::vector<std::int64_t> parse_integer_list(const std::string& text, const std::string& option, std::int64_t min,
                                             std::int64_t max) {
  std::vector<std::int64_t> values;
  std::istringstream parts(text);
  for (std::string part; std::getline(parts, part, ',');) values.push_back(parse_integer(part, option, min, max));
  if (values.empty() || (!text.empty() && text.back() == ',')) {
    throw theory::InputError(fmt::format("{}: '{}' is not a comma-separated list of whole numbers", option, text));
  }
  return values;
}

double parse_real(const std::string& raw, const std::string& option, const std::string& whole) {
  const std::string_view text = trimmed(raw);
  double value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc{} || end != text.data() + text.size() || !std::isfinite(value)) {
    throw theory::InputError(fmt::format("{}: '{}' in '{}' is not a number", option, raw, whole));
  }
  return value;
}

std::vector<double> parse_real_list(const std::string& text, const std::string& option) {
  std::vector<double> values;
  std::istringstream parts(text);
  for (std::string part; std::getline(parts, part, ',');) values.push_back(parse_real(part, option, text));
  // getline yields no part after a trailing comma: that missing number is refused as an empty one.
  if (!text.empty() && text.back() == ',') values.push_back(parse_real("", option, text));
  if (values.empty()) throw theory::InputError(fmt::format("{}: empty list", option));
  return values;
}

}  // namespace attncheck::records
