#pragma once
// `attncheck bounds` as a function: Theorem 4.1 (claims C1, C2) checked on the survey's families, and the typed
// report the command line prints as a table and the Python package and `--json` as one object. Bad requests are
// theory::InputErrors with the command line's messages, which name options as the command line spells them.

#include "attncheck/exact/bounds_survey.hpp"
#include "attncheck/records/verdict.hpp"
#include "attncheck/theory/softmax.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace attncheck::exact {

// Ranges of the options both surveys of `bounds` take, shared by the command line's validators and the checks
// here.
inline constexpr int kMaxBoundsTrials = 1000000;
inline constexpr int kMaxSearchStarts = 100000;

// Checks --trials, --search-starts and --threads as both surveys take them; the thread count to run on
// (OpenMP's default for 0).
int check_survey_options(int trials, int search_starts, int threads);

struct BoundsRequest {
  std::optional<long long> n;         // --N; the rows of `input` when absent
  int trials = 8;                     // --trials
  int search_starts = 8;              // --search-starts
  std::vector<std::string> families;  // --family; all but the input when empty and no input is given
  std::string input;                  // --input FILE (.npy or CSV), empty for none
  std::uint64_t seed = 1;             // --seed
  int threads = 0;                    // --threads; 0: OpenMP's default
};

// One family's maxima as fractions of the papers' bounds and of the exact sup.
struct BoundsFamilyReport {
  FamilyResult result;
  double ratio_softmax = 0;        // max ||softmax(A)||_F / sqrt(N)
  double ratio_grad_paper = 0;     // max ||grad softmax(A)||_F / (2 sqrt(N))
  double ratio_grad_tight = 0;     // max ||grad softmax(A)||_F / (sqrt(N)/2)
  bool holds = true;               // both papers' bounds
  bool within_tight_bound = true;  // the exact sup sqrt(N)/2 (fact 2)
};

struct BoundsReport {
  theory::Index n = 0;
  theory::SoftmaxBounds bounds{};
  bool paper_bounds_hold = true;    // C1 and C2 on every family
  bool tight_bound_holds = true;    // the exact sup on every family
  double max_ratio_softmax = 0;     // the largest ratio_softmax
  double max_ratio_grad_tight = 0;  // the largest ratio_grad_tight
  double max_ratio_grad_paper = 0;  // the largest ratio_grad_paper
  bool softmax_bound_holds = true;  // C1 on every family
  bool grad_bound_holds = true;     // C2 (as stated, 2 sqrt(N)) on every family
  std::uint64_t seed = 1;
  int trials = 0;
  int threads = 0;                           // the threads run on
  std::string input;                         // --input, empty for none
  std::vector<BoundsFamilyReport> families;  // in the order run, the input last

  bool holds() const { return paper_bounds_hold && tight_bound_holds; }
};

// Sizes whose matrices would not fit in the available memory are refused before allocating.
BoundsReport run_bounds(const BoundsRequest& request);

// The verdicts of C1 and C2 (basis exact: every family's exact norms against the bound): tight when a family
// reaches the bound (C1: one-hot rows), holds when none exceeds it (C2: its exact sup is a quarter of it).
records::Verdict c1_verdict(const BoundsReport& report);
records::Verdict c2_verdict(const BoundsReport& report);

// The object `attncheck bounds --json` prints: N, holds, claims, verdicts (C1, C2), paper_bounds_hold,
// tight_bound_holds, the largest ratios, seed, trials, threads, input and every family's maxima, bounds, ratios,
// verdicts and worst matrices.
nlohmann::json to_json(const BoundsReport& report);

}  // namespace attncheck::exact
