#pragma once
// A verdict and the basis it rests on (docs/THEORY.md, "What a verdict is"). Typed everywhere; the words exist
// only where JSON is written or read.

#include <optional>
#include <string_view>

namespace attncheck::records {

enum class Verdict { holds, tight, violated, inconclusive };

// exact: a closed form (or a deterministic bound) decides; asymptotic-fit: the local exponent over the last
// doublings does. The finite-N fit is a diagnostic beside either, never a basis.
enum class Basis { exact, asymptotic_fit };

std::string_view to_string(Verdict verdict);
std::string_view to_string(Basis basis);

// The enum of a word of the results format; none for any other text.
std::optional<Verdict> verdict_from_word(std::string_view word);
std::optional<Basis> basis_from_word(std::string_view word);

}  // namespace attncheck::records
