#include "attncheck/records/results_folder.hpp"

#include "attncheck/records/claims.hpp"
#include "attncheck/records/json_fields.hpp"
#include "attncheck/records/point_statistics.hpp"
#include "attncheck/records/json_output.hpp"

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

std::optional<std::string_view> SeriesKey::reading() const { return theory::reading_of(activation); }

std::string SeriesKey::label() const {
  std::string text = claim;
  if (const auto r = reading()) text += fmt::format(" {}", *r);
  text += theory::takes_p(activation) ? fmt::format(" {} p={}", theory::phi_label(activation), activation.p)
                                      : fmt::format(" {}", theory::phi_label(activation));
  if (alpha) text += fmt::format(" alpha={}", *alpha);
  if (mix) text += fmt::format(" mix alpha={}", *mix);
  if (scale != "none") text += " scale " + scale;
  if (scores != theory::ScoreModel::projected) text += fmt::format(" scores {}", theory::term_of(scores).word);
  text += fmt::format(" {}, D={} d={}", theory::term_of(estimand).word, D, d);
  if (dv) text += fmt::format(" dv={}", *dv);
  if (sigma_x != 1 || sigma_t != 1) text += fmt::format(" sigma_x={} sigma_t={}", sigma_x, sigma_t);
  return text;
}

std::string resume_key(std::string_view point_key, std::string_view estimand, std::uint64_t run_seed) {
  return fmt::format("{};estimand={};run_seed={}", point_key, estimand, run_seed);
}

namespace {

// The words of docs/results-format.md: whatever else a field holds did not come from attncheck. The vocabulary's
// (theory/vocabulary.hpp, records/claims.hpp) are its tables' words.
constexpr std::string_view kReadings[] = {"elementwise", "matrix"};
constexpr std::string_view kStops[] = {"samples", "rel-se", "max-samples", "max-seconds"};

template <class Table>
std::vector<std::string_view> words(const Table& table) {
  std::vector<std::string_view> out;
  for (const auto& term : table) out.push_back(term.word);
  return out;
}

const std::vector<std::string_view>& claim_words() {
  static const std::vector<std::string_view> ids = [] {
    std::vector<std::string_view> out = sampled_claim_ids();
    out.push_back("custom");
    return out;
  }();
  return ids;
}
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
  key.claim = fields.word("claim", claim_words());
  fields.word_or_null("reading", kReadings);  // checked; it follows from the activation
  static const std::vector<std::string_view> phis = [] {
    std::vector<std::string_view> out = words(theory::all_activations());
    out.push_back(theory::kExpressionWord);
    return out;
  }();
  const long long p = fields.integer("p");
  if (p < 0 || p > 1024) fields.fail(fmt::format("\"p\" = {} is not an exponent of the tool", p));
  const std::string phi = fields.word("phi", phis);
  if (phi == theory::kExpressionWord) {
    constexpr std::string_view kNormalizations[] = {"rows"};
    const bool rows = fields.word_or_null("normalize", kNormalizations).has_value();
    try {
      key.activation =
          theory::expression_activation(theory::PhiExpression::parse(fields.text("expression"), "\"expression\""),
                                        rows);
    } catch (const InputError& e) {
      fields.fail(e.what());
    }
  } else {
    key.activation = *theory::activation_from_word(phi, static_cast<int>(p));
  }
  key.activation.p = static_cast<int>(p);
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
  static const std::vector<std::string_view> estimands = words(theory::all_estimands());
  key.estimand = *theory::estimand_from_word(fields.word("estimand", estimands));
  key.sigma_x = fields.number("sigma_x");
  key.sigma_t = fields.number("sigma_t");
  static const std::vector<std::string_view> score_models = words(theory::all_score_models());
  if (const auto scores = fields.word_or_null("scores", score_models))
    key.scores = *theory::score_model_from_word(*scores);
  return key;
}

constexpr std::string_view kVerdictWords[] = {"holds", "tight", "violated", "inconclusive", "consistent"};
constexpr std::string_view kBasisWords[] = {"bound", "exact", "asymptotic-fit"};
constexpr std::string_view kBoundSides[] = {"upper", "lower"};

Verdict read_verdict(const JsonFields& fields) {
  const std::optional<Verdict> verdict = verdict_from_word(fields.word("verdict", kVerdictWords));
  if (!verdict) fields.fail("unreachable verdict");
  return *verdict;
}

ProvedBound read_proved_bound(const JsonFields& fields) {
  ProvedBound b;
  b.side = fields.word("side", kBoundSides) == "upper" ? ProvedBound::Side::upper : ProvedBound::Side::lower;
  b.exponent = fields.number_or_null("exponent");
  if (!b.exponent && b.side == ProvedBound::Side::lower)
    fields.fail("a lower bound needs an \"exponent\" (only an upper bound may say the quantity is 0)");
  b.deterministic = fields.boolean("deterministic");
  b.subpolynomial = fields.boolean("subpolynomial");
  b.statement = fields.text("statement");
  b.proof = fields.text("proof");
  return b;
}

void check_estimate(const JsonFields& fields, const SeriesKey& key, double mean, double se, const char* what) {
  // Norms and second moments are never negative; a score-var sample is a score, and a row sum of an activation
  // with negative values (identity, gelu) a sum of them, which may be.
  const bool signed_estimate = !theory::term_of(key.estimand).norm;
  if (mean < 0 && !signed_estimate)
    fields.fail(fmt::format("{} = {} is negative, but it estimates a norm or a second moment", what, mean));
  if (se < 0) fields.fail(fmt::format("standard error of {} = {} is negative", what, se));
}

std::uint64_t whole_number(const JsonFields& fields, const char* key);

Provenance read_provenance(const JsonFields& fields) {
  Provenance p;
  p.version = fields.scalar_text("version");
  p.date = fields.scalar_text("date");
  p.machine = fields.scalar_text("machine");
  if (fields.at("machine").is_object()) {
    const JsonFields machine(fields.at("machine"), fields.where() + " machine");
    if (machine.has("hostname")) p.hostname = machine.scalar_text("hostname");
    if (machine.has("cpu")) p.cpu = machine.scalar_text("cpu");
  }
  p.backend = fields.word("backend", kBackends);
  const std::uint64_t threads = whole_number(fields, "threads");
  if (threads > 1u << 20) fields.fail(fmt::format("\"threads\" = {} is not a thread count", threads));
  p.threads = static_cast<int>(threads);
  p.run_seed = whole_number(fields, "run_seed");
  p.precision = fields.word_or_null("precision", {"double", "mixed"});
  p.normals = fields.word_or_null("normals", {"scalar", "avx2", "avx512"});
  p.command = fields.scalar_text("command");
  p.wall_seconds = fields.number_or_null("wall_seconds");
  if (!fields.is_null("mixed_precision_bounds")) {
    auto& bounds = p.mixed_precision_bounds.emplace();
    const detail::json& list = fields.array("mixed_precision_bounds");
    for (std::size_t i = 0; i < list.size(); ++i) {
      const JsonFields bound(list[i], fmt::format("{} mixed_precision_bounds[{}]", fields.where(), i));
      bounds.push_back({static_cast<int>(bound.integer("p")), bound.integer("d"), bound.integer_or_null("D"),
                        bound.number("relative_bound_sum_sq")});
    }
  }
  if (!fields.is_null("ranks")) {
    const std::uint64_t ranks = whole_number(fields, "ranks");
    if (ranks < 1 || ranks > 1u << 24) fields.fail(fmt::format("\"ranks\" = {} is not a rank count", ranks));
    p.ranks = static_cast<int>(ranks);
  }
  if (!fields.is_null("hosts")) {
    auto& hosts = p.hosts.emplace();
    for (const detail::json& host : fields.array("hosts")) {
      if (!host.is_string()) fields.fail("\"hosts\" holds something that is not a host name");
      hosts.push_back(host.get<std::string>());
    }
  }
  if (!fields.is_null("rank_devices")) {
    auto& devices = p.rank_devices.emplace();
    for (const detail::json& device : fields.array("rank_devices")) {
      if (device.is_null()) {
        devices.push_back(std::nullopt);
      } else if (device.is_number_integer() && device.get<long long>() >= 0 && device.get<long long>() < 1 << 16) {
        devices.push_back(static_cast<int>(device.get<long long>()));
      } else {
        fields.fail(fmt::format("\"rank_devices\" holds {}, not a device number or null", device.dump()));
      }
    }
  }
  return p;
}

std::vector<double> numbers_or_empty(const JsonFields& fields, const char* key) {
  return fields.is_null(key) ? std::vector<double>{} : fields.numbers(key);
}

std::optional<LocalExponentRecord> read_local_exponent(const JsonFields& fields, const char* key) {
  if (fields.is_null(key)) return std::nullopt;
  const JsonFields local(fields.at(key), fields.where() + " " + key);
  LocalExponentRecord r;
  if (local.has("window")) r.window = local.numbers("window");
  r.exponent = local.number_or_null("exponent");
  r.sampling_half_width = local.number_or_null("sampling_half_width");
  r.missing = local.text_or_null("missing");
  r.previous = local.number_or_null("previous");
  if (local.has("systematic")) r.systematic = local.number_or_nan("systematic");
  if (!local.is_null("interval")) {
    const auto [lo, hi] = local.interval_or_nan("interval");
    if (std::isfinite(lo) && std::isfinite(hi)) r.interval = std::make_pair(lo, hi);
  }
  r.unreliable_at = numbers_or_empty(local, "unreliable_at");
  if (!local.is_null("windows")) {
    const detail::json& list = local.array("windows");
    for (std::size_t i = 0; i < list.size(); ++i) {
      const JsonFields window(list[i], fmt::format("{} windows[{}]", local.where(), i));
      r.windows.push_back({window.number("first"), window.number("last"), window.number_or_nan("exponent"),
                           window.number_or_nan("sampling_half_width")});
    }
  }
  r.climb_per_doubling = local.number_or_null("climb_per_doubling");
  r.climb_se = local.number_or_null("climb_se");
  if (!local.is_null("rising")) r.rising = local.boolean("rising");
  r.disagreement = local.number_or_null("disagreement");
  return r;
}

std::optional<ViolationTestRecord> read_violation_test(const JsonFields& fields) {
  if (fields.is_null("violation_test")) return std::nullopt;
  const JsonFields test(fields.at("violation_test"), fields.where() + " violation_test");
  ViolationTestRecord r;
  r.x_small = test.number("x_small");
  r.x_large = test.number("x_large");
  r.upper_at_small = test.number_or_nan("upper_at_small");
  r.upper_source = test.word("upper_source", {"exact", "estimate + z se"});
  r.lower_at_large = test.number_or_nan("lower_at_large");
  r.exponent_lower = test.number_or_nan("exponent_lower");
  r.level = test.number("level");
  if (!(r.level > 0 && r.level < 1)) test.fail(fmt::format("\"level\" = {} is not in (0, 1)", r.level));
  r.passed = test.boolean("passed");
  return r;
}

ExactLaw read_exact_law(const JsonFields& fields);

std::optional<ExactCheckRecord> read_exact_check(const JsonFields& fields) {
  if (fields.is_null("exact")) return std::nullopt;
  const JsonFields exact(fields.at("exact"), fields.where() + " exact");
  ExactCheckRecord r;
  if (!exact.is_null("law")) r.law = read_exact_law(JsonFields(exact.at("law"), exact.where() + " law"));
  r.max_abs_z = exact.number_or_null("max_abs_z");
  const auto count = [&](const char* key) {
    const long long n = exact.is_null(key) ? 0 : exact.integer(key);
    if (n < 0) exact.fail(fmt::format("\"{}\" = {} is negative", key, n));
    return static_cast<int>(std::min<long long>(n, INT32_MAX));
  };
  r.judged_points = count("judged_points");
  r.unjudged_points = count("unjudged_points");
  r.disagrees_at = numbers_or_empty(exact, "disagrees_at");
  r.alarm_abs_z = exact.number_or_null("alarm_abs_z");
  if (!exact.is_null("family_points")) r.family_points = count("family_points");
  r.family_level = exact.number_or_null("family_level");
  r.bound_checked_points = count("bound_checked_points");
  r.max_sample_over_bound = exact.number_or_null("max_sample_over_bound");
  r.bound_exceeded_at = numbers_or_empty(exact, "bound_exceeded_at");
  r.min_sample_over_lower_bound = exact.number_or_null("min_sample_over_lower_bound");
  r.lower_bound_undercut_at = numbers_or_empty(exact, "lower_bound_undercut_at");
  r.confirmed = exact.is_null("confirmed") ? r.disagrees_at.empty() : exact.boolean("confirmed");
  return r;
}

Series read_series(const JsonFields& fields) {
  Series s;
  s.key = read_key(fields);
  s.formula = fields.text("formula");
  s.series_id = fields.text_or_null("series_key").value_or("");
  if (!fields.is_null("run_seed")) s.run_seed = whole_number(fields, "run_seed");
  s.slope = fields.number_or_null("slope");
  s.slope_se = fields.number_or_null("slope_se");
  s.reduced_chi_sq = fields.number_or_null("reduced_chi_sq");
  if (!fields.is_null("fit_points")) {
    const long long points = fields.integer("fit_points");
    if (points < 0) fields.fail(fmt::format("\"fit_points\" = {} is negative", points));
    s.fit_points = static_cast<int>(std::min<long long>(points, INT32_MAX));
  }
  if (!fields.is_null("slope_ci")) s.slope_ci = fields.interval("slope_ci");
  s.intercept = fields.number_or_null("intercept");
  s.claimed_exponent = fields.number_or_null("claimed_exponent");
  s.tolerance = fields.number_or_null("tolerance");
  if (s.tolerance && *s.tolerance < 0) fields.fail(fmt::format("\"tolerance\" = {} is negative", *s.tolerance));
  if (!fields.is_null("verdict")) s.verdict = read_verdict(fields);
  if (const auto basis = fields.word_or_null("basis", kBasisWords)) s.basis = basis_from_word(*basis);
  s.verdict_rule = fields.text_or_null("verdict_rule");
  s.verdict_reason = fields.text_or_null("verdict_reason");
  s.extend_to = fields.number_or_null("extend_to");
  s.to_settle = fields.text_or_null("to_settle");
  if (!fields.is_null("se_reliable")) s.se_reliable = fields.boolean("se_reliable");
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
  s.exact = read_exact_check(fields);
  if (!fields.is_null("proved_bounds")) {
    const detail::json& list = fields.array("proved_bounds");
    for (std::size_t i = 0; i < list.size(); ++i) {
      s.proved_bounds.push_back(
          read_proved_bound(JsonFields(list[i], fmt::format("{} proved_bounds[{}]", fields.where(), i))));
    }
  }
  if (!fields.is_null("decided_by"))
    s.decided_by = read_proved_bound(JsonFields(fields.at("decided_by"), fields.where() + " decided_by"));
  s.violation_test = read_violation_test(fields);
  if (s.slope.has_value() != s.slope_ci.has_value())
    fields.fail("\"slope\" and \"slope_ci\" must both be given or both null");
  s.x_variable = fields.word_or_null("fit_variable", {"N", "d"}).value_or("N");
  s.fit_of = fields.word_or_null("fit_of", {"mean", "mean_sq"}).value_or("mean");
  s.N = fields.integers("N");
  if (s.x_variable == "d" || fields.has("d_values")) s.d_values = fields.integers("d_values");
  s.x = s.x_variable == "d" ? s.d_values : s.N;
  s.mean = fields.numbers_or_nan("mean");
  s.se = fields.numbers_or_nan("se");
  s.exact_sq = fields.numbers_or_null("exact_sq");
  const std::size_t n = s.N.size();
  s.exact_mean =
      fields.has("exact_mean") ? fields.numbers_or_null("exact_mean") : std::vector<std::optional<double>>(n);
  s.mean_sq = fields.has("mean_sq") ? fields.numbers_or_nan("mean_sq") : std::vector<double>(n, std::nan(""));
  s.se_sq = fields.has("se_sq") ? fields.numbers_or_nan("se_sq") : std::vector<double>(n, std::nan(""));
  if (n == 0) fields.fail("\"N\" is empty: a series needs at least one point");
  for (const auto& [name, size] : {std::pair<const char*, std::size_t>{"mean", s.mean.size()},
                                   {"se", s.se.size()},
                                   {"exact_sq", s.exact_sq.size()},
                                   {"exact_mean", s.exact_mean.size()},
                                   {"mean_sq", s.mean_sq.size()},
                                   {"se_sq", s.se_sq.size()},
                                   {"d_values", s.x.size()}}) {
    if (size != n) {
      fields.fail(fmt::format("\"{}\" has {} entries but \"N\" has {}: one entry per point is needed", name, size, n));
    }
  }
  const std::string x_name = s.x_variable == "d" ? "d_values" : "N";
  for (std::size_t i = 0; i < n; ++i) {
    if (s.N[i] < 1) fields.fail(fmt::format("N[{}] = {} must be >= 1", i, s.N[i]));
    if (s.x[i] < 1) fields.fail(fmt::format("{}[{}] = {} must be >= 1", x_name, i, s.x[i]));
    if (i > 0 && s.x[i] <= s.x[i - 1]) {
      fields.fail(
          fmt::format("\"{}\" must increase, but {}[{}] = {} follows {}", x_name, x_name, i, s.x[i], s.x[i - 1]));
    }
    check_estimate(fields, s.key, s.mean[i], s.se[i], fmt::format("mean[{}]", i).c_str());
    if (s.exact_sq[i] && *s.exact_sq[i] < 0)
      fields.fail(fmt::format("exact_sq[{}] = {} is negative", i, *s.exact_sq[i]));
  }
  s.points.assign(n, std::nullopt);
  return s;
}

std::uint64_t whole_number(const JsonFields& fields, const char* key) {
  const std::string text = fields.count_text(key);
  std::uint64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size()) {
    fields.fail(fmt::format("\"{}\" = {} is not a whole number below 2^64", key, text));
  }
  return value;
}

// Files without "format_version" are of an earlier version, which this reader still reads.
void check_format_version(const JsonFields& fields) {
  if (fields.is_null("format_version")) return;
  const long long version = fields.integer("format_version");
  if (version < 1 || version > kResultsFormatVersion) {
    fields.fail(
        fmt::format("\"format_version\" {} is not one this attncheck reads (1 to {}): the file was written by "
                    "{} attncheck; read it with that version",
                    version, kResultsFormatVersion, version > kResultsFormatVersion ? "a later" : "another"));
  }
}

ExactLaw read_exact_law(const JsonFields& fields) {
  ExactLaw law;
  law.of = fields.text("of");
  law.bound = fields.boolean("bound");
  law.deterministic = fields.has("deterministic") ? fields.boolean("deterministic") : false;
  law.exponent = fields.number_or_null("exponent");
  law.constant = fields.number_or_nan("constant");
  return law;
}

std::optional<bool> boolean_or_absent(const JsonFields& fields, const char* key) {
  if (fields.is_null(key)) return std::nullopt;
  return fields.boolean(key);
}

PointRecord read_point(const JsonFields& fields, int line) {
  check_format_version(fields);
  PointRecord r;
  r.line = line;
  r.key = read_key(fields);
  r.formula = fields.text("formula");
  r.inner = fields.number("inner");
  r.outer_factor = fields.has("outer_factor") ? fields.number_or_nan("outer_factor") : 1.0;
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
  if (fields.has("ci95_sq")) std::tie(r.ci95_sq_lo, r.ci95_sq_hi) = fields.interval_or_nan("ci95_sq");
  r.se_sq_floor = fields.number_or_null("se_sq_floor");
  r.exact_sq = fields.number_or_null("exact_sq");
  r.z_exact_sq = fields.number_or_null("z_exact_sq");
  r.exact_mean = fields.number_or_null("exact_mean");
  r.z_exact_mean = fields.number_or_null("z_exact_mean");
  r.exact_out_of_range = boolean_or_absent(fields, "exact_out_of_range").value_or(false);
  r.jensen_bound = fields.number_or_null("jensen_bound");
  r.jensen_ratio = fields.number_or_null("jensen_ratio");
  r.jensen_ratio_estimated = fields.number_or_null("jensen_ratio_estimated");
  r.sample_bound = fields.number_or_null("sample_bound");
  r.sample_max = fields.number_or_null("sample_max");
  r.sample_lower_bound = fields.number_or_null("sample_lower_bound");
  r.sample_min = fields.number_or_null("sample_min");
  r.mean_lower_bound = fields.number_or_null("mean_lower_bound");
  r.mean_lower_bound_level = fields.number_or_null("mean_lower_bound_level");
  if (r.mean_lower_bound_level && !(*r.mean_lower_bound_level > 0 && *r.mean_lower_bound_level < 1)) {
    fields.fail(fmt::format("\"mean_lower_bound_level\" = {} is not in (0, 1)", *r.mean_lower_bound_level));
  }
  r.se_reliable = fields.boolean("se_reliable");
  r.se_mean_reliable = boolean_or_absent(fields, "se_mean_reliable");
  r.se_sq_reliable = boolean_or_absent(fields, "se_sq_reliable");
  r.unreliable_because = fields.text_or_null("unreliable_because");
  for (auto [key, value] : {std::pair<const char*, double*>{"effective_samples", &r.effective_samples},
                            {"effective_samples_sq", &r.effective_samples_sq},
                            {"variance_relative_se", &r.variance_relative_se},
                            {"variance_relative_se_sq", &r.variance_relative_se_sq},
                            {"se_plain", &r.se_plain},
                            {"se_batch_means", &r.se_batch_means}}) {
    *value = fields.number_or_null(key).value_or(std::nan(""));
  }
  r.stopped_by = fields.word("stopped_by", kStops);
  r.seed = whole_number(fields, "seed");
  r.run_seed = whole_number(fields, "run_seed");
  r.backend = fields.word("backend", kBackends);
  const std::uint64_t threads = whole_number(fields, "threads");
  if (threads > 1u << 20) fields.fail(fmt::format("\"threads\" = {} is not a thread count", threads));
  r.threads = static_cast<int>(threads);
  r.wall_seconds = fields.number("wall_seconds");
  r.claimed_exponent = fields.number_or_null("claimed_exponent");
  r.claim_form = fields.word_or_null("claim_form", {"exponent", "equality"}).value_or("exponent");
  r.claimed_value = fields.number_or_null("claimed_value");
  if (!fields.is_null("exact_law"))
    r.exact_law = read_exact_law(JsonFields(fields.at("exact_law"), fields.where() + " exact_law"));
  r.fit_variable = fields.word_or_null("fit_variable", {"N", "d"}).value_or("N");
  r.fit_of = fields.word_or_null("fit_of", {"mean", "mean_sq"}).value_or("mean");
  r.counts_for_exit = boolean_or_absent(fields, "counts_for_exit").value_or(false);
  r.resume_id = fields.has("key") ? fields.text("key") : "";
  r.series_id = fields.has("series_key") ? fields.text("series_key") : "";
  r.path = fields.text_or_null("path");
  if (const auto problem = point_record_inconsistency(r, !fields.is_null("format_version"))) {
    fields.fail(*problem +
                ": the record does not agree with itself, so it was changed after attncheck wrote it (delete the line "
                "and `mc --resume` samples the point again)");
  }
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
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false, last_string = current;
      else
        current += c;
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

FitsDocument parse_fits_json(const std::string& text, const std::string& name) {
  const detail::json document = detail::parse_json(text, name, true);
  const JsonFields top(document, name);
  check_format_version(top);
  FitsDocument fits;
  if (top.has("runs")) {
    const detail::json& runs = top.array("runs");
    for (std::size_t i = 0; i < runs.size(); ++i) {
      fits.runs.push_back(read_provenance(JsonFields(runs[i], fmt::format("{} runs[{}]", name, i))));
    }
  }
  // Folders written before "runs" existed name their last run only.
  if (fits.runs.empty()) fits.runs.push_back(read_provenance(JsonFields(top.at("provenance"), name + " provenance")));
  std::vector<Series>& series = fits.series;
  const detail::json& list = top.array("series");
  const std::vector<int> lines = top_level_array_element_lines(text, "series");
  for (std::size_t i = 0; i < list.size(); ++i) {
    const std::string where = i < lines.size() ? fmt::format("{} line {} (series[{}])", name, lines[i], i)
                                               : fmt::format("{} series[{}]", name, i);
    series.push_back(read_series(JsonFields(list[i], where)));
  }
  return fits;
}

std::vector<PointRecord> parse_points_jsonl(const std::string& text, const std::string& name) {
  std::vector<PointRecord> points;
  detail::for_each_json_line(text, name,
                             [&](const JsonFields& fields, int line) { points.push_back(read_point(fields, line)); });
  return points;
}

namespace {

detail::json number_or_null(double x) { return std::isfinite(x) ? detail::json(x) : detail::json(nullptr); }
detail::json number_or_null(const std::optional<double>& x) { return x ? number_or_null(*x) : detail::json(nullptr); }
template <class T>
detail::json value_or_null(const std::optional<T>& x) {
  return x ? detail::json(*x) : detail::json(nullptr);
}

}  // namespace

std::string_view to_string(ProvedBound::Side side) { return side == ProvedBound::Side::upper ? "upper" : "lower"; }

void to_json(nlohmann::json& out, const ProvedBound& b) {
  out = {{"side", to_string(b.side)},        {"exponent", number_or_null(b.exponent)},
         {"deterministic", b.deterministic}, {"subpolynomial", b.subpolynomial},
         {"statement", b.statement},         {"proof", b.proof}};
}

void to_json(nlohmann::json& out, const ViolationTestRecord& t) {
  out = {{"x_small", t.x_small},
         {"x_large", t.x_large},
         {"upper_at_small", number_or_null(t.upper_at_small)},
         {"upper_source", t.upper_source},
         {"lower_at_large", number_or_null(t.lower_at_large)},
         {"exponent_lower", number_or_null(t.exponent_lower)},
         {"level", t.level},
         {"passed", t.passed}};
}

void to_json(nlohmann::json& out, const ExactLaw& law) {
  out = {{"of", law.of},
         {"bound", law.bound},
         {"deterministic", law.deterministic},
         {"exponent", number_or_null(law.exponent)},
         {"vanishes", !law.exponent.has_value()},
         {"constant", number_or_null(law.constant)}};
}

namespace {

// "phi" and "p"; for an expression also the expression, its derivative (for the reader; not read back) and
// "normalize".
void write_phi(detail::json& out, const theory::Activation& activation) {
  out["phi"] = theory::phi_word(activation);
  out["p"] = activation.p;
  if (activation.kind != theory::ActivationKind::expression) return;
  out["expression"] = activation.expression->text();
  out["derivative"] = activation.expression->derivative_text();
  out["normalize"] = activation.normalize_rows ? detail::json("rows") : detail::json(nullptr);
}

}  // namespace

void to_json(nlohmann::json& out, const PointRecord& r) {
  out = detail::json::object();
  out["format_version"] = kResultsFormatVersion;
  out["claim"] = r.key.claim;
  const std::optional<std::string_view> reading = r.key.reading();
  out["reading"] = reading ? detail::json(*reading) : detail::json(nullptr);
  write_phi(out, r.key.activation);
  out["alpha"] = number_or_null(r.key.alpha);
  out["mix"] = number_or_null(r.key.mix);
  out["dv"] = value_or_null(r.key.dv);
  out["sample_bound"] = number_or_null(r.sample_bound);
  out["sample_max"] = number_or_null(r.sample_max);
  out["sample_lower_bound"] = number_or_null(r.sample_lower_bound);
  out["sample_min"] = number_or_null(r.sample_min);
  out["scale"] = r.key.scale;
  out["scores"] = theory::term_of(r.key.scores).word;
  out["inner"] = number_or_null(r.inner);
  out["outer_factor"] = number_or_null(r.outer_factor);
  out["formula"] = r.formula;
  out["N"] = r.N;
  out["D"] = r.key.D;
  out["d"] = r.key.d;
  out["estimand"] = theory::term_of(r.key.estimand).word;
  out["samples"] = r.samples;
  out["mean_of"] = theory::term_of(r.key.estimand).mean_of;
  out["mean_sq_of"] = theory::term_of(r.key.estimand).mean_sq_of;
  out["mean"] = number_or_null(r.mean);
  out["se"] = number_or_null(r.se);
  out["ci95"] = {number_or_null(r.ci95_lo), number_or_null(r.ci95_hi)};
  out["mean_sq"] = number_or_null(r.mean_sq);
  out["se_sq"] = number_or_null(r.se_sq);
  out["ci95_sq"] = {number_or_null(r.ci95_sq_lo), number_or_null(r.ci95_sq_hi)};
  out["se_sq_floor"] = number_or_null(r.se_sq_floor);
  out["exact_sq"] = number_or_null(r.exact_sq);
  out["z_exact_sq"] = number_or_null(r.z_exact_sq);
  out["exact_mean"] = number_or_null(r.exact_mean);
  out["z_exact_mean"] = number_or_null(r.z_exact_mean);
  out["exact_out_of_range"] = r.exact_out_of_range;
  out["jensen_bound"] = number_or_null(r.jensen_bound);
  out["jensen_ratio"] = number_or_null(r.jensen_ratio);
  out["jensen_ratio_estimated"] = number_or_null(r.jensen_ratio_estimated);
  out["mean_lower_bound"] = number_or_null(r.mean_lower_bound);
  out["mean_lower_bound_level"] = number_or_null(r.mean_lower_bound_level);
  out["se_reliable"] = r.se_reliable;
  if (r.se_mean_reliable) out["se_mean_reliable"] = *r.se_mean_reliable;
  if (r.se_sq_reliable) out["se_sq_reliable"] = *r.se_sq_reliable;
  out["unreliable_because"] = value_or_null(r.unreliable_because);
  out["effective_samples"] = number_or_null(r.effective_samples);
  out["effective_samples_sq"] = number_or_null(r.effective_samples_sq);
  out["variance_relative_se"] = number_or_null(r.variance_relative_se);
  out["variance_relative_se_sq"] = number_or_null(r.variance_relative_se_sq);
  out["se_plain"] = number_or_null(r.se_plain);
  out["se_batch_means"] = number_or_null(r.se_batch_means);
  out["stopped_by"] = r.stopped_by;
  out["sigma_x"] = number_or_null(r.key.sigma_x);
  out["sigma_t"] = number_or_null(r.key.sigma_t);
  out["seed"] = r.seed;
  out["run_seed"] = r.run_seed;
  out["backend"] = r.backend;
  out["threads"] = r.threads;
  out["wall_seconds"] = number_or_null(r.wall_seconds);
  out["claimed_exponent"] = number_or_null(r.claimed_exponent);
  out["claim_form"] = r.claim_form;
  out["claimed_value"] = number_or_null(r.claimed_value);
  out["exact_law"] = r.exact_law ? detail::json(*r.exact_law) : detail::json(nullptr);
  out["fit_variable"] = r.fit_variable;
  out["fit_of"] = r.fit_of;
  out["counts_for_exit"] = r.counts_for_exit;
  out["key"] = r.resume_id;
  out["series_key"] = r.series_id;
  if (r.path) out["path"] = *r.path;
}

void from_json(const nlohmann::json& in, PointRecord& record) {
  record = read_point(JsonFields(in, "point record"), 0);
}

void to_json(nlohmann::json& out, const Provenance& p) {
  out = detail::json::object();
  out["version"] = p.version;
  out["date"] = p.date;
  out["machine"] = p.hostname.empty() && p.cpu.empty() ? detail::json(p.machine)
                                                       : detail::json{{"hostname", p.hostname}, {"cpu", p.cpu}};
  out["backend"] = p.backend;
  out["threads"] = p.threads;
  out["run_seed"] = p.run_seed;
  if (p.precision) out["precision"] = *p.precision;
  if (p.normals) out["normals"] = *p.normals;
  out["command"] = p.command;
  out["wall_seconds"] = number_or_null(p.wall_seconds);
  if (p.mixed_precision_bounds) {
    out["mixed_precision_bounds"] = detail::json::array();
    for (const MixedPrecisionBound& b : *p.mixed_precision_bounds) {
      detail::json bound = {{"p", b.p}, {"d", b.d}};
      if (b.D) bound["D"] = *b.D;
      bound["relative_bound_sum_sq"] = b.relative_bound_sum_sq;
      out["mixed_precision_bounds"].push_back(std::move(bound));
    }
  }
  if (p.ranks) out["ranks"] = *p.ranks;
  if (p.hosts) out["hosts"] = *p.hosts;
  if (p.rank_devices) {
    out["rank_devices"] = detail::json::array();
    for (const std::optional<int>& device : *p.rank_devices) {
      out["rank_devices"].push_back(device ? detail::json(*device) : detail::json(nullptr));
    }
  }
}

void from_json(const nlohmann::json& in, Provenance& provenance) {
  provenance = read_provenance(JsonFields(in, "provenance"));
}

void to_json(nlohmann::json& out, const LocalExponentRecord& e) {
  out = detail::json::object();
  out["window"] = e.window;
  out["missing"] = value_or_null(e.missing);
  if (e.window.size() >= 2) {
    out["exponent"] = number_or_null(e.exponent);
    out["sampling_half_width"] = number_or_null(e.sampling_half_width);
  }
  if (!e.missing) {
    out["previous"] = number_or_null(e.previous);
    out["systematic"] = number_or_null(e.systematic);
    out["interval"] = e.interval ? detail::json{number_or_null(e.interval->first), number_or_null(e.interval->second)}
                                 : detail::json{nullptr, nullptr};
  }
  out["unreliable_at"] = e.unreliable_at;
  out["windows"] = detail::json::array();
  for (const WindowExponentRecord& w : e.windows) {
    out["windows"].push_back({{"first", w.first},
                              {"last", w.last},
                              {"exponent", number_or_null(w.exponent)},
                              {"sampling_half_width", number_or_null(w.sampling_half_width)}});
  }
  out["climb_per_doubling"] = number_or_null(e.climb_per_doubling);
  out["climb_se"] = number_or_null(e.climb_se);
  out["rising"] = value_or_null(e.rising);
  out["disagreement"] = number_or_null(e.disagreement);
}

void to_json(nlohmann::json& out, const ExactCheckRecord& e) {
  out = {{"law", e.law ? detail::json(*e.law) : detail::json(nullptr)},
         {"max_abs_z", number_or_null(e.max_abs_z)},
         {"judged_points", e.judged_points},
         {"unjudged_points", e.unjudged_points},
         {"disagrees_at", e.disagrees_at},
         {"alarm_abs_z", number_or_null(e.alarm_abs_z)},
         {"family_points", value_or_null(e.family_points)},
         {"family_level", number_or_null(e.family_level)},
         {"bound_checked_points", e.bound_checked_points},
         {"max_sample_over_bound", number_or_null(e.max_sample_over_bound)},
         {"bound_exceeded_at", e.bound_exceeded_at},
         {"min_sample_over_lower_bound", number_or_null(e.min_sample_over_lower_bound)},
         {"lower_bound_undercut_at", e.lower_bound_undercut_at},
         {"confirmed", e.confirmed}};
}

void to_json(nlohmann::json& out, const Series& s) {
  const auto optional_interval = [](const std::optional<std::pair<double, double>>& interval) {
    return interval ? detail::json{number_or_null(interval->first), number_or_null(interval->second)}
                    : detail::json(nullptr);
  };
  const auto numbers = [](const auto& values) {
    detail::json list = detail::json::array();
    for (const auto& v : values) list.push_back(number_or_null(v));
    return list;
  };
  out = detail::json::object();
  out["claim"] = s.key.claim;
  const std::optional<std::string_view> reading = s.key.reading();
  out["reading"] = reading ? detail::json(*reading) : detail::json(nullptr);
  write_phi(out, s.key.activation);
  out["alpha"] = number_or_null(s.key.alpha);
  out["mix"] = number_or_null(s.key.mix);
  out["dv"] = value_or_null(s.key.dv);
  out["scale"] = s.key.scale;
  out["scores"] = theory::term_of(s.key.scores).word;
  out["D"] = s.key.D;
  out["d"] = s.key.d;
  out["estimand"] = theory::term_of(s.key.estimand).word;
  out["sigma_x"] = number_or_null(s.key.sigma_x);
  out["sigma_t"] = number_or_null(s.key.sigma_t);
  out["claimed_exponent"] = number_or_null(s.claimed_exponent);
  out["claim_form"] = s.claims_value ? "equality" : "exponent";
  out["counts_for_exit"] = s.counts_for_exit;
  out["fit_variable"] = s.x_variable;
  out["fit_of"] = s.fit_of;
  out["run_seed"] = value_or_null(s.run_seed);
  out["formula"] = s.formula;
  out["series_key"] = s.series_id;
  out["tolerance"] = number_or_null(s.tolerance);
  out["N"] = s.N;
  out["d_values"] = s.d_values;
  out["mean"] = numbers(s.mean);
  out["se"] = numbers(s.se);
  out["mean_sq"] = numbers(s.mean_sq);
  out["se_sq"] = numbers(s.se_sq);
  out["exact_sq"] = numbers(s.exact_sq);
  out["exact_mean"] = numbers(s.exact_mean);
  out["se_reliable"] = s.se_reliable;
  out["slope"] = number_or_null(s.slope);
  out["slope_ci"] = optional_interval(s.slope_ci);
  out["intercept"] = number_or_null(s.intercept);
  out["fit_points"] = s.fit_points;
  if (s.slope) {
    out["slope_se"] = number_or_null(s.slope_se);
    out["reduced_chi_sq"] = number_or_null(s.reduced_chi_sq);
  }
  out["diagnostic"] = {{"basis", "finite-N fit (diagnostic)"},
                       {"slope", out["slope"]},
                       {"slope_ci", out["slope_ci"]},
                       {"jensen_ratio_first", number_or_null(s.jensen_first)},
                       {"jensen_ratio_last", number_or_null(s.jensen_last)},
                       {"jensen_ratio_source",
                        s.jensen_source.empty() ? detail::json(nullptr) : detail::json(s.jensen_source)}};
  out["verdict"] = s.verdict ? detail::json(to_string(*s.verdict)) : detail::json(nullptr);
  out["basis"] = s.basis ? detail::json(to_string(*s.basis)) : detail::json(nullptr);
  out["verdict_rule"] = value_or_null(s.verdict_rule);
  out["verdict_reason"] = value_or_null(s.verdict_reason);
  out["extend_to"] = number_or_null(s.extend_to);
  out["to_settle"] = value_or_null(s.to_settle);
  out["local_exponent"] = value_or_null(s.local_exponent);
  out["cross_check"] = value_or_null(s.cross_check);
  out["exact"] = value_or_null(s.exact);
  out["proved_bounds"] = s.proved_bounds;
  out["decided_by"] = value_or_null(s.decided_by);
  out["violation_test"] = value_or_null(s.violation_test);
  out["finding"] = value_or_null(s.finding);
}

void from_json(const nlohmann::json& in, Series& series) { series = read_series(JsonFields(in, "series")); }

std::string fits_json_text(const std::vector<Provenance>& runs, const std::vector<Series>& series) {
  return json_text(detail::json{{"format_version", kResultsFormatVersion},
                                {"provenance", runs.back()},
                                {"runs", runs},
                                {"series", series}},
                   2) +
         "\n";
}

ResultsFolder read_results_folder(const fs::path& folder) {
  std::error_code error;
  if (!fs::exists(folder, error)) throw InputError(fmt::format("results folder {} does not exist", folder.string()));
  if (!fs::is_directory(folder, error)) throw InputError(fmt::format("{} is not a folder", folder.string()));
  const fs::path fits_path = folder / "fits.json";
  if (!fs::exists(fits_path, error)) {
    throw InputError(
        fmt::format("{} is missing: the results folder has no fitted series (is the sweep of "
                    "`attncheck mc --out {}` finished? --resume completes it)",
                    fits_path.string(), folder.string()));
  }
  ResultsFolder results;
  results.folder = folder;
  FitsDocument fits = parse_fits_json(read_text_file(fits_path), fits_path.string());
  results.runs = std::move(fits.runs);
  results.provenance = results.runs.back();
  results.series = std::move(fits.series);

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
