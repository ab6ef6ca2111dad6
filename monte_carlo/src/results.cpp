#include "attncheck/monte_carlo/results.hpp"

#include "attncheck/monte_carlo/exact_references.hpp"
#include "attncheck/monte_carlo/fit.hpp"
#include "attncheck/monte_carlo/proved_bounds.hpp"
#include "attncheck/records/atomic_file.hpp"
#include "attncheck/records/errors.hpp"
#include "attncheck/records/folder_lock.hpp"
#include "attncheck/records/input_file.hpp"
#include "attncheck/records/json_output.hpp"
#include "attncheck/records/point_statistics.hpp"
#include "attncheck/records/results_folder.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

namespace attncheck::monte_carlo {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Columns of points.csv: the format's fields in its order, then the extras.
const std::vector<std::string> kCsvColumns{"claim",
                                           "reading",
                                           "phi",
                                           "p",
                                           "alpha",
                                           "scale",
                                           "inner",
                                           "formula",
                                           "N",
                                           "D",
                                           "d",
                                           "estimand",
                                           "samples",
                                           "mean",
                                           "se",
                                           "ci95_lo",
                                           "ci95_hi",
                                           "mean_sq",
                                           "se_sq",
                                           "exact_sq",
                                           "z_exact_sq",
                                           "jensen_bound",
                                           "se_reliable",
                                           "stopped_by",
                                           "sigma_x",
                                           "sigma_t",
                                           "seed",
                                           "run_seed",
                                           "backend",
                                           "threads",
                                           "wall_seconds",
                                           "claimed_exponent",
                                           "jensen_ratio",
                                           "key",
                                           "scores",
                                           "exact_mean",
                                           "z_exact_mean",
                                           "se_mean_reliable",
                                           "se_sq_reliable",
                                           "effective_samples",
                                           "effective_samples_sq",
                                           "se_sq_floor",
                                           "unreliable_because",
                                           "mix",
                                           "dv",
                                           "sample_max",
                                           "sample_bound"};

std::string csv_cell(const json& v) {
  if (v.is_null()) return "";
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    if (s.find_first_of(",\"\n") == std::string::npos) return s;
    std::string quoted = "\"";
    for (char c : s) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
    return quoted + "\"";
  }
  if (v.is_number_float()) return fmt::format("{:.17g}", v.get<double>());
  return v.dump();
}

}  // namespace

std::string record_key(const PointSpec& point, Estimand estimand, std::uint64_t run_seed, ScorePrecision precision) {
  const std::string key = records::resume_key(point.key, theory::term_of(estimand).word, run_seed);
  return precision == ScorePrecision::mixed ? key + ";precision=mixed" : key;
}

namespace {

// The map as the claims write it, or, for score-var, the variance it estimates under its score model.
std::string point_formula(const SweepPoint& pt, Estimand estimand) {
  using theory::ScoreModel;
  if (estimand == Estimand::score_var) {
    const std::string scale = pt.map.inner == 1 ? "" : fmt::format("{:g} ", pt.map.inner);
    switch (pt.scores) {
      case ScoreModel::unit_pairs: return fmt::format("Var({}q . k), q, k in R^d with i.i.d. N(0, 1) entries", scale);
      case ScoreModel::sign_coupled_pairs:
        return fmt::format("Var({}q . k), k in R^d with i.i.d. N(0, 1) entries, q_i = eps_i k_i (random signs)", scale);
      case ScoreModel::projected_layernorm: return fmt::format("Var({}LN(Q^T x_i) . LN(K^T x_j)), i != j", scale);
      case ScoreModel::projected: return fmt::format("Var({}q . k), q = Q^T x_i, k = K^T x_j, i != j", scale);
    }
  }
  if (pt.mix) {
    const std::string scale = fmt::format("{:g}", pt.map.inner);
    const std::string values = *pt.mix == 1   ? "softmax_col(V)"
                               : *pt.mix == 0 ? "V"
                                              : fmt::format("({:g} softmax_col(V) + {:g} V)", *pt.mix, 1 - *pt.mix);
    return fmt::format("O = softmax({} X W_Q W_K^T X^T) {}, V = X W_V (N x {})", scale, values, pt.dv);
  }
  const std::string map = theory::describe(pt.map, pt.d);
  return pt.scores == theory::ScoreModel::projected_layernorm ? map + " with qk-layernorm" : map;
}

bool is_norm(Estimand e) {
  return e == Estimand::value || e == Estimand::dQ || e == Estimand::dK || e == Estimand::dS || e == Estimand::dV;
}

// The second-moment estimate, its standard error widened to the exact floor of Var(||F||^2) where one is known:
// a sample variance below that floor has not yet met the tail that carries the variance.
MeanEstimate floored_second_moment(const MeanTracker& tracker, const std::optional<double>& variance_floor,
                                   std::optional<double>& floor_se) {
  MeanEstimate e = tracker.estimate();
  if (!variance_floor || e.samples < 2) return e;
  floor_se = std::sqrt(*variance_floor / static_cast<double>(e.samples));
  if (tracker.accumulator().variance() < *variance_floor) {
    e.se_reliable = false;
    e.unreliable_because =
        "the sample variance of ||F||^2 is below its exact lower bound (its tail is not yet sampled)";
  }
  if (*floor_se > e.se) {
    e.se = *floor_se;
    std::tie(e.ci_lo, e.ci_hi) = records::ci95_of(e.mean, e.se, e.samples);
  }
  return e;
}

}  // namespace

records::PointRecord point_record(const PointSpec& ps, Estimand estimand, const PointOutcome& outcome,
                                  const RunContext& context) {
  const SeriesSpec& series = *ps.series;
  const SweepPoint& pt = ps.point;
  const int k = static_cast<int>(estimand);
  const ExactMoments exact = exact_moments(ps, estimand);
  std::optional<double> floor_se;
  const MeanEstimate norm = outcome.norm[k].estimate();
  const MeanEstimate sq = floored_second_moment(outcome.norm_sq[k], exact.second_variance_floor, floor_se);
  records::PointRecord r;
  r.key.claim = series.claim;
  r.key.activation = series.activation;
  r.key.alpha = series.alpha;
  r.key.mix = pt.mix;
  if (pt.mix) r.key.dv = pt.dv;
  const SampleBounds bounds = sample_bounds(ps, estimand);
  r.sample_bound = bounds.upper;
  if (r.sample_bound) r.sample_max = outcome.largest[k];
  r.sample_lower_bound = bounds.lower;
  if (r.sample_lower_bound) r.sample_min = outcome.smallest[k];
  r.key.scale = series.outer.text;
  r.key.scores = pt.scores;
  r.inner = pt.map.inner;
  r.outer_factor = pt.map.outer.factor;
  r.formula = point_formula(pt, estimand);
  r.N = pt.N;
  r.key.D = pt.D;
  r.key.d = pt.d;
  r.key.estimand = estimand;
  r.samples = static_cast<long long>(outcome.samples);
  r.mean = norm.mean;
  r.se = norm.se;
  r.ci95_lo = norm.ci_lo;
  r.ci95_hi = norm.ci_hi;
  r.mean_sq = sq.mean;
  r.se_sq = sq.se;
  r.ci95_sq_lo = sq.ci_lo;
  r.ci95_sq_hi = sq.ci_hi;
  r.se_sq_floor = floor_se;
  r.exact_sq = exact.second;
  if (exact.second) r.z_exact_sq = records::z_score(sq.mean, sq.se, *exact.second);
  r.exact_mean = exact.mean;
  if (exact.mean) r.z_exact_mean = records::z_score(norm.mean, norm.se, *exact.mean);
  r.exact_out_of_range = exact.out_of_range;
  const bool norm_estimand = is_norm(estimand);
  if (exact.second && norm_estimand) r.jensen_bound = std::sqrt(*exact.second);
  if (exact.second && *exact.second > 0 && norm_estimand) r.jensen_ratio = norm.mean / std::sqrt(*exact.second);
  if (norm_estimand && sq.mean > 0) r.jensen_ratio_estimated = norm.mean / std::sqrt(sq.mean);
  // Order statistics need finite samples >= 0 (a NaN makes the extremes NaN, failing both comparisons).
  if (norm_estimand && outcome.samples > 0 && outcome.smallest[k] >= 0 && std::isfinite(outcome.largest[k])) {
    const auto n = outcome.norm[k].accumulator().count();
    r.mean_lower_bound =
        mean_lower_bound(n, norm.mean * static_cast<double>(n), outcome.top[k].values(), kMeanLowerBoundLevel);
    r.mean_lower_bound_level = kMeanLowerBoundLevel;
  }
  r.se_reliable = norm.se_reliable && sq.se_reliable;
  r.se_mean_reliable = norm.se_reliable;
  r.se_sq_reliable = sq.se_reliable;
  if (norm.unreliable_because) {
    r.unreliable_because = norm.unreliable_because;
  } else if (sq.unreliable_because) {
    r.unreliable_because = std::string(sq.unreliable_because) + " (second moment)";
  }
  r.effective_samples = norm.effective_samples;
  r.effective_samples_sq = sq.effective_samples;
  r.variance_relative_se = norm.variance_relative_se;
  r.variance_relative_se_sq = sq.variance_relative_se;
  r.se_plain = norm.plain_se;
  r.se_batch_means = norm.batch_se;
  r.stopped_by = outcome.stopped_by;
  r.key.sigma_x = pt.sigma_x;
  r.key.sigma_t = pt.sigma_t;
  r.seed = pt.seed;
  r.run_seed = context.run_seed;
  r.backend = context.backend;
  r.threads = context.threads;
  r.wall_seconds = outcome.wall_seconds;
  r.claimed_exponent = series.claimed_for(estimand);
  r.claim_form = series.claims_variance_equals_d ? "equality" : "exponent";
  if (series.claims_variance_equals_d) r.claimed_value = pt.map.inner * pt.map.inner * static_cast<double>(pt.d);
  r.exact_law = exact_law(ps, estimand);
  r.fit_variable = series.fit_over_d ? "d" : "N";
  r.fit_of = series.fit_over_d ? "mean_sq" : "mean";
  r.counts_for_exit = series.counts_for_exit_of(estimand);
  r.resume_id = record_key(ps, estimand, context.run_seed, context.precision);
  // Everything but the swept variable (N, or d for C8) and the sample count.
  r.series_id = fmt::format(
      "claim={};reading={};phi={};p={};alpha={};scale={};outer_factor={:.17g}*d^-{:g};inner={};D={};{};estimand={};"
      "sigma_x={:.17g};sigma_t={:.17g};run_seed={}{}{}{}",
      series.claim, theory::reading_of(series.activation).value_or("-"), theory::phi_identity(series.activation),
      series.activation.p, series.alpha ? fmt::format("{}", *series.alpha) : "-", series.outer.text,
      series.outer.factor, series.outer.d_exponent,
      series.inner.inverse_sqrt_d ? "1/sqrt(d)" : fmt::format("{:.17g}", series.inner.value), pt.D,
      series.fit_over_d ? fmt::format("N={}", pt.N) : fmt::format("d={}", pt.d), theory::term_of(estimand).word,
      pt.sigma_x, pt.sigma_t, context.run_seed,
      pt.scores == theory::ScoreModel::projected ? "" : fmt::format(";scores={}", theory::term_of(pt.scores).word),
      pt.mix ? fmt::format(";mix={:.17g};dv={}", *pt.mix, pt.dv) : "",
      context.precision == ScorePrecision::mixed ? ";precision=mixed" : "");
  return r;
}

namespace {

records::LocalExponentRecord local_exponent_record(const LocalExponent& e) {
  records::LocalExponentRecord r;
  r.window = e.window;
  if (!e.missing.empty()) r.missing = e.missing;
  if (e.window.size() >= 2) {
    r.exponent = e.exponent;
    r.sampling_half_width = kZ95 * e.se;
  }
  if (e.missing.empty()) {
    r.previous = e.previous;
    r.systematic = e.systematic;
    if (std::isfinite(e.lo) && std::isfinite(e.hi)) r.interval = std::make_pair(e.lo, e.hi);
  }
  r.unreliable_at = e.unreliable;
  for (const WindowExponent& w : e.windows) r.windows.push_back({w.first, w.last, w.exponent, kZ95 * w.se});
  r.climb_per_doubling = e.climb;
  r.climb_se = e.climb_se;
  if (e.missing.empty()) {
    r.rising = e.rising;
    if (e.disagreement > 0) r.disagreement = e.disagreement;
  }
  return r;
}

records::ViolationTestRecord violation_test_record(const ViolationTest& t) {
  return {t.x_small,        t.x_large,        t.upper_at_small, t.upper_exact ? "exact" : "estimate + z se",
          t.lower_at_large, t.exponent_lower, t.level,          t.passed};
}

bool is_row_sum(Estimand estimand) { return estimand == Estimand::row_sum || estimand == Estimand::row_mean; }

}  // namespace

int judged_points(const std::vector<records::PointRecord>& records) {
  int judged = 0;
  for (const records::PointRecord& r : records) {
    const bool row = is_row_sum(r.key.estimand);
    const auto& z = row ? r.z_exact_mean : r.z_exact_sq;
    if (z && (row ? r.mean_reliable() : r.sq_reliable())) ++judged;
  }
  return judged;
}

namespace {

// What each of C8's three models is, beside its verdict.
std::string c8_finding(theory::ScoreModel scores, std::optional<records::Verdict> verdict) {
  using theory::ScoreModel;
  if (scores == ScoreModel::unit_pairs)
    return "i.i.d. unit-variance entries (the proposition's intent): Var(q . k) = d_k exactly";
  if (scores == ScoreModel::sign_coupled_pairs) {
    return verdict == records::Verdict::violated
               ? "the proposition's hypothesis is insufficient: q_i = eps_i k_i has zero means, unit variances and "
                 "zero "
                 "covariances, yet Var(q . k) = 3 d_k (the terms eps_i k_i^2 are uncorrelated with E k^4 = 3)"
               : "";
  }
  if (scores == ScoreModel::projected) {
    return "the projected model q = Q^T x, k = K^T x' (a transformer at initialisation) is not the proposition's "
           "hypothesis: its entries are uncorrelated but not independent (they share x) and have variance "
           "D sigma_x^2 sigma_t^2, not 1; Var(q . k) = d_k Var(q_1) Var(k_1) exactly, linear in d_k";
  }
  return "";
}

}  // namespace

namespace {

// One point as evidence for the fit of `fit_of` ("mean": E||F|| or E[row sum]; "mean_sq": E||F||^2).
EvidencePoint evidence_point(const records::PointRecord& r, double x, const std::string& fit_of, bool row_sums) {
  const bool mean_ok = r.mean_reliable();
  const bool sq_ok = r.sq_reliable();
  const bool fits_mean = fit_of == "mean";
  EvidencePoint p;
  p.x = x;
  p.mean = fits_mean ? r.mean : r.mean_sq;
  p.se = fits_mean ? r.se : r.se_sq;
  p.mean_reliable = fits_mean ? mean_ok : sq_ok;
  const double m2 = r.mean_sq, m2_se = r.se_sq;
  p.root_mean_sq = m2 > 0 ? std::sqrt(m2) : NAN;
  p.root_mean_sq_se = m2 > 0 ? m2_se / (2 * std::sqrt(m2)) : NAN;
  p.sq_reliable = sq_ok;
  p.z_exact = row_sums ? r.z_exact_mean : r.z_exact_sq;
  p.z_judged = row_sums ? mean_ok : sq_ok;
  p.exact_value = r.exact_sq;
  p.claimed_value = r.claimed_value;
  p.sample_bound = r.sample_bound;
  // A NaN sample is stored as null: with a bound present it must fail the check, not skip it.
  if (p.sample_bound) p.sample_max = r.sample_max.value_or(INFINITY);
  p.sample_lower_bound = r.sample_lower_bound;
  if (p.sample_lower_bound) p.sample_min = r.sample_min.value_or(-INFINITY);
  if (fits_mean) {
    p.lower_bound = r.mean_lower_bound;
    p.lower_bound_level = r.mean_lower_bound_level;
    p.exact_upper = row_sums ? r.exact_mean : r.jensen_bound;
  }
  return p;
}

// The series' columns (its points' estimates and exact values, in x order) and what its first point says of it.
records::Series series_columns(const std::vector<const records::PointRecord*>& members, const std::string& series_id,
                               bool over_d, double tolerance) {
  const records::PointRecord& first = *members.front();
  records::Series s;
  bool all_reliable = true;
  for (const records::PointRecord* r : members) {
    s.N.push_back(r->N);
    s.d_values.push_back(r->key.d);
    s.mean.push_back(r->mean);
    s.se.push_back(r->se);
    s.mean_sq.push_back(r->mean_sq);
    s.se_sq.push_back(r->se_sq);
    s.exact_sq.push_back(r->exact_sq);
    s.exact_mean.push_back(r->exact_mean);
    all_reliable = all_reliable && r->se_reliable;
    // Jensen's ratio E||F|| / sqrt(E||F||^2) at the first and last point that has one, exact where known.
    if (!theory::term_of(first.key.estimand).norm) continue;
    const auto ratio = r->jensen_ratio ? r->jensen_ratio : r->jensen_ratio_estimated;
    if (!ratio) continue;
    if (!s.jensen_first) s.jensen_first = ratio;
    s.jensen_last = ratio;
    if (s.jensen_source.empty()) s.jensen_source = r->jensen_ratio ? "exact" : "estimated";
  }
  s.key = first.key;
  s.claimed_exponent = first.claimed_exponent;
  s.claims_value = first.claim_form == "equality";
  s.counts_for_exit = first.counts_for_exit;
  s.x_variable = first.fit_variable;
  s.fit_of = first.fit_of;
  s.run_seed = first.run_seed;
  s.formula = members.back()->formula;
  s.series_id = series_id;
  s.tolerance = tolerance;
  s.x = over_d ? s.d_values : s.N;
  s.se_reliable = all_reliable;
  return s;
}

// The log-log least-squares fit over every point: what the growth looks like, not what decides.
void add_global_fit(records::Series& s, const std::vector<EvidencePoint>& evidence) {
  std::vector<double> x, y, se;
  for (const EvidencePoint& p : evidence) {
    x.push_back(p.x);
    y.push_back(p.mean);
    se.push_back(p.se);
  }
  const auto fit = fit_log_log(x, y, se);
  if (!fit) return;
  s.slope = fit->slope;
  s.slope_ci = std::make_pair(fit->slope_ci_lo, fit->slope_ci_hi);
  s.slope_se = fit->slope_se;
  s.intercept = fit->intercept;
  s.reduced_chi_sq = fit->reduced_chi_sq;
  s.fit_points = fit->points;
}

// The checks of a closed form or deterministic bounds against the samples.
records::ExactCheckRecord exact_check_record(const Verdict& v, const std::optional<ExactLaw>& law, int family) {
  records::ExactCheckRecord exact;
  exact.law = law;
  exact.max_abs_z = v.exact_max_abs_z;
  exact.judged_points = v.exact_judged;
  exact.unjudged_points = v.exact_unjudged;
  exact.disagrees_at = v.exact_disagrees_at;
  exact.alarm_abs_z = v.alarm_abs_z;
  exact.family_points = family;
  exact.family_level = kAlarmFamilyLevel;
  exact.bound_checked_points = v.bound_checked;
  exact.max_sample_over_bound = v.max_sample_over_bound;
  exact.bound_exceeded_at = v.bound_exceeded_at;
  exact.min_sample_over_lower_bound = v.min_sample_over_lower_bound;
  exact.lower_bound_undercut_at = v.lower_bound_undercut_at;
  exact.confirmed = v.exact_disagrees_at.empty();
  return exact;
}

void add_verdict(records::Series& s, const Verdict& v, bool cross_check) {
  // A custom map states no exponent to check: no verdict, no basis.
  s.verdict = v.word;
  s.basis = v.basis;
  if (v.rule) s.verdict_rule = std::string(v.rule->definition);
  if (!v.reason.empty()) s.verdict_reason = v.reason;
  s.extend_to = v.extend_to;
  if (!v.to_settle.empty()) s.to_settle = v.to_settle;
  s.local_exponent = local_exponent_record(v.primary);
  if (cross_check) s.cross_check = local_exponent_record(v.cross_check);
  s.decided_by = v.decided_by;
  if (v.violation) s.violation_test = violation_test_record(*v.violation);
}

records::Series fit_one_series(std::vector<const records::PointRecord*> members, const std::string& series_id,
                               double tolerance, int family, double alarm) {
  const records::PointRecord& first = *members.front();
  const bool over_d = first.fit_variable == "d";
  const auto x_of = [&](const records::PointRecord& r) { return over_d ? r.key.d : r.N; };
  std::sort(members.begin(), members.end(),
            [&](const records::PointRecord* a, const records::PointRecord* b) { return x_of(*a) < x_of(*b); });
  records::Series s = series_columns(members, series_id, over_d, tolerance);
  const bool row_sums = is_row_sum(first.key.estimand);
  std::vector<EvidencePoint> evidence;
  for (const records::PointRecord* r : members) {
    evidence.push_back(evidence_point(*r, static_cast<double>(x_of(*r)), first.fit_of, row_sums));
  }
  add_global_fit(s, evidence);

  SeriesClaim claim;
  claim.exponent = first.claimed_exponent;
  claim.tolerance = tolerance;
  claim.cross_check = theory::term_of(first.key.estimand).norm && first.fit_of == "mean";
  claim.equality = s.claims_value;
  claim.x_name = over_d ? "d" : "N";
  claim.alarm_abs_z = alarm;
  const std::optional<ExactLaw>& law = first.exact_law;
  const std::optional<GrowthCase> growth = growth_case(first);
  s.proved_bounds = growth && !over_d ? proved_bounds(*growth) : std::vector<records::ProvedBound>{};
  const Verdict v = decide(evidence, law, s.proved_bounds, claim);
  add_verdict(s, v, claim.cross_check);
  if (law || v.bound_checked > 0) s.exact = exact_check_record(v, law, family);
  const std::string finding = s.key.claim == "C8" ? c8_finding(s.key.scores, v.word) : "";
  if (!finding.empty()) s.finding = finding;
  return s;
}

}  // namespace

std::vector<records::Series> fit_series(const std::vector<records::PointRecord>& records, double tolerance,
                                        std::optional<int> family_points) {
  std::vector<std::string> order;
  std::map<std::string, std::vector<const records::PointRecord*>> groups;
  for (const records::PointRecord& r : records) {
    if (!groups.count(r.series_id)) order.push_back(r.series_id);
    groups[r.series_id].push_back(&r);
  }
  const int family = family_points.value_or(judged_points(records));
  const double alarm = family_alarm_abs_z(family);
  std::vector<records::Series> out;
  for (const std::string& key : order) out.push_back(fit_one_series(groups[key], key, tolerance, family, alarm));
  return out;
}

RunVerdict run_verdict(const std::vector<records::Series>& series) {
  bool unsettled = false;
  for (const records::Series& s : series) {
    if (!s.counts_for_exit || !s.verdict) continue;
    if (*s.verdict == records::Verdict::violated) return RunVerdict::violated;
    if (!records::settles(*s.verdict)) unsettled = true;
  }
  return unsettled ? RunVerdict::unsettled : RunVerdict::holds;
}

namespace {

const char* const kPointsFile = "points.jsonl";
const char* const kCsvFile = "points.csv";
const char* const kFitsFile = "fits.json";

// The records of points.jsonl, one per key in order of first appearance, each the last line with that key.
// Every line is read by the records' one reader (docs/results-format.md), so that a damaged or foreign file
// stops a resumed run naming its line instead of failing somewhere inside the fit.
std::vector<records::PointRecord> read_points(const fs::path& file) {
  std::vector<records::PointRecord> records;
  std::map<std::string, std::size_t> index;
  for (records::PointRecord& record : records::parse_points_jsonl(records::read_text_file(file), file.string())) {
    if (record.resume_id.empty()) {
      throw theory::InputError(fmt::format("{} line {}: \"key\" is missing or empty: --resume matches points by it",
                                           file.string(), record.line));
    }
    const auto [at, added] = index.emplace(record.resume_id, records.size());
    if (added) {
      records.push_back(std::move(record));
    } else {
      records[at->second] = std::move(record);
    }
  }
  return records;
}

}  // namespace

ResultsWriter::ResultsWriter(fs::path dir, FolderStart start) : dir_(std::move(dir)) {
  std::error_code ec;
  // Something else in the folder's place is the user's to move (bad input); a refused mkdir is the file system's.
  if (!fs::exists(dir_, ec) || fs::is_directory(dir_, ec)) {
    fs::create_directories(dir_, ec);
    if (ec) throw records::IoError(fmt::format("--out {}: cannot create the folder ({})", dir_.string(), ec.message()));
  }
  if (!fs::is_directory(dir_, ec)) {
    throw theory::InputError(
        fmt::format("--out {}: cannot create the folder (a file of that name is in the way)", dir_.string()));
  }
  const records::FolderLock lock(dir_);
  for (const char* name : {kPointsFile, kCsvFile, kFitsFile}) records::remove_stale_temporaries(dir_ / name);
  reload();
  if (start == FolderStart::fresh && !records_.empty()) {
    throw theory::InputError(
        fmt::format("--out {}: the folder already holds {} finished points ({}); add to them "
                    "with --resume, or replace them with --force",
                    dir_.string(), records_.size(), (dir_ / kPointsFile).string()));
  }
  if (start == FolderStart::overwrite) {
    for (const char* name : {kPointsFile, kCsvFile, kFitsFile}) fs::remove(dir_ / name, ec);
    records_.clear();
    loaded_.reset();
  }
}

void ResultsWriter::reload() {
  const fs::path file = dir_ / kPointsFile;
  std::error_code absent;
  if (!fs::exists(file, absent)) {
    records_.clear();
    loaded_.reset();
    return;
  }
  const auto identity = records::file_identity(file);
  if (identity && loaded_ && *identity == *loaded_) return;
  records_ = read_points(file);
  loaded_ = identity;
}

std::optional<records::PointRecord> ResultsWriter::finished(const std::string& key) {
  reload();
  for (const records::PointRecord& r : records_) {
    if (r.resume_id == key) return r;
  }
  return std::nullopt;
}

const std::vector<records::PointRecord>& ResultsWriter::current_records() {
  reload();
  return records_;
}

std::optional<std::vector<records::PointRecord>> finished_records(const std::vector<records::PointRecord>& existing,
                                                                  const PointSpec& point, std::uint64_t run_seed,
                                                                  ScorePrecision precision) {
  std::vector<records::PointRecord> found;
  for (Estimand estimand : point.series->estimands) {
    const std::string key = record_key(point, estimand, run_seed, precision);
    const auto record = std::find_if(existing.begin(), existing.end(),
                                     [&](const records::PointRecord& r) { return r.resume_id == key; });
    if (record == existing.end()) return std::nullopt;
    // A record judged against another claim (a custom row-mean claim written before it was read as typed) is
    // sampled again, so that the points of one series never hold two claimed exponents.
    if (record->claimed_exponent != point.series->claimed_for(estimand)) return std::nullopt;
    found.push_back(*record);
  }
  return found;
}

void ResultsWriter::append(const std::vector<records::PointRecord>& records) {
  const records::FolderLock lock(dir_);
  reload();
  for (const records::PointRecord& record : records) {
    const auto same = std::find_if(records_.begin(), records_.end(),
                                   [&](const records::PointRecord& r) { return r.resume_id == record.resume_id; });
    if (same != records_.end()) {
      *same = record;
    } else {
      records_.push_back(record);
    }
  }
  std::string lines;
  for (const records::PointRecord& r : records_) lines += records::json_text(json(r)) + "\n";
  records::write_file_atomically(dir_ / kPointsFile, lines);
  records::write_file_atomically(dir_ / kCsvFile, records_csv(records_));
  loaded_ = records::file_identity(dir_ / kPointsFile);
}

void ResultsWriter::write_fits(const records::Provenance& provenance, double tolerance,
                               const std::function<void(const std::string&)>& note) {
  const records::FolderLock lock(dir_);
  reload();
  // The runs that wrote the folder before this one (under the lock, so that concurrent runs each add theirs).
  std::vector<records::Provenance> runs;
  std::error_code error;
  if (fs::exists(dir_ / kFitsFile, error)) {
    try {
      runs = records::parse_fits_json(records::read_text_file(dir_ / kFitsFile), (dir_ / kFitsFile).string()).runs;
    } catch (const theory::InputError& e) {
      // The fits are rewritten from points.jsonl below; only the earlier runs' provenance is lost, and said so.
      if (note)
        note(
            fmt::format("the earlier runs' provenance in {} could not be read ({}); it lists this "
                        "run only",
                        (dir_ / kFitsFile).string(), e.what()));
    }
  }
  runs.push_back(provenance);
  records::write_file_atomically(dir_ / kFitsFile, records::fits_json_text(runs, fit_series(records_, tolerance)));
}

std::string records_csv(const std::vector<records::PointRecord>& records) {
  std::string text;
  for (std::size_t c = 0; c < kCsvColumns.size(); ++c) text += (c ? "," : "") + kCsvColumns[c];
  text += "\n";
  for (const records::PointRecord& record : records) {
    // The columns are the fields of the one JSON form of a record, under the same names.
    const json r = record;
    for (std::size_t c = 0; c < kCsvColumns.size(); ++c) {
      const std::string& col = kCsvColumns[c];
      json v = nullptr;
      if (col == "ci95_lo" || col == "ci95_hi") {
        v = r["ci95"][col == "ci95_lo" ? 0 : 1];
      } else if (r.contains(col)) {
        v = r[col];
      }
      text += (c ? "," : "") + csv_cell(v);
    }
    text += "\n";
  }
  return text;
}

}  // namespace attncheck::monte_carlo
