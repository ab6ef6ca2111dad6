#pragma once
// `attncheck bounds --cross-norm` as a function (claim C9, THEORY.md facts 10-11): the deterministic bounds of
// O = softmax(S) softmax_col(V) checked exactly (closed forms) on families of score and value matrices, on the
// user's matrices and on the worst case a search finds; and the mix alpha softmax_col(V) + (1 - alpha) V, whose
// output is unbounded in V for alpha < 1, shown along V = t V0. Random families draw from the Philox stream, so
// a (seed, family, trial) triple names one pair of matrices and results do not depend on the thread count.

#include "attncheck/records/verdict.hpp"
#include "attncheck/theory/common.hpp"

#include <nlohmann/json.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace attncheck::exact {

enum class CrossNormFamily {
  gaussian_1e_3,  // scores and values i.i.d. N(0, (1e-3)^2)
  gaussian_1,     // N(0, 1)
  gaussian_10,    // N(0, 10^2)
  gaussian_1e3,   // N(0, 1000^2)
  uniform,        // constant rows of S and columns of V: A and P uniform
  one_hot,        // fact 11's construction reaching the bounds on ||O|| and ||P||
  tight_values,   // ... on ||dO/dV|| and ||dP/dV||
  tight_scores,   // ... on ||dO/dS||
  near_tight,     // the three constructions with a finite gap and noise: the bounds approached from below
  worst_case,     // ascent on one row of scores and one column of values, for each Jacobian term
  input,          // the user's matrices
};

std::string family_name(CrossNormFamily family);
// Every family but `input`, in table order.
std::vector<CrossNormFamily> default_cross_norm_families();

// The five norms of facts 10-11, in this order everywhere (JSON keys, bounds, table columns).
inline constexpr std::size_t kCrossNormQuantities = 5;
using CrossNormValues = std::array<double, kCrossNormQuantities>;
inline constexpr std::array<const char*, kCrossNormQuantities> kCrossNormKeys{"column_softmax_fro", "column_grad_fro",
                                                                              "output_fro", "grad_values_fro",
                                                                              "grad_scores_fro"};
// "||O||_F <= sqrt(N d_v)": the bound on quantity q as THEORY.md states it.
std::string cross_norm_statement(std::size_t q);

struct CrossNormBoundsRequest {
  std::optional<long long> n;         // --N; the rows of --input or --values when absent
  std::optional<long long> dv;        // --dv; the columns of --values when absent, else kDefaultValueDim
  int trials = 8;                     // --trials (random families)
  int search_starts = 8;              // --search-starts, per searched term
  std::vector<std::string> families;  // --family; every family when empty and no file is given
  std::string scores_input;           // --input FILE: N x N scores (A = softmax(S) row-wise), empty for none
  std::string values_input;           // --values FILE: N x d_v values, empty for none
  std::string mix = "1";              // --mix: the mix weights alpha in [0, 1], comma-separated
  std::uint64_t seed = 1;             // --seed
  int threads = 0;                    // --threads; 0: OpenMP's default
};

inline constexpr long long kDefaultValueDim = 64;
inline constexpr long long kMaxValueDim = 1 << 20;
// V = t V0 for these t shows the growth of the mix's norms (linear in t for alpha < 1).
inline constexpr std::array<double, 4> kMixGrowthScales{1, 10, 100, 1000};
// The mix's bound on ||dO/dV||_F, for every alpha (fact 11).
inline constexpr const char* kMixGradValuesBoundFormula = "alpha sqrt(N d_v / 8) + (1 - alpha) sqrt(N d_v)";

// The worst-case search's best value of one Jacobian term, against the term's sup 1/8 (fact 11).
struct TermSearch {
  double best = 0;
  double sup = 0;
  double ratio = 0;  // best / sup
  bool within_sup = true;
  int starts = 0;
  int iterations = 0;  // of the ascent that found `best`
};

struct CrossNormSearch {
  TermSearch grad_values_term, grad_scores_term;
};

struct CrossNormFamilyReport {
  CrossNormFamily family = CrossNormFamily::gaussian_1;
  int trials = 0;
  CrossNormValues max{};                                // the largest value of each quantity over the trials
  CrossNormValues ratio{};                              // max / bound
  std::array<int, kCrossNormQuantities> worst_trial{};  // the trial attaining each max
  bool holds = true;
  std::optional<CrossNormSearch> search;  // worst-case-search only
};

// One quantity's verdict over every family run.
struct CrossNormVerdict {
  double bound = 0;
  double largest_ratio = 0;
  std::optional<CrossNormFamily> largest_in_family;  // none without families
  std::optional<records::Verdict> verdict;           // none without families
};

struct MixGrowth {
  double t = 0;
  double output_fro = 0, grad_values_fro = 0, grad_scores_fro = 0;
};

// Each norm's ratio between the last two scales t.
struct MixLastStep {
  double from_t = 0, to_t = 0, t_ratio = 0;
  double output = 0, grad_values = 0, grad_scores = 0;
};

// One mix weight alpha along V = t V0.
struct MixReport {
  double alpha = 1;
  std::vector<MixGrowth> growth;  // one per kMixGrowthScales
  MixLastStep last_step;
  bool bounded = true;                                    // ||O||_F and ||dO/dS||_F are bounded in V (alpha = 1 only)
  std::optional<double> output_bound, grad_scores_bound;  // when bounded
  double grad_values_bound = 0;  // alpha sqrt(N d_v / 8) + (1 - alpha) sqrt(N d_v), for every alpha
  double max_ratio_grad_values = 0;
  bool holds = true;
};

struct CrossNormReport {
  theory::Index n = 0, dv = 0;
  bool holds = true;  // every bound checked, the mix's included
  CrossNormValues bounds{};
  CrossNormValues max_ratio{};  // the largest ratio over the families
  std::array<CrossNormVerdict, kCrossNormQuantities> verdicts{};
  std::vector<CrossNormFamilyReport> families;  // in the order run, the input last
  std::vector<MixReport> mix;                   // one per --mix value
  std::uint64_t seed = 1;
  int trials = 0, search_starts = 0;
  int threads = 0;                         // the threads run on
  std::string scores_input, values_input;  // --input and --values, empty for none
};

// Bad requests are theory::InputErrors naming the option or file and the bad value.
CrossNormReport run_cross_norm_bounds(const CrossNormBoundsRequest& request);

// The object `attncheck bounds --cross-norm --json` prints (docs/results-format.md).
nlohmann::json to_json(const CrossNormReport& report);

}  // namespace attncheck::exact
