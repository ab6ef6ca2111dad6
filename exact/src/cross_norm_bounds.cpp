#include "attncheck/exact/cross_norm_bounds.hpp"

#include "attncheck/exact/bounds.hpp"
#include "attncheck/exact/family_table.hpp"
#include "attncheck/records/matrix_io.hpp"
#include "attncheck/records/memory_budget.hpp"
#include "attncheck/records/option_ranges.hpp"
#include "attncheck/streams/parallel.hpp"
#include "attncheck/streams/random_stream.hpp"
#include "attncheck/theory/bound_check.hpp"
#include "attncheck/theory/cross_norm.hpp"
#include "attncheck/theory/worst_case.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace attncheck::exact {

using nlohmann::json;
using streams::derive_point_seed;
using streams::parallel_for;
using streams::PhiloxStream;
using theory::Index;
using theory::InputError;
using theory::kBoundRoundingSlack;
using theory::Matrix;
using theory::within;

namespace {

using Family = CrossNormFamily;

constexpr FamilyTable kFamilies{std::array<NamedFamily<Family>, 11>{{
    {Family::gaussian_1e_3, "gaussian-1e-3"},
    {Family::gaussian_1, "gaussian-1"},
    {Family::gaussian_10, "gaussian-10"},
    {Family::gaussian_1e3, "gaussian-1e3"},
    {Family::uniform, "uniform"},
    {Family::one_hot, "one-hot"},
    {Family::tight_values, "tight-values"},
    {Family::tight_scores, "tight-scores"},
    {Family::near_tight, "near-tight"},
    {Family::worst_case, "worst-case-search"},
    {Family::input, "input"},
}}};

constexpr std::array<const char*, kCrossNormQuantities> kQuantityNames{"||softmax_col(V)||_F",
                                                                       "||d softmax_col(V)/dV||_F", "||O||_F",
                                                                       "||dO/dV||_F", "||dO/dS||_F"};
constexpr std::array<const char*, kCrossNormQuantities> kBoundFormulas{"sqrt(d_v)", "sqrt(d_v)/2", "sqrt(N d_v)",
                                                                       "sqrt(N d_v / 8)", "sqrt(N d_v / 8)"};
using Norms = CrossNormValues;

Norms bound_values(Index n, Index dv) {
  const theory::CrossNormBounds b = theory::cross_norm_bounds(n, dv);
  return {b.column_softmax, b.column_grad, b.output, b.grad_values, b.grad_scores};
}

Norms evaluate(const Matrix& scores, const Matrix& values) {
  const theory::ColumnSoftmaxNorms column = theory::column_softmax_norms(values);
  const theory::CrossNormNorms cross = theory::cross_norm_norms_from_scores(scores, values, 1.0);
  return {column.softmax_fro, column.grad_fro, cross.output_fro, cross.grad_values_fro, cross.grad_scores_fro};
}

struct MatrixPair {
  Matrix scores, values;
};

// Separate streams from `attncheck bounds`'s C1/C2 families: the same seed names unrelated matrices there.
constexpr std::uint64_t kStreamOffset = 1000;
constexpr std::uint64_t kMixStream = kStreamOffset + 100;
PhiloxStream family_stream(std::uint64_t seed, Family family, std::uint64_t trial) {
  return PhiloxStream(derive_point_seed(seed, kStreamOffset + static_cast<std::uint64_t>(family)), trial);
}

Matrix gaussian(PhiloxStream& stream, Index rows, Index cols, double sd) {
  Matrix m(rows, cols);
  stream.fill_normal(m.data(), m.data() + m.size(), sd);
  return m;
}

// Logit gap that makes a softmax entry exactly 0 in double precision (exp(-800) underflows), so the tight
// constructions sit on the sup itself, not near it.
constexpr double kUnderflowGap = 800;
// The near-tight family's gap: the other entries keep mass about N e^-12, so the ratios approach 1 from below.
constexpr double kNearTightGap = 12;

enum class Construction { output, values, scores };

// Fact 11's three tight constructions. Scores: every row of A one-hot on token 0 (output, values) or halved
// between tokens 0 and 1 (scores). Values: every column of P one-hot on token 0 (output, scores) or halved
// between tokens 0 and 1 (values; also the tight case of fact 10's Jacobian bound). `low` is the logit of the
// other tokens; `noise` is added to them (near-tight).
MatrixPair construction(Construction kind, Index n, Index dv, double low, PhiloxStream* noise) {
  MatrixPair pair{Matrix::Constant(n, n, -low), Matrix::Constant(n, dv, -low)};
  if (noise) {
    pair.scores += gaussian(*noise, n, n, 1.0);
    pair.values += gaussian(*noise, n, dv, 1.0);
  }
  const Index second = std::min<Index>(1, n - 1);
  pair.scores.col(0).setZero();
  if (kind == Construction::scores) pair.scores.col(second).setZero();
  pair.values.row(0).setZero();
  if (kind == Construction::values) pair.values.row(second).setZero();
  return pair;
}

MatrixPair make_pair(Family family, Index n, Index dv, std::uint64_t seed, int trial) {
  PhiloxStream stream = family_stream(seed, family, static_cast<std::uint64_t>(trial));
  const auto iid = [&](double sd) {
    Matrix scores = gaussian(stream, n, n, sd);
    return MatrixPair{std::move(scores), gaussian(stream, n, dv, sd)};
  };
  switch (family) {
    case Family::gaussian_1e_3: return iid(1e-3);
    case Family::gaussian_1: return iid(1);
    case Family::gaussian_10: return iid(10);
    case Family::gaussian_1e3: return iid(1e3);
    case Family::uniform: {
      // Constant rows of S and constant columns of V at random levels: A and P uniform.
      const Matrix levels = gaussian(stream, 1, n + dv, 10);
      MatrixPair pair{Matrix(n, n), Matrix(n, dv)};
      for (Index i = 0; i < n; ++i) pair.scores.row(i).setConstant(levels(0, i));
      for (Index k = 0; k < dv; ++k) pair.values.col(k).setConstant(levels(0, n + k));
      return pair;
    }
    case Family::one_hot: return construction(Construction::output, n, dv, kUnderflowGap, nullptr);
    case Family::tight_values: return construction(Construction::values, n, dv, kUnderflowGap, nullptr);
    case Family::tight_scores: return construction(Construction::scores, n, dv, kUnderflowGap, nullptr);
    case Family::near_tight: return construction(static_cast<Construction>(trial % 3), n, dv, kNearTightGap, &stream);
    case Family::worst_case:
    case Family::input: break;
  }
  throw InputError("internal: family " + kFamilies.name(family) + " has no generator");
}

CrossNormFamilyReport reduce(Family family, const std::vector<Norms>& trials) {
  CrossNormFamilyReport out;
  out.family = family;
  out.trials = static_cast<int>(trials.size());
  for (std::size_t t = 0; t < trials.size(); ++t) {
    for (std::size_t q = 0; q < kCrossNormQuantities; ++q) {
      if (t == 0 || trials[t][q] > out.max[q]) {
        out.max[q] = trials[t][q];
        out.worst_trial[q] = static_cast<int>(t);
      }
    }
  }
  return out;
}

// Both Jacobian norms are sums of one term per (row, column) pair, so the best pair found, repeated over every row
// of S and every column of V, is the worst matrix pair among those the search visited.
CrossNormFamilyReport search_worst_case(Index n, Index dv, std::uint64_t seed, int starts, int threads) {
  std::vector<Norms> trials;
  CrossNormSearch search;
  for (const auto term : {theory::CrossNormTerm::grad_values, theory::CrossNormTerm::grad_scores}) {
    const bool values_term = term == theory::CrossNormTerm::grad_values;
    std::vector<theory::PairSearchResult> results(static_cast<std::size_t>(starts));
    parallel_for(starts, threads, [&](Index k) {
      const auto start = static_cast<std::uint64_t>(k) * 2 + (values_term ? 1 : 0);
      PhiloxStream stream = family_stream(seed, Family::worst_case, start);
      const double scale = kSearchStartScales[static_cast<std::size_t>(k) % kSearchStartScales.size()];
      std::vector<double> score_logits(static_cast<std::size_t>(n)), value_logits(static_cast<std::size_t>(n));
      stream.fill_normal(score_logits.begin(), score_logits.end(), scale);
      stream.fill_normal(value_logits.begin(), value_logits.end(), scale);
      results[static_cast<std::size_t>(k)] =
          theory::maximize_cross_norm_term(term, std::move(score_logits), std::move(value_logits));
    });
    const auto best = std::max_element(results.begin(), results.end(),
                                       [](const auto& a, const auto& b) { return a.objective < b.objective; });
    MatrixPair pair{Matrix(n, n), Matrix(n, dv)};
    const Eigen::Map<const Eigen::VectorXd> score_row(best->score_logits.data(), n);
    const Eigen::Map<const Eigen::VectorXd> value_column(best->value_logits.data(), n);
    for (Index i = 0; i < n; ++i) pair.scores.row(i) = score_row.transpose();
    for (Index k = 0; k < dv; ++k) pair.values.col(k) = value_column;
    trials.push_back(evaluate(pair.scores, pair.values));
    (values_term ? search.grad_values_term : search.grad_scores_term) =
        TermSearch{best->objective,
                   theory::kCrossNormTermSqSup,
                   best->objective / theory::kCrossNormTermSqSup,
                   within(best->objective, theory::kCrossNormTermSqSup),
                   starts,
                   best->iterations};
  }
  CrossNormFamilyReport out = reduce(Family::worst_case, trials);
  out.trials = starts;
  out.search = search;
  return out;
}

Matrix read_input(const std::string& path, const std::string& what) {
  try {
    return records::read_matrix(path, records::memory_budget_bytes());
  } catch (const InputError& e) {
    throw InputError(fmt::format("{} {}", what, e.what()));
  }
}

// Every entry of the user's values must be finite (column_softmax says so too, but naming the file and option).
void require_finite(const Matrix& m, const std::string& option, const std::string& path) {
  for (Index j = 0; j < m.rows(); ++j) {
    for (Index k = 0; k < m.cols(); ++k) {
      if (!std::isfinite(m(j, k))) {
        throw InputError(fmt::format("{} {}: entry [{}][{}] (0-based) is {}: values must be finite numbers", option,
                                     path, j, k, m(j, k)));
      }
    }
  }
}

MixReport mix_section(double alpha, const Matrix& scores, const Matrix& direction, Index n, Index dv) {
  const theory::CrossNormBounds b = theory::cross_norm_bounds(n, dv);
  MixReport out;
  out.alpha = alpha;
  // ||dO/dV|| = ||alpha J_P + (1 - alpha) (A x I)||_F, and ||A x I||_F = sqrt(d_v) ||A||_F <= sqrt(N d_v).
  out.grad_values_bound = alpha * b.grad_values + (1 - alpha) * b.output;
  std::vector<theory::CrossNormNorms> at;
  for (double t : kMixGrowthScales) {
    at.push_back(theory::cross_norm_norms_from_scores(scores, t * direction, alpha));
    out.growth.push_back({t, at.back().output_fro, at.back().grad_values_fro, at.back().grad_scores_fro});
  }
  const auto& last = at.back();
  const auto& before = at[at.size() - 2];
  out.bounded = alpha == 1;
  for (const auto& norms : at) {
    out.max_ratio_grad_values = std::max(out.max_ratio_grad_values, norms.grad_values_fro / out.grad_values_bound);
    out.holds = out.holds && within(norms.grad_values_fro, out.grad_values_bound);
    if (out.bounded) {
      out.holds = out.holds && within(norms.output_fro, b.output) && within(norms.grad_scores_fro, b.grad_scores);
    }
  }
  if (out.bounded) {
    out.output_bound = b.output;
    out.grad_scores_bound = b.grad_scores;
  }
  const auto growth_of = [&](double a, double z) { return z == 0 ? 0.0 : a / z; };
  const double from_t = kMixGrowthScales[kMixGrowthScales.size() - 2], to_t = kMixGrowthScales.back();
  out.last_step = {from_t,
                   to_t,
                   to_t / from_t,
                   growth_of(last.output_fro, before.output_fro),
                   growth_of(last.grad_values_fro, before.grad_values_fro),
                   growth_of(last.grad_scores_fro, before.grad_scores_fro)};
  return out;
}

json norms_json(const Norms& norms) {
  json out = json::object();
  for (std::size_t q = 0; q < kCrossNormQuantities; ++q) out[kCrossNormKeys[q]] = norms[q];
  return out;
}

json term_json(const TermSearch& term) {
  return {{"best", term.best},     {"sup", term.sup},
          {"ratio", term.ratio},   {"within_sup", term.within_sup},
          {"starts", term.starts}, {"iterations", term.iterations}};
}

json mix_json(const MixReport& mix) {
  json growth = json::array();
  for (const MixGrowth& g : mix.growth) {
    growth.push_back({{"t", g.t},
                      {"output_fro", g.output_fro},
                      {"grad_values_fro", g.grad_values_fro},
                      {"grad_scores_fro", g.grad_scores_fro}});
  }
  const MixLastStep& step = mix.last_step;
  const auto optional = [](const std::optional<double>& value) { return value ? json(*value) : json(nullptr); };
  return {{"alpha", mix.alpha},
          {"family", "V = t V0, S and V0 i.i.d. N(0, 1)"},
          {"growth", growth},
          {"growth_last_step",
           {{"from_t", step.from_t},
            {"to_t", step.to_t},
            {"t_ratio", step.t_ratio},
            {"output", step.output},
            {"grad_values", step.grad_values},
            {"grad_scores", step.grad_scores}}},
          {"output", mix.bounded ? "bounded" : "unbounded"},
          {"grad_scores", mix.bounded ? "bounded" : "unbounded"},
          {"grad_values", "bounded"},
          {"output_bound", optional(mix.output_bound)},
          {"grad_scores_bound", optional(mix.grad_scores_bound)},
          {"grad_values_bound", mix.grad_values_bound},
          {"grad_values_bound_formula", kMixGradValuesBoundFormula},
          {"max_ratio_grad_values", mix.max_ratio_grad_values},
          {"holds", mix.holds}};
}

}  // namespace

std::string family_name(CrossNormFamily family) { return kFamilies.name(family); }

std::vector<CrossNormFamily> default_cross_norm_families() { return kFamilies.surveyed(); }

std::string cross_norm_statement(std::size_t q) {
  return fmt::format("{} <= {}", kQuantityNames[q], kBoundFormulas[q]);
}

CrossNormReport run_cross_norm_bounds(const CrossNormBoundsRequest& request) {
  if (request.n) records::check_integer("--N", *request.n, 1, INT64_MAX);
  if (request.dv) records::check_integer("--dv", *request.dv, 1, kMaxValueDim);
  const int threads = check_survey_options(request.trials, request.search_starts, request.threads);
  const std::vector<double> alphas = records::parse_real_list(request.mix, "--mix");
  for (double alpha : alphas) records::check_real("--mix", alpha, records::RealRange{0, 1});
  std::optional<Matrix> scores_in, values_in;
  if (!request.scores_input.empty()) scores_in = read_input(request.scores_input, "--input");
  if (!request.values_input.empty()) values_in = read_input(request.values_input, "--values");
  if (!request.n && !scores_in && !values_in) {
    throw InputError("give the token count with --N, or matrices with --input SCORES and/or --values V");
  }
  Index n = request.n ? static_cast<Index>(*request.n) : scores_in ? scores_in->rows() : values_in->rows();
  if (scores_in) {
    if (scores_in->rows() != scores_in->cols()) {
      throw InputError(fmt::format("--input {} is {} x {}: the scores must be square (N x N)", request.scores_input,
                                   scores_in->rows(), scores_in->cols()));
    }
    if (scores_in->rows() != n) {
      throw InputError(fmt::format("--N {} disagrees with --input {}, which is {} x {}", n, request.scores_input,
                                   scores_in->rows(), scores_in->cols()));
    }
  }
  if (values_in) {
    if (values_in->rows() != n) {
      throw InputError(fmt::format("shape mismatch: --values {} has {} rows (tokens), but N = {}{}",
                                   request.values_input, values_in->rows(), n,
                                   scores_in   ? fmt::format(" (--input {} is {} x {})", request.scores_input, n, n)
                                   : request.n ? " (--N)"
                                               : ""));
    }
    if (request.dv && *request.dv != values_in->cols()) {
      throw InputError(fmt::format("--dv {} disagrees with --values {}, which has {} columns", *request.dv,
                                   request.values_input, values_in->cols()));
    }
    require_finite(*values_in, "--values", request.values_input);
  }
  const Index dv = values_in ? values_in->cols() : static_cast<Index>(request.dv.value_or(kDefaultValueDim));

  std::vector<Family> families = kFamilies.requested(request.families);
  const bool has_input = scores_in || values_in;
  if (request.families.empty() && !has_input) families = kFamilies.surveyed();
  // A pair of matrices and the routines' temporaries (A, P, the mix, O) per thread, and the mix's growth family.
  const auto nn = static_cast<std::uint64_t>(n), ndv = static_cast<std::uint64_t>(dv);
  const std::uint64_t per_pair = records::saturating_sum({records::saturating_product({nn, nn, 2 * sizeof(double)}),
                                                          records::saturating_product({nn, ndv, 6 * sizeof(double)})});
  records::require_memory(records::saturating_product({per_pair, static_cast<std::uint64_t>(threads) + 1}),
                          fmt::format("--N {} --dv {}: {} x {} scores and {} x {} values held by {} threads", n, dv, n,
                                      n, n, dv, threads),
                          "; use a smaller N or d_v, or fewer --threads");

  CrossNormReport report;
  report.n = n;
  report.dv = dv;
  std::vector<CrossNormFamilyReport>& results = report.families;
  for (const Family family : families) {
    if (family == Family::worst_case) {
      results.push_back(search_worst_case(n, dv, request.seed, request.search_starts, threads));
      continue;
    }
    const bool deterministic =
        family == Family::one_hot || family == Family::tight_values || family == Family::tight_scores;
    // near-tight cycles through the three constructions: three trials at least, so each one is represented.
    const int count = deterministic ? 1 : family == Family::near_tight ? std::max(3, request.trials) : request.trials;
    std::vector<Norms> trials(static_cast<std::size_t>(count));
    parallel_for(count, threads, [&](Index k) {
      const MatrixPair pair = make_pair(family, n, dv, request.seed, static_cast<int>(k));
      trials[static_cast<std::size_t>(k)] = evaluate(pair.scores, pair.values);
    });
    results.push_back(reduce(family, trials));
  }
  if (has_input) {
    // A missing half is taken uniform: zero scores (every row of A uniform) or zero values (every column of P).
    const Matrix scores = scores_in ? *scores_in : Matrix::Zero(n, n);
    const Matrix values = values_in ? *values_in : Matrix::Zero(n, dv);
    try {
      results.push_back(reduce(Family::input, {evaluate(scores, values)}));
    } catch (const InputError& e) {
      const std::string files = scores_in && values_in ? fmt::format("--input {} with --values {}",
                                                                     request.scores_input, request.values_input)
                                : scores_in            ? fmt::format("--input {}", request.scores_input)
                                                       : fmt::format("--values {}", request.values_input);
      throw InputError(fmt::format("{}: {}", files, e.what()));
    }
  }

  report.bounds = bound_values(n, dv);
  std::array<std::optional<Family>, kCrossNormQuantities> largest_family{};
  for (auto& r : results) {
    for (std::size_t q = 0; q < kCrossNormQuantities; ++q) {
      r.ratio[q] = report.bounds[q] > 0 ? r.max[q] / report.bounds[q] : 0;
      r.holds = r.holds && within(r.max[q], report.bounds[q]);
      if (r.ratio[q] > report.max_ratio[q] || !largest_family[q]) {
        report.max_ratio[q] = r.ratio[q];
        largest_family[q] = r.family;
      }
    }
    report.holds = report.holds && r.holds;
  }
  for (std::size_t q = 0; q < kCrossNormQuantities; ++q) {
    CrossNormVerdict& v = report.verdicts[q];
    v.bound = report.bounds[q];
    v.largest_ratio = report.max_ratio[q];
    v.largest_in_family = largest_family[q];
    if (!results.empty()) {
      v.verdict = records::bound_verdict(v.largest_ratio, v.largest_ratio <= 1 + kBoundRoundingSlack);
    }
  }

  // The growth family for the mix: one fixed draw of scores and values, scaled.
  PhiloxStream stream(derive_point_seed(request.seed, kMixStream), 0);
  const Matrix scores = gaussian(stream, n, n, 1.0);
  const Matrix direction = gaussian(stream, n, dv, 1.0);
  for (double alpha : alphas) {
    report.mix.push_back(mix_section(alpha, scores, direction, n, dv));
    report.holds = report.holds && report.mix.back().holds;
  }
  report.seed = request.seed;
  report.trials = request.trials;
  report.search_starts = request.search_starts;
  report.threads = threads;
  report.scores_input = request.scores_input;
  report.values_input = request.values_input;
  return report;
}

json to_json(const CrossNormReport& report) {
  json families = json::array();
  for (const auto& r : report.families) {
    json entry = {{"family", family_name(r.family)},
                  {"trials", r.trials},
                  {"max", norms_json(r.max)},
                  {"ratio", norms_json(r.ratio)},
                  {"holds", r.holds}};
    json worst = json::object();
    for (std::size_t q = 0; q < kCrossNormQuantities; ++q) worst[kCrossNormKeys[q]] = r.worst_trial[q];
    entry["worst_trial"] = worst;
    if (r.search) {
      entry["search"] = {{"grad_values_term", term_json(r.search->grad_values_term)},
                         {"grad_scores_term", term_json(r.search->grad_scores_term)}};
    }
    families.push_back(std::move(entry));
  }
  json verdicts = json::array();
  for (std::size_t q = 0; q < kCrossNormQuantities; ++q) {
    const CrossNormVerdict& v = report.verdicts[q];
    verdicts.push_back(
        {{"quantity", kCrossNormKeys[q]},
         {"statement", cross_norm_statement(q)},
         {"bound", v.bound},
         {"largest_ratio", v.largest_ratio},
         {"largest_in_family", v.largest_in_family ? json(family_name(*v.largest_in_family)) : json(nullptr)},
         {"verdict", v.verdict ? json(records::to_string(*v.verdict)) : json(nullptr)},
         {"basis", records::to_string(records::Basis::exact)}});
  }
  json mix = json::array();
  for (const MixReport& m : report.mix) mix.push_back(mix_json(m));
  json formulas = json::object();
  for (std::size_t q = 0; q < kCrossNormQuantities; ++q) formulas[kCrossNormKeys[q]] = kBoundFormulas[q];
  const auto file = [](const std::string& path) { return path.empty() ? json(nullptr) : json(path); };
  return {{"claim", "C9"},
          {"statement", "O = softmax(S) softmax_col(V) (softmax(c K Q^T) softmax^T(V)), THEORY.md facts 10-11"},
          {"basis", records::to_string(records::Basis::exact)},
          {"N", report.n},
          {"d_v", report.dv},
          {"holds", report.holds},
          {"bounds", norms_json(report.bounds)},
          {"bound_formulas", formulas},
          {"max_ratio", norms_json(report.max_ratio)},
          {"verdicts", verdicts},
          {"tight_fraction", records::kTightFraction},
          {"families", families},
          {"mix", mix},
          {"seed", report.seed},
          {"trials", report.trials},
          {"search_starts", report.search_starts},
          {"threads", report.threads},
          {"input", file(report.scores_input)},
          {"values", file(report.values_input)}};
}

}  // namespace attncheck::exact
