#pragma once
// What the tests of both forms of `attncheck bounds` (C1/C2 and --cross-norm) share: reading its --json output,
// and its refusals of bad usage and input.

#include "run_command.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <string>

namespace attncheck::testing {

// The entry of `report["families"]` named `name`; fails the test when there is none.
inline const nlohmann::json& family(const nlohmann::json& report, const std::string& name) {
  for (const auto& f : report["families"]) {
    if (f["family"] == name) return f;
  }
  FAIL("no family " << name);
  throw;
}

// Runs `attncheck ARGUMENTS`, which must exit 2 (bad usage or input) with `fragment` in its message.
inline void expect_refused(const std::string& arguments, const std::string& fragment) {
  INFO(arguments);
  const CommandResult result = run_attncheck(arguments);
  CHECK(result.exit_code == 2);
  CHECK_THAT(result.err, Catch::Contains(fragment));
}

}  // namespace attncheck::testing
