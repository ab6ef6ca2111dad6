#pragma once
// A verdict and the basis it rests on (docs/THEORY.md, "What a verdict is"). Typed everywhere; the words exist
// only where JSON is written or read.

#include <array>
#include <optional>
#include <string_view>

namespace attncheck::records {

// holds, tight and violated settle a claim; consistent and inconclusive do not. `consistent` is what finite data
// can say in favour of a claim that no proof decides: the claim fits the data up to the largest N, which is not a
// proof, so it is never worded, counted or coded as `holds`.
enum class Verdict { holds, tight, violated, inconclusive, consistent };

// bound: a deterministic bound in N that holds for every input (every sample is checked against it) decides;
// exact: a proved statement about the expectation (a closed form, or a proved upper or lower bound in N) decides;
// asymptotic-fit: no proof either way, finite data speaks (a violation shown by a test valid under heavy tails,
// or consistency up to the largest N). The finite-N fit over all N is a diagnostic beside any of them, never a
// basis.
enum class Basis { exact, asymptotic_fit, bound };

inline constexpr std::array<Verdict, 5> kAllVerdicts{Verdict::holds, Verdict::tight, Verdict::violated,
                                                     Verdict::inconclusive, Verdict::consistent};
inline constexpr std::array<Basis, 3> kAllBases{Basis::bound, Basis::exact, Basis::asymptotic_fit};

std::string_view to_string(Verdict verdict);
std::string_view to_string(Basis basis);

// Whether the verdict settles its claim (holds, tight, violated) or leaves it open (consistent, inconclusive).
bool settles(Verdict verdict);

// A deterministic bound checked exactly on families of inputs, from the largest value over them divided by the
// bound (`within`: no value above it beyond rounding): violated when one is above it, tight when a family comes
// within kTightFraction of it, else holds.
inline constexpr double kTightFraction = 0.999;
Verdict bound_verdict(double largest_ratio, bool within);

// The enum of a word of the results format; none for any other text.
std::optional<Verdict> verdict_from_word(std::string_view word);
std::optional<Basis> basis_from_word(std::string_view word);

}  // namespace attncheck::records
