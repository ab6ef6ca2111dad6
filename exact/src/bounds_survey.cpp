#include "attncheck/exact/bounds_survey.hpp"

#include "attncheck/exact/family_table.hpp"

#include "attncheck/records/memory_budget.hpp"
#include "attncheck/streams/parallel.hpp"
#include "attncheck/streams/random_stream.hpp"
#include "attncheck/theory/worst_case.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

namespace attncheck::exact {

using streams::derive_point_seed;
using streams::parallel_for;
using streams::PhiloxStream;
using streams::thread_count;
using theory::Index;
using theory::Matrix;

namespace {

constexpr FamilyTable kFamilies{std::array<NamedFamily<BoundsFamily>, 9>{{
    {BoundsFamily::gaussian_1e_3, "gaussian-1e-3"},
    {BoundsFamily::gaussian_1, "gaussian-1"},
    {BoundsFamily::gaussian_10, "gaussian-10"},
    {BoundsFamily::gaussian_1e3, "gaussian-1e3"},
    {BoundsFamily::near_one_hot, "near-one-hot"},
    {BoundsFamily::two_equal_top, "two-equal-top"},
    {BoundsFamily::constant, "constant"},
    {BoundsFamily::worst_case, "worst-case-search"},
    {BoundsFamily::input, "input"},
}}};

// Each family draws from its own stream; trial t is subsequence t of it.
PhiloxStream family_stream(std::uint64_t seed, BoundsFamily family, std::uint64_t trial) {
  return PhiloxStream(derive_point_seed(seed, static_cast<std::uint64_t>(family)), trial);
}

Index uniform_index(PhiloxStream& stream, Index n) {
  return static_cast<Index>(stream.next_block()[0] % static_cast<std::uint32_t>(n));
}

Matrix gaussian_matrix(PhiloxStream& stream, Index n, double sd) {
  Matrix logits(n, n);
  stream.fill_normal(logits.data(), logits.data() + logits.size(), sd);
  return logits;
}

Matrix make_matrix(BoundsFamily family, Index n, std::uint64_t seed, int trial) {
  PhiloxStream stream = family_stream(seed, family, static_cast<std::uint64_t>(trial));
  switch (family) {
    case BoundsFamily::gaussian_1e_3: return gaussian_matrix(stream, n, 1e-3);
    case BoundsFamily::gaussian_1: return gaussian_matrix(stream, n, 1);
    case BoundsFamily::gaussian_10: return gaussian_matrix(stream, n, 10);
    case BoundsFamily::gaussian_1e3: return gaussian_matrix(stream, n, 1e3);
    case BoundsFamily::near_one_hot: {
      Matrix logits = gaussian_matrix(stream, n, 1);
      for (Index i = 0; i < n; ++i) logits(i, uniform_index(stream, n)) = 20;
      return logits;
    }
    case BoundsFamily::two_equal_top: {
      // 40 below: the other N - 2 entries carry mass ~ N e^-40, invisible at N <= 1e6.
      Matrix logits = gaussian_matrix(stream, n, 1).array() - 40;
      for (Index i = 0; i < n; ++i) {
        const Index first = uniform_index(stream, n);
        const Index second = n == 1 ? first : (first + 1 + uniform_index(stream, n - 1)) % n;
        logits(i, first) = 0;
        logits(i, second) = 0;
      }
      return logits;
    }
    case BoundsFamily::constant: {
      Matrix logits(n, n);
      std::vector<double> levels(static_cast<std::size_t>(n));
      stream.fill_normal(levels.begin(), levels.end(), 10);
      for (Index i = 0; i < n; ++i) logits.row(i).setConstant(levels[static_cast<std::size_t>(i)]);
      return logits;
    }
    case BoundsFamily::worst_case:
    case BoundsFamily::input: break;
  }
  throw theory::InputError("internal: family " + family_name(family) + " has no generator");
}

WorstMatrixSummary summarize(const Matrix& logits, const theory::SoftmaxNorms& norms, int trial) {
  WorstMatrixSummary summary;
  summary.trial = trial;
  summary.min_logit = std::numeric_limits<double>::infinity();
  summary.max_logit = -std::numeric_limits<double>::infinity();
  for (Index k = 0; k < logits.size(); ++k) {
    const double z = logits.data()[k];
    if (!std::isfinite(z)) continue;
    summary.min_logit = std::min(summary.min_logit, z);
    summary.max_logit = std::max(summary.max_logit, z);
  }
  std::vector<double> row(static_cast<std::size_t>(logits.cols()));
  theory::softmax_row({logits.row(norms.worst_row).data(), row.size()}, row, norms.worst_row);
  std::partial_sort(row.begin(), row.begin() + std::min<std::size_t>(2, row.size()), row.end(), std::greater<>());
  summary.worst_row_top1 = row[0];
  summary.worst_row_top2 = row.size() > 1 ? row[1] : 0.0;
  summary.worst_row_jacobian_sq = norms.max_row_jacobian_sq;
  return summary;
}

struct TrialResult {
  theory::SoftmaxNorms norms;
  WorstMatrixSummary summary;
};

TrialResult evaluate_trial(const Matrix& logits, int trial) {
  const theory::SoftmaxNorms norms = theory::softmax_norms(logits);
  return {norms, summarize(logits, norms, trial)};
}

FamilyResult reduce(BoundsFamily family, const std::vector<TrialResult>& trials) {
  FamilyResult out;
  out.family = family;
  out.trials = static_cast<int>(trials.size());
  for (std::size_t t = 0; t < trials.size(); ++t) {
    if (t == 0 || trials[t].norms.softmax_fro > out.max_softmax_fro) {
      out.max_softmax_fro = trials[t].norms.softmax_fro;
      out.worst_softmax = trials[t].summary;
    }
    if (t == 0 || trials[t].norms.grad_fro > out.max_grad_fro) {
      out.max_grad_fro = trials[t].norms.grad_fro;
      out.worst_grad = trials[t].summary;
    }
  }
  return out;
}

// The best row found from `starts` random starts, repeated N times: both norms are sums of per-row terms, so
// that matrix maximizes the objective among matrices built from the rows the search visited.
Matrix worst_case_matrix(theory::RowObjective objective, const SurveyOptions& options) {
  const Index n = options.n;
  std::vector<theory::RowSearchResult> results(static_cast<std::size_t>(options.search_starts));
  parallel_for(options.search_starts, thread_count(options.threads), [&](Index k) {
    const int start = static_cast<int>(k);
    PhiloxStream stream =
        family_stream(options.seed, BoundsFamily::worst_case,
                      static_cast<std::uint64_t>(start) * 2 + (objective == theory::RowObjective::jacobian_sq ? 1 : 0));
    std::vector<double> row(static_cast<std::size_t>(n));
    stream.fill_normal(row.begin(), row.end(),
                       kSearchStartScales[static_cast<std::size_t>(start) % kSearchStartScales.size()]);
    results[static_cast<std::size_t>(start)] = theory::maximize_row(objective, std::move(row));
  });
  const auto best = std::max_element(results.begin(), results.end(),
                                     [](const auto& a, const auto& b) { return a.objective < b.objective; });
  Matrix logits(n, n);
  for (Index i = 0; i < n; ++i) {
    logits.row(i) = Eigen::Map<const Eigen::RowVectorXd>(best->logits.data(), n);
  }
  return logits;
}

}  // namespace

std::string family_name(BoundsFamily family) { return kFamilies.name(family); }

std::optional<BoundsFamily> parse_family(const std::string& name) { return kFamilies.parse(name); }

std::vector<BoundsFamily> default_families() { return kFamilies.surveyed(); }

std::vector<BoundsFamily> requested_families(const std::vector<std::string>& names) {
  return kFamilies.requested(names);
}

std::uint64_t survey_bytes(Index n, int threads) {
  const auto rows = static_cast<std::uint64_t>(std::max<Index>(n, 0));
  return records::saturating_sum(
      {records::saturating_product({rows, rows, sizeof(double), static_cast<std::uint64_t>(std::max(threads, 1))}),
       records::saturating_product({rows, 64, sizeof(double)})});
}

FamilyResult survey_family(BoundsFamily family, const SurveyOptions& options) {
  if (options.n < 1) throw theory::InputError("N must be >= 1");
  if (family == BoundsFamily::input) throw theory::InputError("the input family needs a matrix: use survey_matrix");
  if (family == BoundsFamily::worst_case) {
    std::vector<TrialResult> trials;
    const auto objectives = {theory::RowObjective::softmax_sq, theory::RowObjective::jacobian_sq};
    int index = 0;
    for (const theory::RowObjective objective : objectives) {
      trials.push_back(evaluate_trial(worst_case_matrix(objective, options), index++));
    }
    FamilyResult out = reduce(family, trials);
    out.trials = options.search_starts;
    return out;
  }
  const int trial_count = options.trials;
  std::vector<TrialResult> trials(static_cast<std::size_t>(trial_count));
  parallel_for(trial_count, thread_count(options.threads), [&](Index k) {
    const int trial = static_cast<int>(k);
    trials[static_cast<std::size_t>(trial)] =
        evaluate_trial(make_matrix(family, options.n, options.seed, trial), trial);
  });
  return reduce(family, trials);
}

FamilyResult survey_matrix(const Matrix& logits) { return reduce(BoundsFamily::input, {evaluate_trial(logits, 0)}); }

}  // namespace attncheck::exact
