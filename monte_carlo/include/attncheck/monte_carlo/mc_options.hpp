#pragma once
// The options of `attncheck mc`, each once: its name, its help text, its range and the McRequest field it fills.
// The command line builds its options from this list, the Python package its attncheck.mc() (names with "_" for
// "-"), and their tests check both against it, so an option added here reaches every front end.

#include "attncheck/monte_carlo/commands.hpp"
#include "attncheck/records/option_ranges.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace attncheck::monte_carlo {

struct McOption {
  std::string_view name;  // on the command line, without "--"
  std::string help;
  using Field = std::variant<std::string McRequest::*, std::optional<std::string> McRequest::*, double McRequest::*,
                             std::optional<double> McRequest::*, std::uint64_t McRequest::*, int McRequest::*,
                             long long McRequest::*, bool McRequest::*>;
  Field field;
  // The checks on the option's text (the command line runs them before converting; run_mc repeats them on values).
  std::optional<records::RealRange> real_range;
  std::optional<std::pair<std::int64_t, std::int64_t>> integer_range;
  std::optional<std::pair<std::uint64_t, std::uint64_t>> count_range;
  std::vector<std::string> choices;  // the words a text option takes, where the list is fixed

  // "max_samples" for "max-samples": the name in Python.
  std::string python_name() const;
};

// Every option of `attncheck mc`, in the order --help lists them.
const std::vector<McOption>& mc_options();

}  // namespace attncheck::monte_carlo
