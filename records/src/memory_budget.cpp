#include "attncheck/records/memory_budget.hpp"

#include "attncheck/theory/common.hpp"

#include <fmt/format.h>

#include <fstream>
#include <string>

#include <unistd.h>

namespace attncheck::records {

std::uint64_t saturating_product(std::initializer_list<std::uint64_t> factors) {
  std::uint64_t product = 1;
  for (std::uint64_t f : factors) {
    if (f == 0) return 0;
    if (product > kSaturated / f) {
      product = kSaturated;
    } else {
      product *= f;
    }
  }
  return product;
}

std::uint64_t saturating_sum(std::initializer_list<std::uint64_t> terms) {
  std::uint64_t sum = 0;
  for (std::uint64_t t : terms) sum = t > kSaturated - sum ? kSaturated : sum + t;
  return sum;
}

std::uint64_t available_memory_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key, unit;
  std::uint64_t kib = 0;
  while (meminfo >> key >> kib >> unit) {
    if (key == "MemAvailable:") return saturating_product({kib, 1024});
  }
  return saturating_product(
      {static_cast<std::uint64_t>(sysconf(_SC_PHYS_PAGES)), static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE))});
}

std::uint64_t memory_budget_bytes() { return available_memory_bytes() / 10 * 8; }

void require_memory(std::uint64_t bytes, std::string_view what, std::string_view advice) {
  const std::uint64_t budget = memory_budget_bytes();
  if (bytes <= budget) return;
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  throw theory::InputError(
      fmt::format("{} needs {} GiB of memory, and {:.3g} GiB are available{}", what,
                  fmt::format("{}{:.3g}", bytes == kSaturated ? "more than " : "", static_cast<double>(bytes) / kGiB),
                  static_cast<double>(budget) / kGiB, advice));
}

}  // namespace attncheck::records
