#include "attncheck/records/verdict.hpp"

namespace attncheck::records {

std::string_view to_string(Verdict verdict) {
  switch (verdict) {
    case Verdict::holds: return "holds";
    case Verdict::tight: return "tight";
    case Verdict::violated: return "violated";
    case Verdict::inconclusive: return "inconclusive";
    case Verdict::consistent: return "consistent";
  }
  return "?";
}

std::string_view to_string(Basis basis) {
  switch (basis) {
    case Basis::exact: return "exact";
    case Basis::asymptotic_fit: return "asymptotic-fit";
    case Basis::bound: return "bound";
  }
  return "?";
}

bool settles(Verdict verdict) {
  return verdict == Verdict::holds || verdict == Verdict::tight || verdict == Verdict::violated;
}

Verdict bound_verdict(double largest_ratio, bool within) {
  if (!within) return Verdict::violated;
  return largest_ratio >= kTightFraction ? Verdict::tight : Verdict::holds;
}

std::optional<Verdict> verdict_from_word(std::string_view word) {
  for (Verdict v : kAllVerdicts) {
    if (to_string(v) == word) return v;
  }
  return std::nullopt;
}

std::optional<Basis> basis_from_word(std::string_view word) {
  for (Basis b : kAllBases) {
    if (to_string(b) == word) return b;
  }
  return std::nullopt;
}

}  // namespace attncheck::records
