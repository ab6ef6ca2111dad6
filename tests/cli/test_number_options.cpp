// The one checker of numeric command-line values: what it accepts, and that everything else names the value.

#include "number_options.hpp"
#include "subcommand.hpp"

#include <catch2/catch.hpp>

#include <string>

using namespace attncheck::cli;

namespace {
// The validator's verdict on `text`: empty when accepted, else the message.
std::string verdict(const CLI::Validator& validator, std::string text) { return validator(text); }
}  // namespace

TEST_CASE("real options take finite numbers in range and name anything else", "[options]") {
  const CLI::Validator seconds = real_in({0, 86400, true});
  for (const char* fine : {"5", "0.25", "1e-3", "86400", "+2", " 3 "}) {
    INFO(fine);
    CHECK(verdict(seconds, fine).empty());
  }
  for (const char* bad : {"nan", "NaN", "inf", "-inf", "infinity", "abc", "", "1,5", "0x10", "5s"}) {
    INFO(bad);
    CHECK_THAT(verdict(seconds, bad), Catch::Contains(std::string("'") + bad + "' is not a finite number"));
  }
  for (const char* out : {"0", "-1", "86400.5", "1e300", "-0"}) {
    INFO(out);
    CHECK_THAT(verdict(seconds, out), Catch::Contains(std::string(out) + " is out of range"));
  }
  CHECK(verdict(real_in({0, 1}), "0").empty());  // a closed lower end takes 0
}

TEST_CASE("whole-number options refuse fractions, signs and sizes their type cannot hold", "[options]") {
  const CLI::Validator seed = unsigned_in(0, UINT64_MAX);
  CHECK(verdict(seed, "18446744073709551615").empty());
  CHECK_THAT(verdict(seed, "-1"), Catch::Contains("-1 is out of range"));  // never wraps to 2^64 - 1
  CHECK_THAT(verdict(seed, "18446744073709551616"), Catch::Contains("out of range"));
  CHECK_THAT(verdict(seed, "1.5"), Catch::Contains("'1.5' is not a whole number"));
  CHECK_THAT(verdict(seed, "1e3"), Catch::Contains("out of range") || Catch::Contains("not a whole number"));
  const CLI::Validator threads = integer_in(0, kMaxThreads);
  CHECK(verdict(threads, "0").empty());
  CHECK_THAT(verdict(threads, "100000"), Catch::Contains("100000 is out of range: give a whole number from 0 to 1024"));
  CHECK_THAT(verdict(threads, "nan"), Catch::Contains("'nan' is not a whole number"));
}

TEST_CASE("numbers inside text options are checked the same way, naming the option", "[options]") {
  CHECK(parse_integer_list("1,2, 3", "--p", 1, 64) == std::vector<std::int64_t>{1, 2, 3});
  CHECK_THROWS_WITH(parse_integer_list("1e300", "--p", 1, 64), Catch::Contains("--p: 1e300 is out of range"));
  CHECK_THROWS_WITH(parse_integer_list("2.5", "--p", 1, 64), Catch::Contains("--p: '2.5' is not a whole number"));
  CHECK_THROWS_WITH(parse_integer_list("1,", "--p", 1, 64), Catch::Contains("--p"));
  CHECK_THROWS_AS(parse_integer_list("", "--p", 1, 64), attncheck::theory::InputError);  // exit 2, like UsageError
  CHECK(parse_integer("500", "--samples", 2, 1000) == 500);
  CHECK_THROWS_WITH(parse_integer("-1", "--samples", 2, 1000), Catch::Contains("--samples: -1 is out of range"));
}
