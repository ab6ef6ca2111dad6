#include "attncheck/monte_carlo/distributed.hpp"

#include "attncheck/theory/common.hpp"

#include <catch2/catch.hpp>
#include <rapidcheck/catch.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

using namespace attncheck::monte_carlo;

TEST_CASE("the ranks' shares of a sample range are contiguous, in rank order, and cover it once") {
  rc::prop("shares tile [first, first + count) and differ in size by at most one", [] {
    const auto first = *rc::gen::inRange<std::uint64_t>(0, std::uint64_t{1} << 40);
    const auto count = *rc::gen::inRange<std::uint64_t>(0, 5000);
    const int ranks = *rc::gen::inRange(1, 300);
    std::uint64_t next = first, smallest = UINT64_MAX, largest = 0;
    for (int r = 0; r < ranks; ++r) {
      const distributed::SampleRange share = distributed::rank_share(first, count, r, ranks);
      RC_ASSERT(share.first == next);
      next += share.count;
      smallest = std::min(smallest, share.count);
      largest = std::max(largest, share.count);
    }
    RC_ASSERT(next == first + count);
    RC_ASSERT(largest - smallest <= 1);
  });
  // 10 = 3 * 3 + 1 samples over 3 ranks: rank 0 takes the one left over.
  CHECK(distributed::rank_share(100, 10, 0, 3).first == 100);
  CHECK(distributed::rank_share(100, 10, 0, 3).count == 4);
  CHECK(distributed::rank_share(100, 10, 1, 3).first == 104);
  CHECK(distributed::rank_share(100, 10, 2, 3).first == 107);
  CHECK(distributed::rank_share(100, 10, 2, 3).count == 3);
  // Fewer samples than ranks: the last ranks evaluate none.
  CHECK(distributed::rank_share(5, 2, 3, 4).count == 0);
  CHECK_THROWS_WITH(distributed::rank_share(0, 10, 3, 3), Catch::Contains("rank 3 of 3"));
}

TEST_CASE("one GPU per rank: local rank modulo the host's devices, none without devices") {
  CHECK(distributed::device_for_local_rank(0, 4) == 0);
  CHECK(distributed::device_for_local_rank(3, 4) == 3);
  CHECK(distributed::device_for_local_rank(4, 4) == 0);  // more ranks than devices share them round-robin
  CHECK(distributed::device_for_local_rank(7, 2) == 1);
  CHECK(distributed::device_for_local_rank(2, 0) == -1);
  CHECK_THROWS_WITH(distributed::device_for_local_rank(-1, 2), Catch::Contains("local rank -1"));
  // Every device of a host gets a rank when there are at least as many ranks as devices.
  for (int devices = 1; devices <= 8; ++devices) {
    std::vector<int> used(static_cast<std::size_t>(devices), 0);
    for (int local = 0; local < devices; ++local)
      ++used[static_cast<std::size_t>(distributed::device_for_local_rank(local, devices))];
    CHECK(std::count(used.begin(), used.end(), 1) == devices);
  }
}

TEST_CASE("a process not started by an MPI launcher is rank 0 of a run of one, where collectives are the identity") {
  // The test program is started by CTest, not mpirun; a launcher's variables would make this a different test.
  if (std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMIX_RANK") || std::getenv("PMI_RANK")) {
    WARN("not checked under an MPI launcher");
    return;
  }
  CHECK(distributed::rank() == 0);
  CHECK(distributed::size() == 1);
  CHECK(distributed::local_rank() == 0);
  CHECK(distributed::is_root());
  CHECK(distributed::allgather({1.5, -2.0}) == std::vector<double>{1.5, -2.0});
  CHECK(distributed::allgather_text("host-a") == std::vector<std::string>{"host-a"});
  CHECK(distributed::broadcast_flag(true));
  CHECK_FALSE(distributed::broadcast_flag(false));
  CHECK(distributed::broadcast_count(12345678901ULL) == 12345678901ULL);
  CHECK(distributed::end_after_error(3) == 3);  // returns: there is no other rank to stop
  CHECK_FALSE(distributed::host_name().empty());
}
