#pragma once
// The matrix families on which `attncheck bounds` evaluates Theorem 4.1 exactly (closed forms of fact 1):
// random families are drawn from the Philox stream, so a (seed, family, trial) triple names one matrix.

#include "attncheck/theory/softmax.hpp"

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace attncheck::exact {

enum class BoundsFamily {
  gaussian_1e_3,  // i.i.d. N(0, (1e-3)^2) logits: nearly uniform rows
  gaussian_1,     // N(0, 1)
  gaussian_10,    // N(0, 10^2)
  gaussian_1e3,   // N(0, 1000^2): nearly one-hot rows
  near_one_hot,   // one logit per row 20 above N(0, 1) others
  two_equal_top,  // two equal top logits, the rest 40 below: the tight case of fact 2
  constant,       // constant rows: uniform softmax
  worst_case,     // gradient ascent on the logits from several random starts, for each norm
  input,          // the user's matrix
};

std::string family_name(BoundsFamily family);
// Accepts the names family_name gives; nullopt otherwise.
std::optional<BoundsFamily> parse_family(const std::string& name);
// Every family but `input`, in table order.
std::vector<BoundsFamily> default_families();
// The families `--family` names, in the order given; an InputError listing the known ones for any other name.
std::vector<BoundsFamily> requested_families(const std::vector<std::string>& names);

// What the worst matrix of a family looked like.
struct WorstMatrixSummary {
  int trial = 0;
  double min_logit = 0, max_logit = 0;            // finite extremes (-inf entries excluded)
  double worst_row_top1 = 0, worst_row_top2 = 0;  // two largest probabilities in the row with the largest Jacobian
  double worst_row_jacobian_sq = 0;               // that row's ||diag(s) - s s^T||_F^2 (sup 1/4)
};

struct FamilyResult {
  BoundsFamily family = BoundsFamily::gaussian_1;
  int trials = 0;
  double max_softmax_fro = 0;        // max over trials of ||softmax(A)||_F
  double max_grad_fro = 0;           // max over trials of ||grad softmax(A)||_F
  WorstMatrixSummary worst_softmax;  // the trial attaining max_softmax_fro
  WorstMatrixSummary worst_grad;     // the trial attaining max_grad_fro
};

// The worst-case searches' random starts cycle through these scales, so that both flat and peaked rows are
// explored.
inline constexpr std::array<double, 4> kSearchStartScales{1.0, 3.0, 0.1, 10.0};

struct SurveyOptions {
  theory::Index n = 256;
  int trials = 8;
  std::uint64_t seed = 1;
  int threads = 0;  // 0: OpenMP's default
  int search_starts = 8;
};

// Evaluates one family: `trials` matrices (the deterministic families use one), each N x N. Results do not
// depend on the thread count.
FamilyResult survey_family(BoundsFamily family, const SurveyOptions& options);

// Evaluates the user's matrix (rows x cols, N = rows).
FamilyResult survey_matrix(const theory::Matrix& logits);

// Bytes the survey holds at once for N x N matrices with this many threads (saturating, never wrapping); the
// CLI refuses sizes that do not fit in memory before allocating anything.
std::uint64_t survey_bytes(theory::Index n, int threads);

}  // namespace attncheck::exact
