// parallel_for: every iteration's exception is caught and the first reaches the caller, where OpenMP alone
// would call std::terminate.
#include "attncheck/streams/parallel.hpp"
#include "records/memory_limit.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <new>
#include <vector>

using namespace attncheck;
using streams::parallel_for;

TEST_CASE("an exception inside a parallel loop reaches the caller instead of terminating the program") {
  std::vector<int> done(64, 0);
  CHECK_THROWS_WITH(parallel_for(64, 4,
                                 [&](theory::Index k) {
                                   done[static_cast<std::size_t>(k)] = 1;
                                   if (k == 17) throw theory::InputError("iteration 17 failed");
                                 }),
                    "iteration 17 failed");
  CHECK(std::count(done.begin(), done.end(), 1) == 64);  // the others still ran
  CHECK_THROWS_AS(parallel_for(8, 2, [](theory::Index) { throw std::bad_alloc(); }), std::bad_alloc);
}

TEST_CASE("threads that cannot be started are an InputError naming --threads, not OpenMP's exit") {
  if (!attncheck::testing::kAddressLimitsWork) {
    WARN("skipped under AddressSanitizer, which cannot run under an address-space limit");
    return;
  }
  // 1,024 thread stacks need gigabytes of address space; the child may grow by 256 MiB.
  const std::string outcome =
      attncheck::testing::outcome_with_memory_room(256 << 20, [] { parallel_for(2048, 1024, [](theory::Index) {}); });
  CHECK_THAT(outcome, Catch::StartsWith("InputError: --threads 1024: the system cannot start 1024 threads"));
  // (Checked without an OpenMP loop: a forked child cannot use the parent's pool of OpenMP threads.)
  CHECK(attncheck::testing::outcome_with_memory_room(256 << 20, [] { streams::require_threads(2); }) == "ok");
}
