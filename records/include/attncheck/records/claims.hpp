#pragma once
// The claims attncheck verifies, as THEORY.md's table states them: the one definition that the sweep's presets,
// `attncheck mc`'s summary and the reports read. The two versions of the polynomial paper number the same
// results differently, so every claim carries both numbers.

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace attncheck::records {

struct Claim {
  std::string_view id;  // "C1".."C9"
  // Where the paper states it: v1 and v2 of the polynomial paper ("Thm 4.2 (4.3)", "Thm 4.2 (8)"); the same
  // source twice for the other papers.
  std::string_view v1, v2;
  std::string_view statement;
  // The exponent a of the claimed O(N^a) of the claim's primary quantity (C8: of d_k, Var(q . k) = d_k); none
  // where it depends on the map's own parameter (C7: 1 - alpha for phi = L^-alpha h).
  std::optional<double> claimed_exponent;
  // How the O(.) constant grows with D, d and the sigmas; empty where the paper does not say.
  std::string_view constant_growth;
  // `attncheck mc` samples it (C3..C9); C1 and C2 hold for every input and `attncheck bounds` checks them exactly.
  bool sampled = true;

  // "v1: Thm 4.2 (4.3) / v2: Thm 4.2 (8)", or the one source of a claim from another paper.
  std::string numbering() const;
};

// Every claim of the table, C1..C9 in order.
std::span<const Claim> all_claims();

// The ids of the claims `attncheck mc` samples (C3..C9; C1 and C2 are exact: `attncheck bounds`), in order: the
// words of --claim and, with "custom", of the results' "claim".
std::vector<std::string_view> sampled_claim_ids();

// The claim `id`, or none for ids outside the table (e.g. "custom").
std::optional<Claim> find_claim(std::string_view id);

}  // namespace attncheck::records
