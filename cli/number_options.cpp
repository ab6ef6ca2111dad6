#include "number_options.hpp"

#include <fmt/format.h>

namespace attncheck::cli {

CLI::Validator real_in(RealRange range) {
  return CLI::Validator([range](std::string& text) { return records::real_problem(text, range); },
                        fmt::format("in {}{:g}, {:g}]", range.above_min ? "(" : "[", range.min, range.max));
}

CLI::Validator integer_in(std::int64_t min, std::int64_t max) {
  return CLI::Validator([min, max](std::string& text) { return records::integer_problem(text, min, max); },
                        fmt::format("in [{}, {}]", min, max));
}

CLI::Validator unsigned_in(std::uint64_t min, std::uint64_t max) {
  return CLI::Validator([min, max](std::string& text) { return records::unsigned_problem(text, min, max); },
                        fmt::format("in [{}, {}]", min, max));
}

}  // namespace attncheck::cli
