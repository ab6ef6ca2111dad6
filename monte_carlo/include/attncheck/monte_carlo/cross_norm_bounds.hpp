#pragma once
// `attncheck bounds --cross-norm` as a function (claim C9, THEORY.md facts 10-11): the deterministic bounds of
// O = softmax(S) softmax_col(V) checked exactly (closed forms) on families of score and value matrices, on the
// user's matrices and on the worst case a search finds; and the mix alpha softmax_col(V) + (1 - alpha) V, whose
// output is unbounded in V for alpha < 1, shown along V = t V0. Random families draw from the Philox stream, so
// a (seed, family, trial) triple names one pair of matrices and results do not depend on the thread count.

#include <nlohmann/json.hpp>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace attncheck::monte_carlo {

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
// A bound counts as reached (verdict `tight`) when a family comes within this fraction of it.
inline constexpr double kTightFraction = 0.999;

// The family names, in table order ("input" excluded).
std::vector<std::string> cross_norm_family_names();

// The object `attncheck bounds --cross-norm --json` prints (documented in docs/results-format.md). Bad requests
// are theory::InputErrors naming the option or file and the bad value.
nlohmann::json run_cross_norm_bounds(const CrossNormBoundsRequest& request);

}  // namespace attncheck::monte_carlo
