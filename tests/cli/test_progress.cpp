// The one progress line of the long commands: its bar, and that it writes nothing where stderr is not a terminal.

#include "progress.hpp"

#include <catch2/catch.hpp>
#include <unistd.h>

#include <cmath>
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

TEST_CASE("the time left is the rate so far extrapolated, once there is a rate to extrapolate", "[progress]") {
  CHECK(duration_text(0.2) == "0 s");
  CHECK(duration_text(59.4) == "59 s");
  CHECK(duration_text(200) == "3 min 20 s");
  CHECK(duration_text(7500) == "2 h 5 min");
  CHECK(duration_text(-3) == "0 s");
  // A quarter done in 10 s leaves three quarters: 30 s.
  CHECK(time_left_text(10, 0.25) == "10 s, about 30 s left");
  CHECK(time_left_text(60, 0.5) == "1 min 0 s, about 1 min 0 s left");
  // Too soon, too little done, done, or no fraction at all: the elapsed time alone.
  CHECK(time_left_text(1, 0.5) == "1 s");
  CHECK(time_left_text(30, 0.001) == "30 s");
  CHECK(time_left_text(30, 1.0) == "30 s");
  CHECK(time_left_text(30, std::nan("")) == "30 s");
}
