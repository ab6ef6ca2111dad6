#pragma once
// The ranges of numeric options and the words that refuse a value outside them, one wording for the command
// line (its validators check the text before converting it) and for callers of the library (the Python
// package passes numbers), so both name the option and the value the same way.

#include <cstdint>
#include <string>
#include <vector>

namespace attncheck::records {

// --threads of every command: far above any machine's cores; more only adds overhead.
inline constexpr int kMaxThreads = 1024;

// A closed range of finite reals; `above_min` makes the lower end open (a value must exceed it).
struct RealRange {
  double min, max;
  bool above_min = false;
};

// Empty when `text` is a finite real in `range`, else what is wrong ("-1 is out of range: give ...").
std::string real_problem(const std::string& text, RealRange range);
// Empty when `text` is a whole number in [min, max] (no fraction or exponent), else what is wrong.
std::string integer_problem(const std::string& text, std::int64_t min, std::int64_t max);
std::string unsigned_problem(const std::string& text, std::uint64_t min, std::uint64_t max);

// The checked value; theory::InputError "OPTION: problem" otherwise. Values are written as fmt writes them.
double check_real(const std::string& option, double value, RealRange range);
std::int64_t check_integer(const std::string& option, std::int64_t value, std::int64_t min, std::int64_t max);
std::int64_t parse_integer(const std::string& text, const std::string& option, std::int64_t min, std::int64_t max);
std::vector<std::int64_t> parse_integer_list(const std::string& text, const std::string& option, std::int64_t min,
                                             std::int64_t max);
// One finite real, `raw`, inside the option's text `whole` (a list or a formula); theory::InputError
// "OPTION: 'RAW' in 'WHOLE' is not a number" otherwise. Surrounding blanks are allowed, a leading '+' is not.
double parse_real(const std::string& raw, const std::string& option, const std::string& whole);
// "0.5, 1,2e-1": comma-separated finite reals, none missing.
std::vector<double> parse_real_list(const std::string& text, const std::string& option);

}  // namespace attncheck::records
