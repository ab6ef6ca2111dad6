#pragma once
// Every numeric value given on the command line is checked here, for every subcommand, before it is used:
// text that is not a number, NaN, an infinity, a fraction where a count is meant, a negative value where none
// makes sense or a value outside the option's range is a usage error (exit 2) naming the option and the value.
// CLI11 runs these validators on the text, before converting it, so "-1" never wraps to 2^64 - 1 and "1e300"
// never reaches an int.

#include "attncheck/monte_carlo/commands.hpp"
#include "attncheck/records/option_ranges.hpp"

#include <CLI/CLI.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace attncheck::cli {

using records::parse_integer;
using records::parse_integer_list;
using records::RealRange;
// parse_integer and parse_integer_list check numbers inside a text option (lists such as --p 1,2,3, or
// --samples 500 | auto) the same way; the message names the option and the value.

// A finite real in `range` (e.g. {0, 1e9, true}: positive seconds).
CLI::Validator real_in(RealRange range);
// A whole number in [min, max], written without fraction or exponent (e.g. 0 .. 2^64 - 1 for a seed).
CLI::Validator integer_in(std::int64_t min, std::int64_t max);
CLI::Validator unsigned_in(std::uint64_t min, std::uint64_t max);

// Ranges shared by several subcommands (and by the library functions the Python package calls).
inline constexpr std::int64_t kMaxThreads = records::kMaxThreads;

}  // namespace attncheck::cli
