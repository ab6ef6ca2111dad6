#include "attncheck/records/memory_budget.hpp"

#include "attncheck/theory/common.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>

#include <sys/resource.h>
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

namespace {

// The value after `key` in a "key value [unit]" file (/proc/meminfo, /proc/self/status, cgroup memory.stat), in
// the file's unit; none when absent.
// Line by line: /proc/self/status begins with lines of words ("Name:", "State:"), where reading a number would
// end the search before VmSize.
std::optional<std::uint64_t> field(const char* file, std::string_view key) {
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) {
    std::istringstream words(line);
    std::string name;
    std::uint64_t value = 0;
    if (words >> name && name == key && words >> value) return value;
  }
  return std::nullopt;
}

std::optional<std::uint64_t> number_in(const std::string& file) {
  std::ifstream in(file);
  std::uint64_t value = 0;
  if (in >> value) return value;
  return std::nullopt;  // absent, or "max" (cgroup v2's no limit)
}

// What this process's memory cgroup (v2, or v1's memory controller) still allows: the limit less what the group
// uses, the page cache it could drop counted as free. None when there is no limit.
std::optional<std::uint64_t> cgroup_room() {
  for (const auto& [limit_file, usage_file, stat_file] :
       {std::tuple{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current", "/sys/fs/cgroup/memory.stat"},
        std::tuple{"/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes",
                   "/sys/fs/cgroup/memory/memory.stat"}}) {
    const auto limit = number_in(limit_file), usage = number_in(usage_file);
    if (!limit || !usage || *limit >= (std::uint64_t{1} << 62)) continue;  // v1 writes "no limit" as ~2^63
    const std::uint64_t cache = field(stat_file, "inactive_file").value_or(0);
    const std::uint64_t used = *usage > cache ? *usage - cache : 0;
    return *limit > used ? *limit - used : 0;
  }
  return std::nullopt;
}

// What a resource limit (ulimit -v, ulimit -d) leaves of the address space or data segment, from what
// /proc/self/status says is in use. None when unlimited.
std::optional<std::uint64_t> rlimit_room(int resource, std::string_view in_use_key) {
  struct rlimit limit {};
  if (::getrlimit(resource, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return std::nullopt;
  const std::uint64_t used = saturating_product({field("/proc/self/status", in_use_key).value_or(0), 1024});
  return limit.rlim_cur > used ? static_cast<std::uint64_t>(limit.rlim_cur) - used : 0;
}

}  // namespace

std::uint64_t available_memory_bytes() {
  std::uint64_t bytes = 0;
  if (const auto kib = field("/proc/meminfo", "MemAvailable:")) {
    bytes = saturating_product({*kib, 1024});
  } else {
    bytes = saturating_product(
        {static_cast<std::uint64_t>(sysconf(_SC_PHYS_PAGES)), static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE))});
  }
  // A container's or a job's limit, and the shell's ulimits, end a run as surely as the machine's memory does.
  for (const auto& room : {cgroup_room(), rlimit_room(RLIMIT_AS, "VmSize:"), rlimit_room(RLIMIT_DATA, "VmData:")}) {
    if (room) bytes = std::min(bytes, *room);
  }
  return bytes;
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
