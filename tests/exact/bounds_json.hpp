#pragma once
// Reading `attncheck bounds --json` output in the tests of both its forms (C1/C2 and --cross-norm).

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

}  // namespace attncheck::testing
