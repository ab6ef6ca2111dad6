// Messages quote file names and file contents: printable() keeps them whole and inert on a terminal. And the shared
// finiteness check of common.hpp.
#include "attncheck/theory/common.hpp"

#include <catch2/catch.hpp>
#include <rapidcheck/catch.h>

#include <limits>
#include <string>

using attncheck::theory::InputError;
using attncheck::theory::printable;

TEST_CASE("printable escapes NUL, terminal escapes and bytes that are not UTF-8, and keeps the rest") {
  CHECK(printable(std::string("a\0b", 3)) == "a\\x00b");
  CHECK(printable("\x1b]0;title\x07 \x1b[2J") == "\\x1b]0;title\\x07 \\x1b[2J");
  CHECK(printable("csi \xc2\x9b and del \x7f") == "csi \\x9b and del \\x7f");
  CHECK(printable("cut \xc3 and stray \x80 and overlong \xc0\xaf") ==
        "cut \\xc3 and stray \\x80 and overlong \\xc0\\xaf");
  CHECK(printable("caf\xc3\xa9 \xe2\x80\x94 \xf0\x9f\x99\x82") == "caf\xc3\xa9 \xe2\x80\x94 \xf0\x9f\x99\x82");
  CHECK(printable("two\nlines\tand a tab") == "two\nlines\tand a tab");
  CHECK(printable("two\nlines\tand a tab", true) == "two\\x0alines\\x09and a tab");
  // An error's message is made printable when it is made: a NUL no longer ends it.
  CHECK(std::string(InputError(std::string("config.json: \"a\0b\" is bad", 25)).what()) ==
        "config.json: \"a\\x00b\" is bad");
}

TEST_CASE("printable output has no control character but newline and tab, and printable leaves it unchanged") {
  rc::prop("printable is idempotent and inert", [](const std::string& text) {
    const std::string once = printable(text);
    RC_ASSERT(printable(once) == once);
    for (const char c : once) {
      const auto byte = static_cast<unsigned char>(c);
      RC_ASSERT((byte >= 0x20 && byte != 0x7f) || c == '\n' || c == '\t');
    }
  });
}

TEST_CASE("all_finite finds one infinity or NaN anywhere, in float and double, and passes the largest finite values") {
  using attncheck::theory::all_finite;
  for (const int where : {0, 7, 63, 64, 1000}) {
    INFO("entry " << where);
    Eigen::ArrayXd d = Eigen::ArrayXd::Constant(1001, std::numeric_limits<double>::max());
    Eigen::ArrayXf f = Eigen::ArrayXf::Constant(1001, -std::numeric_limits<float>::max());
    CHECK(all_finite(d));
    CHECK(all_finite(f));
    for (const double bad : {std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity(),
                             std::numeric_limits<double>::quiet_NaN()}) {
      d[where] = bad;
      f[where] = static_cast<float>(bad);
      CHECK_FALSE(all_finite(d));
      CHECK_FALSE(all_finite(f));
    }
  }
  CHECK(all_finite(Eigen::MatrixXd(0, 3)));
  CHECK(all_finite(Eigen::MatrixXd::Zero(3, 2)));
}
