// Lists of reals inside a text option (--mix, --alpha): every element checked, the bad one named with the whole text.

#include "attncheck/records/option_ranges.hpp"

#include <catch2/catch.hpp>

using attncheck::records::parse_real;
using attncheck::records::parse_real_list;

TEST_CASE("real lists parse every element and name the bad one with the whole text", "[options]") {
  CHECK(parse_real_list("0.5, 1,2e-1", "--alpha") == std::vector<double>{0.5, 1, 0.2});
  CHECK(parse_real_list("1", "--mix") == std::vector<double>{1});
  CHECK_THROWS_WITH(parse_real_list("0.5,x", "--mix"), Catch::Equals("--mix: 'x' in '0.5,x' is not a number"));
  // A missing number, at the end or between commas, is an empty element.
  CHECK_THROWS_WITH(parse_real_list("0.5,", "--mix"), Catch::Equals("--mix: '' in '0.5,' is not a number"));
  CHECK_THROWS_WITH(parse_real_list("1,,2", "--mix"), Catch::Equals("--mix: '' in '1,,2' is not a number"));
  CHECK_THROWS_WITH(parse_real_list(",", "--mix"), Catch::Equals("--mix: '' in ',' is not a number"));
  CHECK_THROWS_WITH(parse_real_list("", "--mix"), Catch::Equals("--mix: empty list"));
  for (const char* bad : {"nan", "inf", "+0.5", "1e999", "0x1"}) {
    INFO(bad);
    CHECK_THROWS_WITH(parse_real_list(bad, "--mix"), Catch::Contains("is not a number"));
  }
  CHECK(parse_real(" 2.5\t", "--inner-scale", "2.5") == 2.5);
}
