#pragma once
// The claims attncheck verifies, as THEORY.md's table states them. The two versions of the polynomial
// paper number the same results differently, so every claim carries both numbers.

#include <optional>
#include <string_view>

namespace attncheck::reports {

struct ClaimStatement {
  std::string_view id;         // "C1".."C9"
  std::string_view numbering;  // "v1: Thm 4.2 (4.3) / v2: Thm 4.2 (8)", or the source for other papers
  std::string_view statement;
};

// The statement of `id`, or none for ids outside the table (e.g. "custom").
std::optional<ClaimStatement> find_claim(std::string_view id);

}  // namespace attncheck::reports
