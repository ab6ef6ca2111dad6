#include "attncheck/monte_carlo/results.hpp"

#include "attncheck/monte_carlo/fit.hpp"
#include "attncheck/reports/atomic_file.hpp"
#include "attncheck/reports/folder_lock.hpp"
#include "attncheck/reports/input_file.hpp"
#include "attncheck/reports/results_folder.hpp"

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
    "jensen_ratio", "key"};

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

std::string record_key(const PointSpec& point, Estimand estimand, std::uint64_t run_seed) {
  return fmt::format("{};estimand={};run_seed={}", point.key, estimand_name(estimand), run_seed);
}

json point_record(const PointSpec& ps, Estimand estimand, const PointOutcome& outcome, const RunContext& context) {
  const SeriesSpec& series = *ps.series;
  const SweepPoint& pt = ps.point;
  const int k = static_cast<int>(estimand);
  const MeanEstimate norm = outcome.norm[k].estimate(), sq = outcome.norm_sq[k].estimate();
  const std::optional<double> exact = exact_norm_sq(ps, estimand);
  json r;
  r["claim"] = series.claim;
  r["reading"] = series.reading ? json(*series.reading) : json(nullptr);
  r["phi"] = phi_name(series.activation);
  r["p"] = series.activation.p;
  r["alpha"] = optional_or_null(series.alpha);
  r["scale"] = series.outer.text;
  r["inner"] = pt.map.inner;
  r["outer_factor"] = pt.map.outer.factor;
  r["formula"] = theory::describe(pt.map, pt.d);
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
  r["exact_sq"] = optional_or_null(exact);
  r["z_exact_sq"] = exact && sq.se > 0 ? number_or_null((sq.mean - *exact) / sq.se) : json(nullptr);
  r["jensen_bound"] = exact ? json(std::sqrt(*exact)) : json(nullptr);
  r["jensen_ratio"] = exact && *exact > 0 ? number_or_null(norm.mean / std::sqrt(*exact)) : json(nullptr);
  r["se_reliable"] = norm.se_reliable && sq.se_reliable;
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
  r["claimed_exponent"] = optional_or_null(series.claimed_exponent);
  r["fit_variable"] = series.fit_over_d ? "d" : "N";
  r["fit_of"] = series.fit_over_d ? "mean_sq" : "mean";
  r["counts_for_exit"] = series.counts_for_exit;
  r["key"] = record_key(ps, estimand, context.run_seed);
  // Everything but the swept variable (N, or d for C8) and the sample count.
  r["series_key"] = fmt::format(
      "claim={};reading={};phi={};p={};alpha={};scale={};outer_factor={:.17g}*d^-{:g};inner={};D={};{};estimand={};"
      "sigma_x={:.17g};sigma_t={:.17g};run_seed={}",
      series.claim, series.reading.value_or("-"), phi_name(series.activation), series.activation.p,
      series.alpha ? fmt::format("{:g}", *series.alpha) : "-", series.outer.text, series.outer.factor,
      series.outer.d_exponent, series.inner.inverse_sqrt_d ? "1/sqrt(d)" : fmt::format("{:.17g}", series.inner.value),
      pt.D, series.fit_over_d ? fmt::format("N={}", pt.N) : fmt::format("d={}", pt.d), estimand_name(estimand),
      pt.sigma_x, pt.sigma_t, context.run_seed);
  return r;
}

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
    std::vector<double> x, y, se;
    json Ns = json::array(), ds = json::array(), means = json::array(), ses = json::array(), exacts = json::array(),
         means_sq = json::array(), ses_sq = json::array();
    bool all_reliable = true;
    for (const json* r : members) {
      x.push_back((*r)[over_d ? "d" : "N"].get<double>());
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
      all_reliable = all_reliable && r->value("se_reliable", false);
    }
    json s;
    for (const char* field : {"claim", "reading", "phi", "p", "alpha", "scale", "D", "d", "estimand", "sigma_x", "sigma_t",
                              "claimed_exponent", "counts_for_exit", "fit_variable", "fit_of", "run_seed"}) {
      s[field] = first.contains(field) ? first[field] : json(nullptr);
    }
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
    if (s["claimed_exponent"].is_number()) {
      s["verdict"] = fit ? verdict(*fit, s["claimed_exponent"].get<double>(), tolerance) : "inconclusive";
    } else {
      s["verdict"] = nullptr;  // a custom map states no exponent to check
    }
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
  const std::string text = reports::read_text_file(file);
  reports::parse_points_jsonl(text, file.string());
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
  fs::create_directories(dir_, ec);
  if (ec || !fs::is_directory(dir_, ec)) {
    throw theory::InputError(fmt::format("--out {}: cannot create the folder ({})", dir_.string(),
                                         ec ? ec.message() : "a file of that name is in the way"));
  }
  const reports::FolderLock lock(dir_);
  for (const char* name : {kPointsFile, kCsvFile, kFitsFile}) reports::remove_stale_temporaries(dir_ / name);
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
  const auto identity = reports::file_identity(file);
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
  const reports::FolderLock lock(dir_);
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
  reports::write_file_atomically(dir_ / kPointsFile, lines);
  reports::write_file_atomically(dir_ / kCsvFile, records_csv(records_));
  loaded_ = reports::file_identity(dir_ / kPointsFile);
}

void ResultsFolder::write_fits(const json& provenance, double tolerance) {
  const reports::FolderLock lock(dir_);
  reload();
  reports::write_file_atomically(dir_ / kFitsFile,
                                 json{{"provenance", provenance}, {"series", fit_series(records_, tolerance)}}.dump(2) + "\n");
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
