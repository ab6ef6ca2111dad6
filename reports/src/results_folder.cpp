#include "attncheck/reports/results_folder.hpp"

#include "json_fields.hpp"

#include "attncheck/theory/common.hpp"

#include <fmt/format.h>

#include <fstream>
#include <map>
#include <sstream>
#include <system_error>
#include <tuple>

namespace attncheck::reports {

namespace fs = std::filesystem;
using detail::JsonFields;
using theory::InputError;

std::string SeriesKey::label() const {
  std::string text = claim;
  if (reading) text += " " + *reading;
  text += fmt::format(" {} p={}", phi, p);
  if (alpha) text += fmt::format(" alpha={}", *alpha);
  if (scale != "none") text += " scale " + scale;
  text += fmt::format(" {}, D={} d={}", estimand, D, d);
  if (sigma_x != 1 || sigma_t != 1) text += fmt::format(" sigma_x={} sigma_t={}", sigma_x, sigma_t);
  return text;
}

std::string_view to_string(Verdict verdict) {
  switch (verdict) {
    case Verdict::holds: return "holds";
    case Verdict::tight: return "tight";
    case Verdict::violated: return "violated";
    case Verdict::inconclusive: return "inconclusive";
  }
  return "?";
}

std::string read_text_file(const fs::path& path) {
  std::error_code error;
  if (fs::is_directory(path, error)) throw InputError(fmt::format("{} is a folder, not a file", path.string()));
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(fmt::format("cannot read {}", path.string()));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw InputError(fmt::format("cannot read {}", path.string()));
  return text.str();
}

namespace {

SeriesKey read_key(const JsonFields& fields) {
  SeriesKey key;
  key.claim = fields.text("claim");
  key.reading = fields.text_or_null("reading");
  if (key.reading && *key.reading != "elementwise" && *key.reading != "matrix") {
    fields.fail(fmt::format("\"reading\" must be \"elementwise\", \"matrix\" or null, got \"{}\"", *key.reading));
  }
  key.phi = fields.text("phi");
  key.p = fields.integer("p");
  key.alpha = fields.number_or_null("alpha");
  key.scale = fields.text("scale");
  key.D = fields.integer("D");
  key.d = fields.integer("d");
  if (key.D < 1 || key.d < 1) fields.fail(fmt::format("D = {} and d = {} must be >= 1", key.D, key.d));
  key.estimand = fields.text("estimand");
  key.sigma_x = fields.number("sigma_x");
  key.sigma_t = fields.number("sigma_t");
  return key;
}

Verdict read_verdict(const JsonFields& fields) {
  const std::string word = fields.text("verdict");
  for (Verdict v : {Verdict::holds, Verdict::tight, Verdict::violated, Verdict::inconclusive}) {
    if (word == to_string(v)) return v;
  }
  fields.fail(fmt::format("\"verdict\" must be holds, tight, violated or inconclusive, got \"{}\"", word));
}

void check_estimate(const JsonFields& fields, double mean, double se, const char* what) {
  if (mean < 0) fields.fail(fmt::format("{} = {} is negative, but it estimates a norm", what, mean));
  if (se < 0) fields.fail(fmt::format("standard error of {} = {} is negative", what, se));
}

Provenance read_provenance(const JsonFields& fields) {
  Provenance p;
  p.version = fields.scalar_text("version");
  p.date = fields.scalar_text("date");
  p.machine = fields.scalar_text("machine");
  p.backend = fields.scalar_text("backend");
  p.threads = fields.scalar_text("threads");
  p.run_seed = fields.scalar_text("run_seed");
  p.command = fields.scalar_text("command");
  p.wall_seconds = fields.number_or_null("wall_seconds");
  return p;
}

Series read_series(const JsonFields& fields) {
  Series s;
  s.key = read_key(fields);
  s.formula = fields.text("formula");
  s.slope = fields.number("slope");
  std::tie(s.slope_ci_lo, s.slope_ci_hi) = fields.interval("slope_ci");
  s.intercept = fields.number("intercept");
  s.claimed_exponent = fields.number("claimed_exponent");
  s.tolerance = fields.number("tolerance");
  if (s.tolerance < 0) fields.fail(fmt::format("\"tolerance\" = {} is negative", s.tolerance));
  s.verdict = read_verdict(fields);
  s.N = fields.integers("N");
  s.mean = fields.numbers("mean");
  s.se = fields.numbers("se");
  s.exact_sq = fields.numbers_or_null("exact_sq");
  if (s.N.empty()) fields.fail("\"N\" is empty: a series needs at least one point");
  if (s.mean.size() != s.N.size() || s.se.size() != s.N.size() || s.exact_sq.size() != s.N.size()) {
    fields.fail(fmt::format("\"N\", \"mean\", \"se\" and \"exact_sq\" must have one entry per point, got {}, {}, {}, {}",
                            s.N.size(), s.mean.size(), s.se.size(), s.exact_sq.size()));
  }
  for (std::size_t i = 0; i < s.N.size(); ++i) {
    if (s.N[i] < 1) fields.fail(fmt::format("N[{}] = {} must be >= 1", i, s.N[i]));
    if (i > 0 && s.N[i] <= s.N[i - 1]) fields.fail(fmt::format("\"N\" must increase, but N[{}] = {} follows {}", i, s.N[i], s.N[i - 1]));
    check_estimate(fields, s.mean[i], s.se[i], fmt::format("mean[{}]", i).c_str());
    if (s.exact_sq[i] && *s.exact_sq[i] < 0) fields.fail(fmt::format("exact_sq[{}] = {} is negative", i, *s.exact_sq[i]));
  }
  s.points.assign(s.N.size(), std::nullopt);
  return s;
}

PointRecord read_point(const JsonFields& fields, int line) {
  PointRecord r;
  r.line = line;
  r.key = read_key(fields);
  r.formula = fields.text("formula");
  r.inner = fields.number("inner");
  r.N = fields.integer("N");
  if (r.N < 1) fields.fail(fmt::format("\"N\" = {} must be >= 1", r.N));
  r.samples = fields.integer("samples");
  if (r.samples < 1) fields.fail(fmt::format("\"samples\" = {} must be >= 1", r.samples));
  r.mean = fields.number("mean");
  r.se = fields.number("se");
  check_estimate(fields, r.mean, r.se, "\"mean\"");
  std::tie(r.ci95_lo, r.ci95_hi) = fields.interval("ci95");
  r.mean_sq = fields.number("mean_sq");
  r.se_sq = fields.number("se_sq");
  check_estimate(fields, r.mean_sq, r.se_sq, "\"mean_sq\"");
  r.exact_sq = fields.number_or_null("exact_sq");
  r.z_exact_sq = fields.number_or_null("z_exact_sq");
  r.jensen_bound = fields.number_or_null("jensen_bound");
  r.se_reliable = fields.boolean("se_reliable");
  r.stopped_by = fields.text("stopped_by");
  r.seed = fields.scalar_text("seed");
  r.run_seed = fields.scalar_text("run_seed");
  r.backend = fields.scalar_text("backend");
  r.threads = fields.scalar_text("threads");
  r.wall_seconds = fields.number("wall_seconds");
  return r;
}

// The line (1-based) where each element of the array under the top-level `key` starts, so that an error in
// series[i] can name its line; nlohmann::json keeps no positions. Text inside strings is skipped.
std::vector<int> top_level_array_element_lines(const std::string& text, std::string_view key) {
  std::vector<int> lines;
  int line = 1, depth = 0;
  bool in_string = false, escaped = false, in_target = false, expect_element = false;
  std::string current, last_string, pending_key;
  for (char c : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false, last_string = current;
      else current += c;
      if (c == '\n') ++line;
      continue;
    }
    if (c == '\n') ++line;
    const bool blank = c == ' ' || c == '\t' || c == '\r' || c == '\n';
    if (in_target && expect_element && depth == 2 && !blank && c != ']') {
      lines.push_back(line);
      expect_element = false;
    }
    switch (c) {
      case '"': in_string = true, current.clear(); break;
      case ':':
        if (depth == 1) pending_key = last_string;
        break;
      case '{':
      case '[':
        ++depth;
        if (depth == 2 && c == '[' && pending_key == key) in_target = expect_element = true;
        break;
      case '}':
      case ']':
        if (depth == 2 && in_target) in_target = false;
        --depth;
        break;
      case ',':
        if (depth == 1) pending_key.clear();
        if (depth == 2 && in_target) expect_element = true;
        break;
      default: break;
    }
  }
  return lines;
}

}  // namespace

std::pair<Provenance, std::vector<Series>> parse_fits_json(const std::string& text, const std::string& name) {
  const detail::json document = detail::parse_json(text, name, true);
  const JsonFields top(document, name);
  const Provenance provenance = read_provenance(JsonFields(top.at("provenance"), name + " provenance"));
  std::vector<Series> series;
  const detail::json& list = top.array("series");
  const std::vector<int> lines = top_level_array_element_lines(text, "series");
  for (std::size_t i = 0; i < list.size(); ++i) {
    const std::string where = i < lines.size() ? fmt::format("{} line {} (series[{}])", name, lines[i], i)
                                                : fmt::format("{} series[{}]", name, i);
    series.push_back(read_series(JsonFields(list[i], where)));
  }
  return {provenance, std::move(series)};
}

std::vector<PointRecord> parse_points_jsonl(const std::string& text, const std::string& name) {
  std::vector<PointRecord> points;
  std::istringstream in(text);
  std::string line_text;
  int line = 0;
  while (std::getline(in, line_text)) {
    ++line;
    if (line_text.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = fmt::format("{} line {}", name, line);
    const detail::json object = detail::parse_json(line_text, where, false);
    points.push_back(read_point(JsonFields(object, where), line));
  }
  return points;
}

ResultsFolder read_results_folder(const fs::path& folder) {
  std::error_code error;
  if (!fs::exists(folder, error)) throw InputError(fmt::format("results folder {} does not exist", folder.string()));
  if (!fs::is_directory(folder, error)) throw InputError(fmt::format("{} is not a folder", folder.string()));
  const fs::path fits_path = folder / "fits.json";
  if (!fs::exists(fits_path, error)) {
    throw InputError(fmt::format("{} is missing: the results folder has no fitted series (is the sweep of "
                                 "`attncheck mc --out {}` finished? --resume completes it)",
                                 fits_path.string(), folder.string()));
  }
  ResultsFolder results;
  results.folder = folder;
  std::tie(results.provenance, results.series) = parse_fits_json(read_text_file(fits_path), fits_path.string());

  const fs::path points_path = folder / "points.jsonl";
  if (fs::exists(points_path, error)) {
    results.has_points_file = true;
    // A resumed sweep may repeat a point; the later line is the one that counts.
    std::map<std::pair<std::size_t, long long>, PointRecord> by_series_and_n;
    for (PointRecord& point : parse_points_jsonl(read_text_file(points_path), points_path.string())) {
      for (std::size_t s = 0; s < results.series.size(); ++s) {
        if (results.series[s].key == point.key) by_series_and_n.insert_or_assign({s, point.N}, point);
      }
    }
    for (std::size_t s = 0; s < results.series.size(); ++s) {
      Series& series = results.series[s];
      for (std::size_t i = 0; i < series.N.size(); ++i) {
        const auto found = by_series_and_n.find({s, series.N[i]});
        if (found != by_series_and_n.end()) series.points[i] = found->second;
      }
    }
  }
  return results;
}

}  // namespace attncheck::reports
