#include <catch2/catch.hpp>

#include "attncheck/records/memory_budget.hpp"
#include "attncheck/theory/common.hpp"
#include "memory_limit.hpp"

#include <stdexcept>
#include <string>

using namespace attncheck::records;

TEST_CASE("byte counts saturate instead of wrapping", "[memory]") {
  CHECK(saturating_product({3, 5, 8}) == 120);
  CHECK(saturating_product({}) == 1);
  CHECK(saturating_product({7, 0, kSaturated}) == 0);
  // N = 2^61: N^2 * 8 wraps to 0 in 64 bits; saturated, it is the largest count.
  const std::uint64_t n = std::uint64_t{1} << 61;
  CHECK(n * n * 8 == 0);
  CHECK(saturating_product({n, n, 8}) == kSaturated);
  CHECK(saturating_product({std::uint64_t{1} << 32, std::uint64_t{1} << 31}) == std::uint64_t{1} << 63);
  CHECK(saturating_sum({kSaturated - 1, 1}) == kSaturated);
  CHECK(saturating_sum({kSaturated - 1, 2}) == kSaturated);
  CHECK(saturating_sum({1, 2, 3}) == 6);
}

TEST_CASE("a size beyond the available memory is an input error naming it", "[memory]") {
  CHECK(available_memory_bytes() > 0);
  CHECK_NOTHROW(require_memory(1024, "a small buffer"));
  CHECK_THROWS_WITH(require_memory(kSaturated, "--N 2305843009213693952", "; use a smaller N"),
                    Catch::Contains("--N 2305843009213693952 needs more than") &&
                        Catch::Contains("GiB are available") && Catch::Contains("; use a smaller N"));
  // (Free memory changes from one call to the next: only sizes far from the budget are compared.)
  CHECK_THROWS_AS(require_memory(4 * available_memory_bytes(), "x"), attncheck::theory::InputError);
}

TEST_CASE("under an address-space limit the room is the limit less what the process already maps", "[memory]") {
  if (!attncheck::testing::kAddressLimitsWork) {
    WARN("skipped under AddressSanitizer, which cannot run under an address-space limit");
    return;
  }
  // 64 MiB more than the process maps: the available memory is about that, not the whole limit (the process
  // itself maps far more than 64 MiB: its libraries, OpenBLAS's buffers).
  const std::string outcome = attncheck::testing::outcome_with_memory_room(64 << 20, [] {
    const std::uint64_t available = available_memory_bytes();
    if (available > (64u << 20) || available < (48u << 20)) {
      throw std::runtime_error("available " + std::to_string(available) + " bytes under a 64 MiB room");
    }
  });
  CHECK(outcome == "ok");
}
