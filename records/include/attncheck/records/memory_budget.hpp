#pragma once
// Sizes of allocations-to-be, checked against the memory the machine has before anything is allocated, so
// that a size too large for this machine is an input error naming it (exit 2) and not std::bad_alloc, a swap
// storm or the OOM killer. Byte counts saturate at UINT64_MAX instead of wrapping: N = 2^61 must compare as
// too large, not as the small number N^2 * 8 wraps to.

#include <cstdint>
#include <initializer_list>
#include <string_view>

namespace attncheck::records {

inline constexpr std::uint64_t kSaturated = UINT64_MAX;

// a * b * ..., or kSaturated when the product does not fit.
std::uint64_t saturating_product(std::initializer_list<std::uint64_t> factors);
// a + b + ..., or kSaturated when the sum does not fit.
std::uint64_t saturating_sum(std::initializer_list<std::uint64_t> terms);

// Bytes that can be allocated now without swapping (MemAvailable; physical memory when the kernel does not say),
// and within this process's memory cgroup and its address-space and data-segment limits.
std::uint64_t available_memory_bytes();
// What one run may plan to hold: 80% of the available memory, the rest left to the system and to estimates'
// slack.
std::uint64_t memory_budget_bytes();

// Throws theory::InputError "<what> needs X GiB of memory, and Y GiB are available<advice>" when `bytes`
// exceeds the budget.
void require_memory(std::uint64_t bytes, std::string_view what, std::string_view advice = "");

}  // namespace attncheck::records
