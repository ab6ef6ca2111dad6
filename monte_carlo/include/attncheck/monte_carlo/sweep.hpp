#pragma once
// The claim presets of THEORY.md as series, and the sweep points of a series with their seeds and keys.

#include "attncheck/monte_carlo/backend.hpp"
#include "attncheck/monte_carlo/fit.hpp"
#include "attncheck/records/claims.hpp"

#include <optional>
#include <string>
#include <vector>

namespace attncheck::monte_carlo {

// The outer constant c(N) = factor * d^(-d_exponent) * N^(-n_exponent) as the claims write it.
struct OuterRule {
  std::string text = "none";  // "none", "1/sqrt(N)", "1/k:K", "N^-a" with the numbers filled in
  double factor = 1;
  double d_exponent = 0;  // C5/C6 put 1/sqrt(d) outside the power
  double n_exponent = 0;
};

// The inner constant lambda: "1/sqrt(d)" or a number.
struct InnerRule {
  bool inverse_sqrt_d = true;
  double value = 1;
  double at(theory::Index d) const;
};

// One fitted family: everything but the swept variable (N, or d for C8).
struct SeriesSpec {
  std::string claim = "custom";  // a sampled claim's id ("C3".."C9") or "custom"
  theory::Activation activation;
  std::optional<double> alpha;  // C7's N^-alpha
  std::optional<double> mix;    // C9's mix alpha of P = alpha softmax_col(V) + (1 - alpha) V
  InnerRule inner;
  OuterRule outer;
  theory::ScoreModel scores = theory::ScoreModel::projected;
  std::vector<Estimand> estimands;
  // Of E||F|| (E[row sum] for row sums; E||F||^2 for C8) in the swept variable; claimed_for gives each estimand's.
  std::optional<double> claimed_exponent;
  bool fit_over_d = false;                // C8: Var(q.k) = d_k is a statement about d
  bool claims_variance_equals_d = false;  // C8's pairs: the claim is the value d_k itself, not an exponent
  bool counts_for_exit = true;            // the claim as the papers state it; the matrix reading does not
  std::vector<Estimand> secondary;        // reported beside the claim, never counted (C7's Frobenius norm)
  // C7: the paper's exponent is of the row sums, so the row mean (row sum / N) is held to one less. Elsewhere a
  // claimed exponent is of each estimand itself, as --claimed-exponent's help says.
  bool claim_is_of_row_sums = false;

  std::optional<double> claimed_for(Estimand estimand) const;
  bool counts_for_exit_of(Estimand estimand) const;
};

// The claim `id` of the table (records/claims.hpp) when the sweep has presets for it (C3..C9); throws
// theory::InputError naming the id otherwise.
records::Claim claim_info(const std::string& id);

// What the user asked for on the command line; presets fill the rest.
struct SweepRequest {
  std::optional<std::string> claim;  // C3..C8
  std::vector<int> p{1, 2, 3};
  std::optional<std::string> phi;
  std::optional<std::string> normalize;  // "rows": an expression's rows divided by their sums
  std::optional<std::string> inner_scale, outer_scale;
  std::optional<std::string> estimands;
  std::optional<std::vector<double>> alpha;  // C7: 0, 0.5 and 1 unless given
  std::optional<std::vector<double>> mix;    // C9: 1 unless given, each in [0, 1]
  std::optional<double> claimed_exponent;    // custom runs only
};
// Throws theory::InputError when a preset field is also given explicitly, naming both.
std::vector<SeriesSpec> build_series(const SweepRequest& request);

// A concrete sweep point of a series.
struct PointSpec {
  const SeriesSpec* series = nullptr;
  SweepPoint point;  // N, D, d, sigmas, the concrete map and the point's seed
  std::string key;   // canonical text identifying the point (independent of the grid's order)
};
// Point seed = derive_point_seed(run_seed, FNV-1a 64 of key): points keep their seed however the grid is
// written or resumed.
std::uint64_t point_seed(std::uint64_t run_seed, const std::string& key);
// dv: C9's value columns (0: d); other claims have no values.
PointSpec make_point(const SeriesSpec& series, theory::Index N, theory::Index D, theory::Index d, double sigma_x,
                     double sigma_t, std::uint64_t run_seed, theory::Index dv = 0);

}  // namespace attncheck::monte_carlo
