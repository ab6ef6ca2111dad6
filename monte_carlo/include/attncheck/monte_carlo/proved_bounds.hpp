#pragma once
// What is proved about how an estimand grows in N under the Gaussian model of the sweeps, on every input or in
// expectation (docs/THEORY.md, "Bounds in N"). A verdict rests on these before any fit: the table below is the one
// place that knows which statement holds for which activation, estimand and scale.

#include "attncheck/monte_carlo/sweep.hpp"
#include "attncheck/records/results_folder.hpp"

#include <optional>
#include <vector>

namespace attncheck::monte_carlo {

// The part of a series' configuration that the proofs depend on.
struct GrowthCase {
  theory::Activation activation;
  Estimand estimand = Estimand::value;
  double n_exponent = 0;  // c(N) = factor N^-n_exponent, factor > 0
  theory::ScoreModel scores = theory::ScoreModel::projected;
  std::optional<double> mix;  // C9
  double inner = 1;           // lambda
  theory::Index d = 1;
};

GrowthCase growth_case(const PointSpec& point, Estimand estimand);
// The same from a record of a results folder; none when its scale is not one this build reads.
std::optional<GrowthCase> growth_case(const records::PointRecord& record);

// Every statement of docs/THEORY.md's "Bounds in N" that applies, with its exponent of N.
std::vector<records::ProvedBound> proved_bounds(const GrowthCase& growth);

// Whether the proofs (with what the point's closed form implies) decide the verdict of the estimand's claim
// whatever the data: `--samples auto` then stops on the relative standard error alone, spending no samples on a
// reliable one, which only the asymptotic fit needs. False for equality claims (C8) and maps without a claim.
bool proof_decides(const PointSpec& point, Estimand estimand);

// The deterministic bounds every sample of the estimand obeys at this point, from the same statements: the
// sweep records them and the verdict checks every sample against them.
struct SampleBounds {
  std::optional<double> upper, lower;
};
SampleBounds sample_bounds(const PointSpec& point, Estimand estimand);

}  // namespace attncheck::monte_carlo
