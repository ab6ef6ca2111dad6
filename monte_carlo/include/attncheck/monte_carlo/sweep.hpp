#pragma once
// Sweep grids, the claim presets of THEORY.md and the exact reference values of every sweep point.

#include "attncheck/monte_carlo/backend.hpp"

#include <optional>
#include <string>
#include <vector>

namespace attncheck::monte_carlo {

// "16:4096:x2" (start:stop:xfactor, stop included when hit), "16,32,64", or one value. Throws
// theory::InputError naming `option` and the bad text.
std::vector<theory::Index> parse_index_grid(const std::string& text, const std::string& option);
std::vector<double> parse_real_list(const std::string& text, const std::string& option);
std::vector<Estimand> parse_estimands(const std::string& text);
const char* estimand_name(Estimand e);

// The outer constant c(N) = factor * d^(-d_exponent) * N^(-n_exponent) as the claims write it.
struct OuterRule {
  std::string text = "none";  // "none", "1/sqrt(N)", "1/k:K", "N^-a" with the numbers filled in
  double factor = 1;
  double d_exponent = 0;      // C5/C6 put 1/sqrt(d) outside the power
  double n_exponent = 0;
};
OuterRule parse_outer_scale(const std::string& text);

// The inner constant lambda: "1/sqrt(d)" or a number.
struct InnerRule {
  bool inverse_sqrt_d = true;
  double value = 1;
  double at(theory::Index d) const;
};
InnerRule parse_inner_scale(const std::string& text);

// phi names of the results contract: poly, matpow, softmax, relu, relu2, gelu, softplus, identity, relu6, sigmoid.
theory::Activation parse_phi(const std::string& name, int p);
std::string phi_name(const theory::Activation& activation);

// One fitted family: everything but the swept variable (N, or d for C8).
struct SeriesSpec {
  std::string claim = "custom";        // "C3".."C8" or "custom"
  std::optional<std::string> reading;  // "elementwise" | "matrix" for C3/C4
  theory::Activation activation;
  std::optional<double> alpha;         // C7's N^-alpha
  InnerRule inner;
  OuterRule outer;
  std::vector<Estimand> estimands;
  std::optional<double> claimed_exponent;  // of E||F|| (of E||F||^2 for C8) in the swept variable
  bool fit_over_d = false;                 // C8: Var(q.k) = d_k is a statement about d
  bool counts_for_exit = true;             // the claim as the papers state it; the matrix reading does not
};

struct ClaimInfo {
  std::string id, v1, v2, statement;
};
// The claim's numbering in both versions of the paper and its statement; throws for an unknown id.
ClaimInfo claim_info(const std::string& id);

// What the user asked for on the command line; presets fill the rest.
struct SweepRequest {
  std::optional<std::string> claim;  // C3..C8
  std::vector<int> p{1, 2, 3};
  std::optional<std::string> phi;
  std::optional<std::string> inner_scale, outer_scale;
  std::optional<std::string> estimands;
  std::vector<double> alpha{1.0};
  std::optional<double> claimed_exponent;  // custom runs only
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
PointSpec make_point(const SeriesSpec& series, theory::Index N, theory::Index D, theory::Index d, double sigma_x,
                     double sigma_t, std::uint64_t run_seed);

// Exact E||F||_F^2 of the estimand where a closed form is known (THEORY.md facts 3-4, fact 7 at p = 1);
// for score-var, the exact Var(s_ij), i != j.
std::optional<double> exact_norm_sq(const PointSpec& point, Estimand estimand);

}  // namespace attncheck::monte_carlo
