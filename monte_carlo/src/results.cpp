#include "attncheck/monte_carlo/results.hpp"

#include "attncheck/monte_carlo/fit.hpp"
#include "attncheck/records/atomic_file.hpp"
#include "attncheck/records/errors.hpp"
#include "attncheck/records/folder_lock.hpp"
#include "attncheck/records/input_file.hpp"
#include "attncheck/records/results_folder.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>

namespace attncheck::monte_carlo {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

json number_or_null(double x) { return std::isfinite(x) ? json(x) : json(nullptr); }

json optional_or_null(const std::optional<double>& x) { return x ? number_or_null(*x) : json(nullptr); }

// Columns of points.csv: the format's fields in its order, then the extras.
const std::vector<std::string> kCsvColumns{
    "claim", "reading", "phi", "p", "alpha", "scale", "inner", "formula", "N", "D", "d", "estimand", "samples",
    "mean", "se", "ci95_lo", "ci95_hi", "mean_sq", "se_sq", "exact_sq", "z_exact_sq", "jensen_bound", "se_reliable",
    "stopped_by", "sigma_x", "sigma_t", "seed", "run_seed", "backend", "threads", "wall_seconds", "claimed_exponent",
    "jensen_ratio", "key", "scores", "exact_mean", "z_exact_mean", "se_mean_reliable", "se_sq_reliable",
    "effective_samples", "effective_samples_sq", "se_sq_floor", "unreliable_because", "mix", "dv", "sample_max",
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
  const std::string key = records::resume_key(point.key, estimand_name(estimand), run_seed);
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
      case ScoreModel::projected_layernorm:
        return fmt::format("Var({}LN(Q^T x_i) . LN(K^T x_j)), i != j", scale);
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
    e.unreliable_because = "the sample variance of ||F||^2 is below its exact lower bound (its tail is not yet sampled)";
  }
  if (*floor_se > e.se) {
    e.se = *floor_se;
    const double t = student_t_quantile(static_cast<double>(e.samples - 1), 0.95);
    e.ci_lo = e.mean - t * e.se;
    e.ci_hi = e.mean + t * e.se;
  }
  return e;
}

// (estimate - exact) / se, with se no smaller than the rounding of the per-sample sums (1e-12 of the value): a
// quantity that does not vary between samples (||dS|| of a linear map, |s| = sqrt(2) under qk-layernorm at d = 2)
// has a standard error of rounding noise, not of sampling.
json z_score(double estimate, double se, double exact) {
  const double floor = 1e-12 * std::max(std::abs(exact), std::abs(estimate));
  const double used = std::max(se, floor);
  if (!(used > 0)) return estimate == exact ? json(0.0) : json(nullptr);
  return number_or_null((estimate - exact) / used);
}

json law_json(const std::optional<ExactLaw>& law) {
  if (!law) return nullptr;
  return {{"of", law->of}, {"bound", law->bound}, {"deterministic", law->deterministic},
          {"exponent", optional_or_null(law->exponent)},
          {"vanishes", !law->exponent.has_value()}, {"constant", number_or_null(law->constant)}};
}

std::optional<ExactLaw> law_from_json(const json& j) {
  if (!j.is_object()) return std::nullopt;
  ExactLaw law;
  law.of = j.value("of", "");
  law.bound = j.value("bound", true);
  law.deterministic = j.value("deterministic", false);
  if (j.contains("exponent") && j["exponent"].is_number()) law.exponent = j["exponent"].get<double>();
  law.constant = j.contains("constant") && j["constant"].is_number() ? j["constant"].get<double>() : NAN;
  return law;
}

}  // namespace

json point_record(const PointSpec& ps, Estimand estimand, const PointOutcome& outcome, const RunContext& context) {
  const SeriesSpec& series = *ps.series;
  const SweepPoint& pt = ps.point;
  const int k = static_cast<int>(estimand);
  const ExactMoments exact = exact_moments(ps, estimand);
  std::optional<double> floor_se;
  const MeanEstimate norm = outcome.norm[k].estimate();
  const MeanEstimate sq = floored_second_moment(outcome.norm_sq[k], exact.second_variance_floor, floor_se);
  json r;
  r["claim"] = series.claim;
  r["reading"] = series.reading ? json(*series.reading) : json(nullptr);
  r["phi"] = phi_name(series.activation);
  r["p"] = series.activation.p;
  r["alpha"] = optional_or_null(series.alpha);
  r["mix"] = optional_or_null(pt.mix);
  r["dv"] = pt.mix ? json(pt.dv) : json(nullptr);
  const std::optional<double> sample_bound = cross_norm_sample_bound(ps, estimand);
  r["sample_bound"] = optional_or_null(sample_bound);
  r["sample_max"] = sample_bound ? number_or_null(outcome.largest[k]) : json(nullptr);
  r["scale"] = series.outer.text;
  r["scores"] = theory::score_model_name(pt.scores);
  r["inner"] = pt.map.inner;
  r["outer_factor"] = pt.map.outer.factor;
  r["formula"] = point_formula(pt, estimand);
  r["N"] = pt.N;
  r["D"] = pt.D;
  r["d"] = pt.d;
  r["estimand"] = estimand_name(estimand);
  r["samples"] = outcome.samples;
  r["mean"] = number_or_null(norm.mean);
  r["se"] = number_or_null(norm.se);
  r["ci95"] = {number_or_null(norm.ci_lo), number_or_null(norm.ci_hi)};
  r["mean_sq"] = number_or_null(sq.mean);
  r["se_sq"] = number_or_null(sq.se);
  r["ci95_sq"] = {number_or_null(sq.ci_lo), number_or_null(sq.ci_hi)};
  r["se_sq_floor"] = optional_or_null(floor_se);
  r["exact_sq"] = optional_or_null(exact.second);
  r["z_exact_sq"] = exact.second ? z_score(sq.mean, sq.se, *exact.second) : json(nullptr);
  r["exact_mean"] = optional_or_null(exact.mean);
  r["z_exact_mean"] = exact.mean ? z_score(norm.mean, norm.se, *exact.mean) : json(nullptr);
  r["exact_out_of_range"] = exact.out_of_range;
  const bool norm_estimand = is_norm(estimand);
  r["jensen_bound"] = exact.second && norm_estimand ? json(std::sqrt(*exact.second)) : json(nullptr);
  r["jensen_ratio"] = exact.second && *exact.second > 0 && norm_estimand ? number_or_null(norm.mean / std::sqrt(*exact.second))
                                                                          : json(nullptr);
  r["jensen_ratio_estimated"] =
      norm_estimand && sq.mean > 0 ? number_or_null(norm.mean / std::sqrt(sq.mean)) : json(nullptr);
  r["se_reliable"] = norm.se_reliable && sq.se_reliable;
  r["se_mean_reliable"] = norm.se_reliable;
  r["se_sq_reliable"] = sq.se_reliable;
  r["unreliable_because"] = norm.unreliable_because   ? json(norm.unreliable_because)
                            : sq.unreliable_because ? json(std::string(sq.unreliable_because) + " (second moment)")
                                                    : json(nullptr);
  r["effective_samples"] = number_or_null(norm.effective_samples);
  r["effective_samples_sq"] = number_or_null(sq.effective_samples);
  r["variance_relative_se"] = number_or_null(norm.variance_relative_se);
  r["variance_relative_se_sq"] = number_or_null(sq.variance_relative_se);
  r["se_plain"] = number_or_null(norm.plain_se);
  r["se_batch_means"] = number_or_null(norm.batch_se);
  r["stopped_by"] = outcome.stopped_by;
  r["sigma_x"] = pt.sigma_x;
  r["sigma_t"] = pt.sigma_t;
  r["seed"] = pt.seed;
  r["run_seed"] = context.run_seed;
  r["backend"] = context.backend;
  r["threads"] = context.threads;
  r["wall_seconds"] = outcome.wall_seconds;
  r["claimed_exponent"] = optional_or_null(series.claimed_for(estimand));
  r["claim_form"] = series.claims_variance_equals_d ? "equality" : "exponent";
  r["claimed_value"] = series.claims_variance_equals_d
                           ? json(pt.map.inner * pt.map.inner * static_cast<double>(pt.d))
                           : json(nullptr);
  r["exact_law"] = law_json(exact_law(ps, estimand));
  r["fit_variable"] = series.fit_over_d ? "d" : "N";
  r["fit_of"] = series.fit_over_d ? "mean_sq" : "mean";
  r["counts_for_exit"] = series.counts_for_exit_of(estimand);
  r["key"] = record_key(ps, estimand, context.run_seed, context.precision);
  // Everything but the swept variable (N, or d for C8) and the sample count.
  r["series_key"] = fmt::format(
      "claim={};reading={};phi={};p={};alpha={};scale={};outer_factor={:.17g}*d^-{:g};inner={};D={};{};estimand={};"
      "sigma_x={:.17g};sigma_t={:.17g};run_seed={}{}{}{}",
      series.claim, series.reading.value_or("-"), phi_name(series.activation), series.activation.p,
      series.alpha ? fmt::format("{:g}", *series.alpha) : "-", series.outer.text, series.outer.factor,
      series.outer.d_exponent, series.inner.inverse_sqrt_d ? "1/sqrt(d)" : fmt::format("{:.17g}", series.inner.value),
      pt.D, series.fit_over_d ? fmt::format("N={}", pt.N) : fmt::format("d={}", pt.d), estimand_name(estimand),
      pt.sigma_x, pt.sigma_t, context.run_seed,
      pt.scores == theory::ScoreModel::projected ? "" : fmt::format(";scores={}", theory::score_model_name(pt.scores)),
      pt.mix ? fmt::format(";mix={:.17g};dv={}", *pt.mix, pt.dv) : "",
      context.precision == ScorePrecision::mixed ? ";precision=mixed" : "");
  return r;
}

namespace {

double number_at(const json& r, const char* key) { return r.contains(key) && r[key].is_number() ? r[key].get<double>() : NAN; }
std::optional<double> optional_at(const json& r, const char* key) {
  if (r.contains(key) && r[key].is_number()) return r[key].get<double>();
  return std::nullopt;
}

json local_exponent_json(const LocalExponent& e) {
  json j;
  j["window"] = e.window;
  j["missing"] = e.missing.empty() ? json(nullptr) : json(e.missing);
  if (e.window.size() >= 2) {
    j["exponent"] = number_or_null(e.exponent);
    j["sampling_half_width"] = number_or_null(kZ95 * e.se);
  }
  if (e.missing.empty()) {
    j["previous"] = optional_or_null(e.previous);
    j["systematic"] = number_or_null(e.systematic);
    j["interval"] = {number_or_null(e.lo), number_or_null(e.hi)};
  }
  j["unreliable_at"] = e.unreliable;
  return j;
}

// What each of C8's three models is, beside its verdict.
std::string c8_finding(const std::string& scores, std::optional<records::Verdict> verdict) {
  if (scores == "iid-unit") return "i.i.d. unit-variance entries (the proposition's intent): Var(q . k) = d_k exactly";
  if (scores == "sign-coupled") {
    return verdict == records::Verdict::violated
               ? "the proposition's hypothesis is insufficient: q_i = eps_i k_i has zero means, unit variances and zero "
                 "covariances, yet Var(q . k) = 3 d_k (the terms eps_i k_i^2 are uncorrelated with E k^4 = 3)"
               : "";
  }
  if (scores == "projected") {
    return "the projected model q = Q^T x, k = K^T x' (a transformer at initialisation) is not the proposition's "
           "hypothesis: its entries are uncorrelated but not independent (they share x) and have variance "
           "D sigma_x^2 sigma_t^2, not 1; Var(q . k) = d_k Var(q_1) Var(k_1) exactly, linear in d_k";
  }
  return "";
}

}  // namespace

json fit_series(const std::vector<json>& records, double tolerance) {
  std::vector<std::string> order;
  std::map<std::string, std::vector<const json*>> groups;
  for (const json& r : records) {
    const std::string key = r.value("series_key", "");
    if (!groups.count(key)) order.push_back(key);
    groups[key].push_back(&r);
  }
  json out = json::array();
  for (const std::string& key : order) {
    auto members = groups[key];
    const json& first = *members.front();
    const bool over_d = first.value("fit_variable", "N") == "d";
    const std::string fit_of = first.value("fit_of", "mean");
    std::sort(members.begin(), members.end(), [&](const json* a, const json* b) {
      return (*a)[over_d ? "d" : "N"].get<long long>() < (*b)[over_d ? "d" : "N"].get<long long>();
    });
    const std::string estimand = first.value("estimand", "value");
    const bool norm_estimand =
        estimand == "value" || estimand == "dQ" || estimand == "dK" || estimand == "dS" || estimand == "dV";
    const bool row_sums = estimand == "row-sum" || estimand == "row-mean";
    std::vector<double> x, y, se;
    std::vector<EvidencePoint> evidence;
    json Ns = json::array(), ds = json::array(), means = json::array(), ses = json::array(), exacts = json::array(),
         means_sq = json::array(), ses_sq = json::array(), exact_means = json::array();
    bool all_reliable = true;
    std::optional<double> jensen_first, jensen_last;
    std::string jensen_source;
    for (const json* r : members) {
      const double xv = (*r)[over_d ? "d" : "N"].get<double>();
      x.push_back(xv);
      const json& yv = (*r)[fit_of];
      const json& sv = (*r)[fit_of == "mean" ? "se" : "se_sq"];
      y.push_back(yv.is_number() ? yv.get<double>() : NAN);
      se.push_back(sv.is_number() ? sv.get<double>() : NAN);
      Ns.push_back((*r)["N"]);
      ds.push_back((*r)["d"]);
      means.push_back((*r)["mean"]);
      ses.push_back((*r)["se"]);
      means_sq.push_back((*r)["mean_sq"]);
      ses_sq.push_back((*r)["se_sq"]);
      exacts.push_back((*r)["exact_sq"]);
      exact_means.push_back(r->contains("exact_mean") ? (*r)["exact_mean"] : json(nullptr));
      all_reliable = all_reliable && r->value("se_reliable", false);
      // Records written before the split carry only se_reliable (both at once).
      const bool mean_ok = r->value("se_mean_reliable", r->value("se_reliable", false));
      const bool sq_ok = r->value("se_sq_reliable", r->value("se_reliable", false));
      EvidencePoint p;
      p.x = xv;
      p.mean = y.back();
      p.se = se.back();
      p.mean_reliable = fit_of == "mean" ? mean_ok : sq_ok;
      const double m2 = number_at(*r, "mean_sq"), m2_se = number_at(*r, "se_sq");
      p.root_mean_sq = m2 > 0 ? std::sqrt(m2) : NAN;
      p.root_mean_sq_se = m2 > 0 ? m2_se / (2 * std::sqrt(m2)) : NAN;
      p.sq_reliable = sq_ok;
      p.z_exact = optional_at(*r, row_sums ? "z_exact_mean" : "z_exact_sq");
      p.z_judged = row_sums ? mean_ok : sq_ok;
      p.exact_value = optional_at(*r, "exact_sq");
      p.claimed_value = optional_at(*r, "claimed_value");
      p.sample_bound = optional_at(*r, "sample_bound");
      // A NaN sample is stored as null: with a bound present it must fail the check, not skip it.
      if (p.sample_bound) p.sample_max = optional_at(*r, "sample_max").value_or(INFINITY);
      evidence.push_back(p);
      if (norm_estimand) {
        const auto exact_ratio = optional_at(*r, "jensen_ratio");
        const auto estimated_ratio = optional_at(*r, "jensen_ratio_estimated");
        const auto ratio = exact_ratio ? exact_ratio : estimated_ratio;
        if (ratio) {
          if (!jensen_first) jensen_first = ratio;
          jensen_last = ratio;
          if (jensen_source.empty()) jensen_source = exact_ratio ? "exact" : "estimated";
        }
      }
    }
    json s;
    for (const char* field : {"claim", "reading", "phi", "p", "alpha", "mix", "dv", "scale", "scores", "D", "d", "estimand", "sigma_x",
                              "sigma_t", "claimed_exponent", "claim_form", "counts_for_exit", "fit_variable", "fit_of",
                              "run_seed"}) {
      s[field] = first.contains(field) ? first[field] : json(nullptr);
    }
    if (s["scores"].is_null()) s["scores"] = "projected";
    s["formula"] = members.back()->value("formula", "");
    s["series_key"] = key;
    s["tolerance"] = tolerance;
    s["N"] = Ns;
    s["d_values"] = ds;
    s["mean"] = means;
    s["se"] = ses;
    s["mean_sq"] = means_sq;
    s["se_sq"] = ses_sq;
    s["exact_sq"] = exacts;
    s["exact_mean"] = exact_means;
    s["se_reliable"] = all_reliable;
    const auto fit = fit_log_log(x, y, se);
    if (fit) {
      s["slope"] = fit->slope;
      s["slope_ci"] = {fit->slope_ci_lo, fit->slope_ci_hi};
      s["slope_se"] = fit->slope_se;
      s["intercept"] = fit->intercept;
      s["reduced_chi_sq"] = fit->reduced_chi_sq;
      s["fit_points"] = fit->points;
    } else {
      s["slope"] = nullptr;
      s["slope_ci"] = nullptr;
      s["intercept"] = nullptr;
      s["fit_points"] = 0;
    }
    s["diagnostic"] = {{"basis", "finite-N fit (diagnostic)"},
                       {"slope", s["slope"]},
                       {"slope_ci", s["slope_ci"]},
                       {"jensen_ratio_first", optional_or_null(jensen_first)},
                       {"jensen_ratio_last", optional_or_null(jensen_last)},
                       {"jensen_ratio_source", jensen_source.empty() ? json(nullptr) : json(jensen_source)}};

    SeriesClaim claim;
    claim.exponent = optional_at(first, "claimed_exponent");
    claim.tolerance = tolerance;
    claim.cross_check = norm_estimand && fit_of == "mean";
    claim.equality = first.value("claim_form", "exponent") == "equality";
    claim.x_name = over_d ? "d" : "N";
    const std::optional<ExactLaw> law = first.contains("exact_law") ? law_from_json(first["exact_law"]) : std::nullopt;
    const Verdict v = decide(evidence, law, claim);
    // A custom map states no exponent to check: no verdict, no basis.
    s["verdict"] = v.word ? json(records::to_string(*v.word)) : json(nullptr);
    s["basis"] = v.basis ? json(records::to_string(*v.basis)) : json(nullptr);
    s["verdict_rule"] = v.rule ? json(std::string(v.rule->definition)) : json(nullptr);
    s["verdict_reason"] = v.reason.empty() ? json(nullptr) : json(v.reason);
    s["extend_to"] = optional_or_null(v.extend_to);
    s["local_exponent"] = local_exponent_json(v.primary);
    s["cross_check"] = claim.cross_check ? local_exponent_json(v.cross_check) : json(nullptr);
    s["exact"] = law ? json{{"law", first["exact_law"]},
                            {"max_abs_z", optional_or_null(v.exact_max_abs_z)},
                            {"judged_points", v.exact_judged},
                            {"unjudged_points", v.exact_unjudged},
                            {"disagrees_at", v.exact_disagrees_at},
                            {"bound_checked_points", v.bound_checked},
                            {"max_sample_over_bound", optional_or_null(v.max_sample_over_bound)},
                            {"bound_exceeded_at", v.bound_exceeded_at},
                            {"confirmed", v.exact_disagrees_at.empty()}}
                     : json(nullptr);
    const std::string finding = s["claim"] == "C8" ? c8_finding(s["scores"].get<std::string>(), v.word) : "";
    s["finding"] = finding.empty() ? json(nullptr) : json(finding);
    out.push_back(s);
  }
  return out;
}

int exit_code_of(const json& series) {
  for (const json& s : series) {
    if (s.value("counts_for_exit", false) && s["verdict"].is_string() && s["verdict"] == "violated") return 1;
  }
  return 0;
}

namespace {

const char* const kPointsFile = "points.jsonl";
const char* const kCsvFile = "points.csv";
const char* const kFitsFile = "fits.json";

// The records of points.jsonl, one per key in order of first appearance, each the last line with that key.
// Every line is first checked as the report reads it (docs/results-format.md), so that a damaged or foreign
// file stops a resumed run naming its line instead of failing somewhere inside the fit.
std::vector<json> read_points(const fs::path& file) {
  const std::string text = records::read_text_file(file);
  records::parse_points_jsonl(text, file.string());
  std::vector<json> records;
  std::map<std::string, std::size_t> index;
  std::size_t number = 0;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    ++number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    json record = json::parse(line);
    if (!record.contains("key") || !record["key"].is_string() ||
        (record.contains("series_key") && !record["series_key"].is_string())) {
      throw theory::InputError(fmt::format("{} line {}: \"key\" and \"series_key\" must be text", file.string(), number));
    }
    const auto [at, added] = index.emplace(record["key"].get<std::string>(), records.size());
    if (added) {
      records.push_back(std::move(record));
    } else {
      records[at->second] = std::move(record);
    }
  }
  return records;
}

}  // namespace

ResultsFolder::ResultsFolder(fs::path dir, FolderStart start) : dir_(std::move(dir)) {
  std::error_code ec;
  // Something else in the folder's place is the user's to move (bad input); a refused mkdir is the file system's.
  if (!fs::exists(dir_, ec) || fs::is_directory(dir_, ec)) {
    fs::create_directories(dir_, ec);
    if (ec) throw records::IoError(fmt::format("--out {}: cannot create the folder ({})", dir_.string(), ec.message()));
  }
  if (!fs::is_directory(dir_, ec)) {
    throw theory::InputError(fmt::format("--out {}: cannot create the folder (a file of that name is in the way)",
                                         dir_.string()));
  }
  const records::FolderLock lock(dir_);
  for (const char* name : {kPointsFile, kCsvFile, kFitsFile}) records::remove_stale_temporaries(dir_ / name);
  reload();
  if (start == FolderStart::fresh && !records_.empty()) {
    throw theory::InputError(fmt::format("--out {}: the folder already holds {} finished points ({}); add to them "
                                         "with --resume, or replace them with --force",
                                         dir_.string(), records_.size(), (dir_ / kPointsFile).string()));
  }
  if (start == FolderStart::overwrite) {
    for (const char* name : {kPointsFile, kCsvFile, kFitsFile}) fs::remove(dir_ / name, ec);
    records_.clear();
    loaded_.reset();
  }
}

void ResultsFolder::reload() {
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

std::optional<json> ResultsFolder::finished(const std::string& key) {
  reload();
  for (const json& r : records_) {
    if (r.value("key", "") == key) return r;
  }
  return std::nullopt;
}

void ResultsFolder::append(const std::vector<json>& records) {
  const records::FolderLock lock(dir_);
  reload();
  for (const json& record : records) {
    const std::string key = record.value("key", "");
    const auto same = std::find_if(records_.begin(), records_.end(), [&](const json& r) { return r.value("key", "") == key; });
    if (same != records_.end()) {
      *same = record;
    } else {
      records_.push_back(record);
    }
  }
  std::string lines;
  for (const json& r : records_) lines += r.dump() + "\n";
  records::write_file_atomically(dir_ / kPointsFile, lines);
  records::write_file_atomically(dir_ / kCsvFile, records_csv(records_));
  loaded_ = records::file_identity(dir_ / kPointsFile);
}

void ResultsFolder::write_fits(const json& provenance, double tolerance) {
  const records::FolderLock lock(dir_);
  reload();
  records::write_file_atomically(dir_ / kFitsFile,
                                 json{{"format_version", kResultsFormatVersion}, {"provenance", provenance}, {"series", fit_series(records_, tolerance)}}
                                     .dump(2) + "\n");
}

std::string records_csv(const std::vector<json>& records) {
  std::string text;
  for (std::size_t c = 0; c < kCsvColumns.size(); ++c) text += (c ? "," : "") + kCsvColumns[c];
  text += "\n";
  for (const json& r : records) {
    for (std::size_t c = 0; c < kCsvColumns.size(); ++c) {
      const std::string& col = kCsvColumns[c];
      json v = nullptr;
      if (col == "ci95_lo" || col == "ci95_hi") {
        if (r.contains("ci95") && r["ci95"].is_array()) v = r["ci95"][col == "ci95_lo" ? 0 : 1];
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
