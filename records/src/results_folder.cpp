#include "attncheck/records/results_folder.hpp"

#include "attncheck/records/json_fields.hpp"

#include "attncheck/theory/common.hpp"

#include <fmt/format.h>

#include <charconv>
#include <cmath>

#include <map>
#include <system_error>
#include <tuple>

namespace attncheck::records {

namespace fs = std::filesystem;
using detail::JsonFields;
using theory::InputError;

std::string SeriesKey::label() const {
  std::string text = claim;
  if (reading) text += " " + *reading;
  text += fmt::format(" {} p={}", phi, p);
  if (alpha) text += fmt::format(" alpha={}", *alpha);
  if (mix) text += fmt::format(" mix alpha={}", *mix);
  if (scale != "none") text += " scale " + scale;
  if (scores != "projected") text += " scores " + scores;
  text += fmt::format(" {}, D={} d={}", estimand, D, d);
  if (dv) text += fmt::format(" dv={}", *dv);
  if (sigma_x != 1 || sigma_t != 1) text += fmt::format(" sigma_x={} sigma_t={}", sigma_x, sigma_t);
  return text;
}

std::string resume_key(std::string_view point_key, std::string_view estimand, std::uint64_t run_seed) {
  return fmt::format("{};estimand={};run_seed={}", point_key, estimand, run_seed);
}

namespace {

// The words of docs/results-format.md: whatever else a field holds did not come from attncheck.
constexpr std::string_view kClaims[] = {"C3", "C4", "C5", "C6", "C7", "C8", "C9", "custom"};
constexpr std::string_view kReadings[] = {"elementwise", "matrix"};
constexpr std::string_view kPhis[] = {"poly", "matpow", "softmax", "relu", "relu2",
                                                           "gelu", "softplus", "identity", "relu6", "sigmoid"};
constexpr std::string_view kEstimands[] = {"value", "dQ", "dK", "dS", "score-var", "row-sum", "row-mean", "dV"};
constexpr std::string_view kScoreModels[] = {"projected", "qk-layernorm", "iid-unit", "sign-coupled"};
constexpr std::string_view kStops[] = {"samples", "rel-se", "max-samples", "max-seconds"};
constexpr std::string_view kBackends[] = {"cpu", "cuda"};

// "none", "1/sqrt(N)", "1/k:K" or "N^-a" with K, a finite numbers.
void check_scale(const JsonFields& fields, const std::string& scale) {
  const auto number_after = [&](std::string_view prefix) {
    if (scale.rfind(prefix, 0) != 0) return false;
    const std::string_view rest = std::string_view(scale).substr(prefix.size());
    double value = 0;
    const auto [end, error] = std::from_chars(rest.data(), rest.data() + rest.size(), value);
    return !rest.empty() && error == std::errc() && end == rest.data() + rest.size() && std::isfinite(value);
  };
  if (scale == "none" || scale == "1/sqrt(N)" || number_after("1/k:") || number_after("N^-")) return;
  fields.fail(fmt::format("\"scale\" must be \"none\", \"1/sqrt(N)\", \"1/k:K\" or \"N^-a\" with numbers K, a, got {}",
                          nlohmann::json(scale).dump()));
}

SeriesKey read_key(const JsonFields& fields) {
  SeriesKey key;
  key.claim = fields.word("claim", kClaims);
  key.reading = fields.word_or_null("reading", kReadings);
  key.phi = fields.word("phi", kPhis);
  key.p = fields.integer("p");
  key.alpha = fields.number_or_null("alpha");
  key.mix = fields.number_or_null("mix");
  if (key.mix && !(*key.mix >= 0 && *key.mix <= 1)) fields.fail(fmt::format("\"mix\" = {} is not in [0, 1]", *key.mix));
  key.dv = fields.integer_or_null("dv");
  if (key.dv && *key.dv < 1) fields.fail(fmt::format("\"dv\" = {} must be >= 1", *key.dv));
  key.scale = fields.text("scale");
  check_scale(fields, key.scale);
  key.D = fields.integer("D");
  key.d = fields.integer("d");
  if (key.D < 1 || key.d < 1) fields.fail(fmt::format("D = {} and d = {} must be >= 1", key.D, key.d));
  key.estimand = fields.word("estimand", kEstimands);
  key.sigma_x = fields.number("sigma_x");
  key.sigma_t = fields.number("sigma_t");
  if (const auto scores = fields.word_or_null("scores", kScoreModels)) key.scores = *scores;
  return key;
}

Verdict read_verdict(const JsonFields& fields) {
  const std::string word = fields.word("verdict", {"holds", "tight", "violated", "inconclusive"});
  for (Verdict v : {Verdict::holds, Verdict::tight, Verdict::violated, Verdict::inconclusive}) {
    if (word == to_string(v)) return v;
  }
  fields.fail("unreachable verdict");
}

void check_estimate(const JsonFields& fields, const SeriesKey& key, double mean, double se, const char* what) {
  // Norms and second moments are never negative; a score-var sample is a score, and a row sum of an activation
  // with negative values (identity, gelu) a sum of them, which may be.
  const bool signed_estimate = key.estimand == "score-var" || key.estimand == "row-sum" || key.estimand == "row-mean";
  if (mean < 0 && !signed_estimate) fields.fail(fmt::format("{} = {} is negative, but it estimates a norm or a second moment", what, mean));
  if (se < 0) fields.fail(fmt::format("standard error of {} = {} is negative", what, se));
}

Provenance read_provenance(const JsonFields& fields) {
  Provenance p;
  p.version = fields.scalar_text("version");
  p.date = fields.scalar_text("date");
  p.machine = fields.scalar_text("machine");
  p.backend = fields.word("backend", kBackends);
  p.threads = fields.count_text("threads");
  p.run_seed = fields.count_text("run_seed");
  p.command = fields.scalar_text("command");
  p.wall_seconds = fields.number_or_null("wall_seconds");
  return p;
}

std::optional<LocalExponentRecord> read_local_exponent(const JsonFields& fields, const char* key) {
  if (fields.is_null(key)) return std::nullopt;
  const JsonFields local(fields.at(key), fields.where() + " " + key);
  LocalExponentRecord r;
  if (local.has("window")) r.window = local.numbers("window");
  r.exponent = local.number_or_null("exponent");
  if (!local.is_null("interval")) {
    const auto [lo, hi] = local.interval_or_nan("interval");
    if (std::isfinite(lo) && std::isfinite(hi)) r.interval = std::make_pair(lo, hi);
  }
  return r;
}

Series read_series(const JsonFields& fields) {
  Series s;
  s.key = read_key(fields);
  s.formula = fields.text("formula");
  s.slope = fields.number_or_null("slope");
  if (!fields.is_null("slope_ci")) s.slope_ci = fields.interval("slope_ci");
  s.intercept = fields.number_or_null("intercept");
  s.claimed_exponent = fields.number_or_null("claimed_exponent");
  s.tolerance = fields.number_or_null("tolerance");
  if (s.tolerance && *s.tolerance < 0) fields.fail(fmt::format("\"tolerance\" = {} is negative", *s.tolerance));
  if (!fields.is_null("verdict")) s.verdict = read_verdict(fields);
  if (const auto basis = fields.word_or_null("basis", {"exact", "asymptotic-fit"})) s.basis = basis_from_word(*basis);
  s.verdict_rule = fields.text_or_null("verdict_rule");
  s.verdict_reason = fields.text_or_null("verdict_reason");
  s.finding = fields.text_or_null("finding");
  s.claims_value = fields.word_or_null("claim_form", {"exponent", "equality"}).value_or("exponent") == "equality";
  if (fields.has("counts_for_exit") && fields.at("counts_for_exit").is_boolean()) {
    s.counts_for_exit = fields.at("counts_for_exit").get<bool>();
  }
  if (!fields.is_null("diagnostic")) {
    const JsonFields diagnostic(fields.at("diagnostic"), fields.where() + " diagnostic");
    s.jensen_first = diagnostic.number_or_null("jensen_ratio_first");
    s.jensen_last = diagnostic.number_or_null("jensen_ratio_last");
    s.jensen_source = diagnostic.word_or_null("jensen_ratio_source", {"exact", "estimated"}).value_or("");
  }
  s.local_exponent = read_local_exponent(fields, "local_exponent");
  s.cross_check = read_local_exponent(fields, "cross_check");
  if (s.slope.has_value() != s.slope_ci.has_value()) fields.fail("\"slope\" and \"slope_ci\" must both be given or both null");
  s.x_variable = fields.word_or_null("fit_variable", {"N", "d"}).value_or("N");
  s.fit_of = fields.word_or_null("fit_of", {"mean", "mean_sq"}).value_or("mean");
  s.N = fields.integers("N");
  s.x = s.x_variable == "d" ? fields.integers("d_values") : s.N;
  s.mean = fields.numbers_or_nan("mean");
  s.se = fields.numbers_or_nan("se");
  s.exact_sq = fields.numbers_or_null("exact_sq");
  const std::size_t n = s.N.size();
  s.exact_mean = fields.has("exact_mean") ? fields.numbers_or_null("exact_mean") : std::vector<std::optional<double>>(n);
  s.mean_sq = fields.has("mean_sq") ? fields.numbers_or_nan("mean_sq") : std::vector<double>(n, std::nan(""));
  s.se_sq = fields.has("se_sq") ? fields.numbers_or_nan("se_sq") : std::vector<double>(n, std::nan(""));
  if (n == 0) fields.fail("\"N\" is empty: a series needs at least one point");
  for (const auto& [name, size] : {std::pair<const char*, std::size_t>{"mean", s.mean.size()}, {"se", s.se.size()},
                                   {"exact_sq", s.exact_sq.size()}, {"exact_mean", s.exact_mean.size()},
                                   {"mean_sq", s.mean_sq.size()},
                                   {"se_sq", s.se_sq.size()}, {"d_values", s.x.size()}}) {
    if (size != n) {
      fields.fail(fmt::format("\"{}\" has {} entries but \"N\" has {}: one entry per point is needed", name, size, n));
    }
  }
  const std::string x_name = s.x_variable == "d" ? "d_values" : "N";
  for (std::size_t i = 0; i < n; ++i) {
    if (s.N[i] < 1) fields.fail(fmt::format("N[{}] = {} must be >= 1", i, s.N[i]));
    if (s.x[i] < 1) fields.fail(fmt::format("{}[{}] = {} must be >= 1", x_name, i, s.x[i]));
    if (i > 0 && s.x[i] <= s.x[i - 1]) {
      fields.fail(fmt::format("\"{}\" must increase, but {}[{}] = {} follows {}", x_name, x_name, i, s.x[i], s.x[i - 1]));
    }
    check_estimate(fields, s.key, s.mean[i], s.se[i], fmt::format("mean[{}]", i).c_str());
    if (s.exact_sq[i] && *s.exact_sq[i] < 0) fields.fail(fmt::format("exact_sq[{}] = {} is negative", i, *s.exact_sq[i]));
  }
  s.points.assign(n, std::nullopt);
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
  r.mean = fields.number_or_nan("mean");
  r.se = fields.number_or_nan("se");
  check_estimate(fields, r.key, r.mean, r.se, "\"mean\"");
  std::tie(r.ci95_lo, r.ci95_hi) = fields.interval_or_nan("ci95");
  r.mean_sq = fields.number_or_nan("mean_sq");
  r.se_sq = fields.number_or_nan("se_sq");
  check_estimate(fields, SeriesKey{}, r.mean_sq, r.se_sq, "\"mean_sq\"");
  r.exact_sq = fields.number_or_null("exact_sq");
  r.z_exact_sq = fields.number_or_null("z_exact_sq");
  r.exact_mean = fields.number_or_null("exact_mean");
  r.z_exact_mean = fields.number_or_null("z_exact_mean");
  r.jensen_bound = fields.number_or_null("jensen_bound");
  r.sample_bound = fields.number_or_null("sample_bound");
  r.sample_max = fields.number_or_null("sample_max");
  r.se_reliable = fields.boolean("se_reliable");
  r.unreliable_because = fields.text_or_null("unreliable_because");
  r.stopped_by = fields.word("stopped_by", kStops);
  r.seed = fields.count_text("seed");
  r.run_seed = fields.count_text("run_seed");
  r.backend = fields.word("backend", kBackends);
  r.threads = fields.count_text("threads");
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
  detail::for_each_json_line(text, name, [&](const JsonFields& fields, int line) { points.push_back(read_point(fields, line)); });
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
    // A point belongs to a series when they agree on everything but the swept variable (N, or d for C8).
    std::map<std::pair<std::size_t, long long>, PointRecord> by_series_and_x;
    for (PointRecord& point : parse_points_jsonl(read_text_file(points_path), points_path.string())) {
      for (std::size_t s = 0; s < results.series.size(); ++s) {
        const Series& series = results.series[s];
        const bool over_d = series.x_variable == "d";
        SeriesKey key = point.key;
        if (over_d) key.d = series.key.d;
        if (key == series.key) by_series_and_x.insert_or_assign({s, over_d ? point.key.d : point.N}, point);
      }
    }
    for (std::size_t s = 0; s < results.series.size(); ++s) {
      Series& series = results.series[s];
      for (std::size_t i = 0; i < series.x.size(); ++i) {
        const auto found = by_series_and_x.find({s, series.x[i]});
        if (found != by_series_and_x.end() && found->second.N == series.N[i]) series.points[i] = found->second;
      }
    }
  }
  return results;
}

}  // namespace attncheck::records
