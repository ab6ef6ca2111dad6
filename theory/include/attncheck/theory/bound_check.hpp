#pragma once
// How a computed norm is compared with a deterministic bound, by every check that compares one (the bounds
// surveys, the live per-head checks of probes): exactly, but for floating-point rounding in forming the norms
// (a few ulps per entry), so a value counts as within a bound when value <= bound * (1 + kBoundRoundingSlack).

namespace attncheck::theory {

inline constexpr double kBoundRoundingSlack = 1e-12;

inline bool within(double value, double bound) { return value <= bound * (1 + kBoundRoundingSlack); }

// The same for a lower bound: value >= bound, but for rounding. NaN is within neither.
inline bool above(double value, double bound) { return value >= bound * (1 - kBoundRoundingSlack); }

}  // namespace attncheck::theory
