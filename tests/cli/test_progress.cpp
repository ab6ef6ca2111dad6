// The one progress line of the long commands: its bar, and that it writes nothing where stderr is not a terminal.

#include "progress.hpp"

#include <catch2/catch.hpp>
#include <unistd.h>

#include <cstdio>
#include <string>

using namespace attncheck::cli;

TEST_CASE("the progress bar fills in proportion and stays its width", "[progress]") {
  CHECK(progress_bar(0.0, 10) == "[          ]");
  CHECK(progress_bar(0.5, 10) == "[#####     ]");
  CHECK(progress_bar(0.99, 10) == "[######### ]");
  CHECK(progress_bar(1.0, 10) == "[##########]");
  // A count past its plan (or a negative one) never draws outside the brackets.
  CHECK(progress_bar(1.7, 4) == "[####]");
  CHECK(progress_bar(-0.2, 4) == "[    ]");
  CHECK(progress_bar(0.5).size() == 32);
}

TEST_CASE("the progress line is silent when stderr is a file", "[progress]") {
  std::FILE* file = std::tmpfile();
  REQUIRE(file != nullptr);
  std::fflush(stderr);
  const int saved = ::dup(STDERR_FILENO);
  REQUIRE(::dup2(::fileno(file), STDERR_FILENO) == STDERR_FILENO);
  {
    ProgressLine line;
    CHECK_FALSE(line.shown());
    line.update("point 1/4");
    line.finish();
  }
  std::fflush(stderr);
  ::dup2(saved, STDERR_FILENO);
  ::close(saved);
  CHECK(std::ftell(file) == 0);
  std::fclose(file);
}
