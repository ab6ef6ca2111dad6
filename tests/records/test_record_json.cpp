// The one JSON form of each results record: whatever the writer puts in a record, the reader gets back, field
// for field (doubles included: 17 significant digits are exact); a broken line or a later format version is
// refused naming the file and the line.

#include "attncheck/monte_carlo/cpu_backend.hpp"
#include "attncheck/monte_carlo/results.hpp"
#include "attncheck/records/input_file.hpp"
#include "attncheck/records/json_input.hpp"
#include "attncheck/records/point_statistics.hpp"
#include "attncheck/records/results_folder.hpp"

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <rapidcheck/catch.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <filesystem>
#include <fstream>
#include <string>
#include <tuple>
#include <vector>

using namespace attncheck;
using Catch::Matchers::Contains;
using nlohmann::json;

namespace {

// Generators of values the format allows, over nearly the whole range of a double (sums of two stay finite).
double any_finite() {
  return *rc::gen::suchThat(rc::gen::arbitrary<double>(), [](double x) { return std::abs(x) < 1e300; });
}
double any_non_negative() { return std::abs(any_finite()); }
// A number the writer may have had no finite value for (written null, read NaN).
double finite_or_nan() { return *rc::gen::arbitrary<bool>() ? any_finite() : NAN; }
std::optional<double> maybe_finite() {
  return *rc::gen::arbitrary<bool>() ? std::optional(any_finite()) : std::nullopt;
}
template <class T>
T one_of(std::initializer_list<T> values) {
  return *rc::gen::elementOf(std::vector<T>(values));
}
// Any ASCII, control characters, quotes and backslashes included (the writer's texts are UTF-8; nlohmann refuses
// to write invalid UTF-8, so arbitrary bytes are not text the format can hold).
std::string any_text() { return *rc::gen::container<std::string>(rc::gen::inRange<char>(0, 127)); }
std::optional<std::string> maybe_text() {
  return *rc::gen::arbitrary<bool>() ? std::optional(any_text()) : std::nullopt;
}
long long at_least_one() { return *rc::gen::inRange<long long>(1, 1LL << 40); }

records::SeriesKey any_series_key() {
  records::SeriesKey key;
  key.claim = one_of<std::string>({"C3", "C4", "C5", "C6", "C7", "C8", "C9", "custom"});
  const auto& activation = *rc::gen::elementOf(theory::all_activations());
  key.activation = {activation.kind, activation.h, *rc::gen::inRange(1, 65)};
  key.alpha = maybe_finite();
  if (*rc::gen::arbitrary<bool>()) {
    key.mix = *rc::gen::inRange(0, 1001) / 1000.0;
    key.dv = at_least_one();
  }
  key.scale = one_of<std::string>({"none", "1/sqrt(N)", "1/k:8", "N^-0.75"});
  key.D = at_least_one();
  key.d = at_least_one();
  key.estimand = (*rc::gen::elementOf(theory::all_estimands())).value;
  key.sigma_x = any_finite();
  key.sigma_t = any_finite();
  key.scores = (*rc::gen::elementOf(theory::all_score_models())).value;
  return key;
}

records::ExactLaw any_law() {
  records::ExactLaw law;
  law.of = any_text();
  law.bound = *rc::gen::arbitrary<bool>();
  law.exponent = maybe_finite();
  law.constant = finite_or_nan();
  law.deterministic = *rc::gen::arbitrary<bool>();
  return law;
}

records::PointRecord any_point() {
  records::PointRecord r;
  r.key = any_series_key();
  r.formula = any_text();
  r.inner = any_finite();
  r.outer_factor = finite_or_nan();
  r.N = at_least_one();
  r.samples = at_least_one();
  // The moments are anything the format allows; every field derived from them is what they give, as the sweep
  // writes it (null where it is not finite), since a reader refuses a record that disagrees with itself.
  // Norms and second moments are not negative; row sums and score-var may be.
  const auto as_written = [](double x) { return std::isfinite(x) ? x : NAN; };
  const auto between_0_and_1 = [] { return *rc::gen::inRange(0, 1001) / 1000.0; };
  r.mean = *rc::gen::arbitrary<bool>() ? any_non_negative() : NAN;
  r.mean_sq = std::isfinite(r.mean) && *rc::gen::arbitrary<bool>()
                  ? as_written(r.mean * r.mean * (1 + 9 * between_0_and_1()))
                  : NAN;
  r.se_plain = *rc::gen::arbitrary<bool>() ? any_non_negative() : NAN;
  r.se_batch_means = *rc::gen::arbitrary<bool>() ? any_non_negative() : NAN;
  if (*rc::gen::arbitrary<bool>()) {
    r.se_mean_reliable = *rc::gen::arbitrary<bool>();
    r.se_sq_reliable = *rc::gen::arbitrary<bool>();
  }
  if (r.se_mean_reliable && std::isfinite(r.se_plain)) {
    r.se =
        *r.se_mean_reliable || !std::isfinite(r.se_batch_means) ? r.se_plain : std::max(r.se_plain, r.se_batch_means);
  } else {
    r.se = *rc::gen::arbitrary<bool>() ? any_non_negative() : NAN;
  }
  const auto samples = static_cast<std::uint64_t>(r.samples);
  std::tie(r.ci95_lo, r.ci95_hi) = records::ci95_of(r.mean, r.se, samples);
  r.ci95_lo = as_written(r.ci95_lo), r.ci95_hi = as_written(r.ci95_hi);
  r.se_sq = any_non_negative();
  if (*rc::gen::arbitrary<bool>()) r.se_sq_floor = r.se_sq * between_0_and_1();
  std::tie(r.ci95_sq_lo, r.ci95_sq_hi) = records::ci95_of(r.mean_sq, r.se_sq, samples);
  r.ci95_sq_lo = as_written(r.ci95_sq_lo), r.ci95_sq_hi = as_written(r.ci95_sq_hi);
  const auto written = [&](const std::optional<double>& x) {
    return x && std::isfinite(*x) ? x : std::optional<double>();
  };
  const bool norm = theory::term_of(r.key.estimand).norm;
  r.exact_sq = *rc::gen::arbitrary<bool>() ? std::optional(any_non_negative()) : std::nullopt;
  if (r.exact_sq) {
    r.z_exact_sq = written(records::z_score(r.mean_sq, r.se_sq, *r.exact_sq));
    if (norm) r.jensen_bound = written(std::sqrt(*r.exact_sq));
    if (norm && *r.exact_sq > 0) r.jensen_ratio = written(r.mean / std::sqrt(*r.exact_sq));
  }
  r.exact_mean = maybe_finite();
  if (r.exact_mean) r.z_exact_mean = written(records::z_score(r.mean, r.se, *r.exact_mean));
  if (norm && r.mean_sq > 0) r.jensen_ratio_estimated = written(r.mean / std::sqrt(r.mean_sq));
  r.exact_out_of_range = *rc::gen::arbitrary<bool>();
  r.sample_bound = maybe_finite();
  r.sample_max = maybe_finite();
  r.sample_lower_bound = maybe_finite();
  r.sample_min = maybe_finite();
  if (std::isfinite(r.mean) && *rc::gen::arbitrary<bool>()) {
    r.mean_lower_bound = r.mean * between_0_and_1();
    r.mean_lower_bound_level = *rc::gen::inRange(1, 1000) / 1000.0;
  }
  r.se_reliable = *rc::gen::arbitrary<bool>();
  r.unreliable_because = maybe_text();
  // How many samples carry the variance, between 1 and all of them, and the relative SE of the variance they give.
  const auto spread = [&](double& effective, double& relative) {
    effective = relative = NAN;
    if (r.samples < 2 || !*rc::gen::arbitrary<bool>()) return;
    effective = 1 + (static_cast<double>(r.samples) - 1) * between_0_and_1();
    relative = std::sqrt(std::max(0.0, 1 / effective - 1 / static_cast<double>(r.samples)));
  };
  spread(r.effective_samples, r.variance_relative_se);
  spread(r.effective_samples_sq, r.variance_relative_se_sq);
  r.stopped_by = one_of<std::string>({"samples", "rel-se", "max-samples", "max-seconds"});
  r.seed = *rc::gen::arbitrary<std::uint64_t>();
  r.run_seed = *rc::gen::arbitrary<std::uint64_t>();
  r.backend = one_of<std::string>({"cpu", "cuda"});
  r.threads = *rc::gen::inRange(1, 1025);
  r.wall_seconds = any_non_negative();
  r.claimed_exponent = maybe_finite();
  r.claim_form = one_of<std::string>({"exponent", "equality"});
  r.claimed_value = maybe_finite();
  if (*rc::gen::arbitrary<bool>()) r.exact_law = any_law();
  r.fit_variable = one_of<std::string>({"N", "d"});
  r.fit_of = one_of<std::string>({"mean", "mean_sq"});
  r.counts_for_exit = *rc::gen::arbitrary<bool>();
  r.resume_id = any_text();
  r.series_id = any_text();
  r.path = maybe_text();
  return r;
}

// Equal, or both NaN (no finite value either side).
bool same(double a, double b) { return a == b || (std::isnan(a) && std::isnan(b)); }
bool same(const std::optional<double>& a, const std::optional<double>& b) {
  return a.has_value() == b.has_value() && (!a || same(*a, *b));
}

void check_same_law(const records::ExactLaw& a, const records::ExactLaw& b) {
  RC_ASSERT(a.of == b.of);
  RC_ASSERT(a.bound == b.bound);
  RC_ASSERT(same(a.exponent, b.exponent));
  RC_ASSERT(same(a.constant, b.constant));
  RC_ASSERT(a.deterministic == b.deterministic);
}

void check_same_point(const records::PointRecord& a, const records::PointRecord& b) {
  RC_ASSERT(a.key.claim == b.key.claim);
  RC_ASSERT(a.key.activation == b.key.activation);
  RC_ASSERT(same(a.key.alpha, b.key.alpha));
  RC_ASSERT(same(a.key.mix, b.key.mix));
  RC_ASSERT(a.key.dv == b.key.dv);
  RC_ASSERT(a.key.scale == b.key.scale);
  RC_ASSERT(a.key.D == b.key.D);
  RC_ASSERT(a.key.d == b.key.d);
  RC_ASSERT(a.key.estimand == b.key.estimand);
  RC_ASSERT(a.key.sigma_x == b.key.sigma_x);
  RC_ASSERT(a.key.sigma_t == b.key.sigma_t);
  RC_ASSERT(a.key.scores == b.key.scores);
  RC_ASSERT(a.formula == b.formula);
  for (const auto& [x, y] : {std::pair{a.inner, b.inner},
                             {a.outer_factor, b.outer_factor},
                             {a.mean, b.mean},
                             {a.se, b.se},
                             {a.ci95_lo, b.ci95_lo},
                             {a.ci95_hi, b.ci95_hi},
                             {a.mean_sq, b.mean_sq},
                             {a.se_sq, b.se_sq},
                             {a.ci95_sq_lo, b.ci95_sq_lo},
                             {a.ci95_sq_hi, b.ci95_sq_hi},
                             {a.effective_samples, b.effective_samples},
                             {a.effective_samples_sq, b.effective_samples_sq},
                             {a.variance_relative_se, b.variance_relative_se},
                             {a.variance_relative_se_sq, b.variance_relative_se_sq},
                             {a.se_plain, b.se_plain},
                             {a.se_batch_means, b.se_batch_means},
                             {a.wall_seconds, b.wall_seconds}}) {
    RC_ASSERT(same(x, y));
  }
  for (const auto& [x, y] : {std::pair{a.se_sq_floor, b.se_sq_floor},
                             {a.exact_sq, b.exact_sq},
                             {a.z_exact_sq, b.z_exact_sq},
                             {a.exact_mean, b.exact_mean},
                             {a.z_exact_mean, b.z_exact_mean},
                             {a.jensen_bound, b.jensen_bound},
                             {a.jensen_ratio, b.jensen_ratio},
                             {a.jensen_ratio_estimated, b.jensen_ratio_estimated},
                             {a.sample_bound, b.sample_bound},
                             {a.sample_max, b.sample_max},
                             {a.sample_lower_bound, b.sample_lower_bound},
                             {a.sample_min, b.sample_min},
                             {a.mean_lower_bound, b.mean_lower_bound},
                             {a.mean_lower_bound_level, b.mean_lower_bound_level},
                             {a.claimed_exponent, b.claimed_exponent},
                             {a.claimed_value, b.claimed_value}}) {
    RC_ASSERT(same(x, y));
  }
  RC_ASSERT(a.N == b.N);
  RC_ASSERT(a.samples == b.samples);
  RC_ASSERT(a.exact_out_of_range == b.exact_out_of_range);
  RC_ASSERT(a.se_reliable == b.se_reliable);
  RC_ASSERT(a.se_mean_reliable == b.se_mean_reliable);
  RC_ASSERT(a.se_sq_reliable == b.se_sq_reliable);
  RC_ASSERT(a.unreliable_because == b.unreliable_because);
  RC_ASSERT(a.stopped_by == b.stopped_by);
  RC_ASSERT(a.seed == b.seed);
  RC_ASSERT(a.run_seed == b.run_seed);
  RC_ASSERT(a.backend == b.backend);
  RC_ASSERT(a.threads == b.threads);
  RC_ASSERT(a.claim_form == b.claim_form);
  RC_ASSERT(a.exact_law.has_value() == b.exact_law.has_value());
  if (a.exact_law) check_same_law(*a.exact_law, *b.exact_law);
  RC_ASSERT(a.fit_variable == b.fit_variable);
  RC_ASSERT(a.fit_of == b.fit_of);
  RC_ASSERT(a.counts_for_exit == b.counts_for_exit);
  RC_ASSERT(a.resume_id == b.resume_id);
  RC_ASSERT(a.series_id == b.series_id);
  RC_ASSERT(a.path == b.path);
}

records::LocalExponentRecord any_local_exponent() {
  records::LocalExponentRecord e;
  const int points = *rc::gen::inRange(0, 4);
  for (int i = 0; i < points; ++i) e.window.push_back(static_cast<double>(at_least_one()));
  if (points >= 2) {
    e.exponent = maybe_finite();
    e.sampling_half_width = std::optional(any_non_negative());
  }
  if (*rc::gen::arbitrary<bool>()) {
    e.missing = any_text();
  } else {
    e.previous = maybe_finite();
    e.systematic = finite_or_nan();
    if (*rc::gen::arbitrary<bool>()) {
      const double lo = any_finite() / 2;
      e.interval = std::make_pair(lo, lo + any_non_negative() / 2);
    }
  }
  if (*rc::gen::arbitrary<bool>() && !e.window.empty()) e.unreliable_at = {e.window.back()};
  for (int i = *rc::gen::inRange(0, 3); i > 0; --i) {
    e.windows.push_back({static_cast<double>(at_least_one()), static_cast<double>(at_least_one()), finite_or_nan(),
                         any_non_negative()});
  }
  e.climb_per_doubling = maybe_finite();
  e.climb_se = maybe_finite();
  if (*rc::gen::arbitrary<bool>()) e.rising = *rc::gen::arbitrary<bool>();
  e.disagreement = maybe_finite();
  return e;
}

void check_same_local_exponent(const std::optional<records::LocalExponentRecord>& a,
                               const std::optional<records::LocalExponentRecord>& b) {
  RC_ASSERT(a.has_value() == b.has_value());
  if (!a) return;
  RC_ASSERT(a->window == b->window);
  RC_ASSERT(same(a->exponent, b->exponent));
  RC_ASSERT(same(a->sampling_half_width, b->sampling_half_width));
  RC_ASSERT(a->missing == b->missing);
  RC_ASSERT(same(a->previous, b->previous));
  RC_ASSERT(same(a->systematic, b->systematic));
  RC_ASSERT(a->interval == b->interval);
  RC_ASSERT(a->unreliable_at == b->unreliable_at);
  RC_ASSERT(a->windows.size() == b->windows.size());
  for (std::size_t i = 0; i < a->windows.size(); ++i) {
    RC_ASSERT(a->windows[i].first == b->windows[i].first);
    RC_ASSERT(a->windows[i].last == b->windows[i].last);
    RC_ASSERT(same(a->windows[i].exponent, b->windows[i].exponent));
    RC_ASSERT(same(a->windows[i].sampling_half_width, b->windows[i].sampling_half_width));
  }
  RC_ASSERT(same(a->climb_per_doubling, b->climb_per_doubling));
  RC_ASSERT(same(a->climb_se, b->climb_se));
  RC_ASSERT(a->rising == b->rising);
  RC_ASSERT(same(a->disagreement, b->disagreement));
}

records::ProvedBound any_proved_bound() {
  records::ProvedBound b;
  b.side = one_of({records::ProvedBound::Side::upper, records::ProvedBound::Side::lower});
  b.exponent = b.side == records::ProvedBound::Side::lower ? std::optional(any_finite()) : maybe_finite();
  b.deterministic = *rc::gen::arbitrary<bool>();
  b.subpolynomial = *rc::gen::arbitrary<bool>();
  b.statement = any_text();
  b.proof = any_text();
  return b;
}

records::Series any_series() {
  records::Series s;
  s.key = any_series_key();
  s.formula = any_text();
  s.series_id = any_text();
  s.run_seed = *rc::gen::arbitrary<std::uint64_t>();
  if (*rc::gen::arbitrary<bool>()) {
    const double slope = any_finite() / 2;
    s.slope = slope;
    s.slope_ci = std::make_pair(slope - any_non_negative() / 4, slope + any_non_negative() / 4);
    s.slope_se = any_non_negative();
    s.intercept = maybe_finite();
    s.reduced_chi_sq = maybe_finite();
    s.fit_points = *rc::gen::inRange(2, 100);
  }
  s.claimed_exponent = maybe_finite();
  s.tolerance = any_non_negative();
  if (*rc::gen::arbitrary<bool>()) {
    s.verdict = *rc::gen::elementOf(records::kAllVerdicts);
    s.basis = *rc::gen::elementOf(records::kAllBases);
    s.verdict_rule = any_text();
    s.verdict_reason = any_text();
  }
  s.extend_to = maybe_finite();
  s.to_settle = maybe_text();
  s.finding = maybe_text();
  s.claims_value = *rc::gen::arbitrary<bool>();
  s.counts_for_exit = *rc::gen::arbitrary<bool>();
  s.se_reliable = *rc::gen::arbitrary<bool>();
  if (*rc::gen::arbitrary<bool>()) {
    s.jensen_first = any_non_negative();
    s.jensen_last = any_non_negative();
    s.jensen_source = one_of<std::string>({"exact", "estimated"});
  }
  s.local_exponent = any_local_exponent();
  if (*rc::gen::arbitrary<bool>()) s.cross_check = any_local_exponent();
  if (*rc::gen::arbitrary<bool>()) {
    records::ExactCheckRecord& exact = s.exact.emplace();
    if (*rc::gen::arbitrary<bool>()) exact.law = any_law();
    exact.alarm_abs_z = maybe_finite();
    if (*rc::gen::arbitrary<bool>()) exact.family_points = *rc::gen::inRange(0, 1000);
    exact.family_level = maybe_finite();
    exact.min_sample_over_lower_bound = maybe_finite();
    if (*rc::gen::arbitrary<bool>()) exact.lower_bound_undercut_at = {static_cast<double>(at_least_one())};
    exact.max_abs_z = maybe_finite();
    exact.judged_points = *rc::gen::inRange(0, 100);
    exact.unjudged_points = *rc::gen::inRange(0, 100);
    if (*rc::gen::arbitrary<bool>()) exact.disagrees_at = {static_cast<double>(at_least_one())};
    exact.bound_checked_points = *rc::gen::inRange(0, 100);
    exact.max_sample_over_bound = maybe_finite();
    if (*rc::gen::arbitrary<bool>()) exact.bound_exceeded_at = {static_cast<double>(at_least_one())};
    exact.confirmed = exact.disagrees_at.empty();
  }
  for (int i = *rc::gen::inRange(0, 4); i > 0; --i) s.proved_bounds.push_back(any_proved_bound());
  if (*rc::gen::arbitrary<bool>()) s.decided_by = any_proved_bound();
  if (*rc::gen::arbitrary<bool>()) {
    records::ViolationTestRecord& t = s.violation_test.emplace();
    t.x_small = static_cast<double>(at_least_one());
    t.x_large = t.x_small * 4;
    t.upper_at_small = any_non_negative();
    t.upper_source = one_of<std::string>({"exact", "estimate + z se"});
    t.lower_at_large = any_non_negative();
    t.exponent_lower = finite_or_nan();
    t.level = *rc::gen::inRange(1, 1000) / 1000.0;
    t.passed = *rc::gen::arbitrary<bool>();
  }
  s.x_variable = one_of<std::string>({"N", "d"});
  s.fit_of = one_of<std::string>({"mean", "mean_sq"});
  const int points = *rc::gen::inRange(1, 6);
  long long n = 0, d = 0;
  for (int i = 0; i < points; ++i) {
    // x must increase; the other of N and d need not.
    n = s.x_variable == "N" ? n + at_least_one() : at_least_one();
    d = s.x_variable == "d" ? d + at_least_one() : at_least_one();
    s.N.push_back(n);
    s.d_values.push_back(d);
    s.mean.push_back(*rc::gen::arbitrary<bool>() ? any_non_negative() : NAN);
    s.se.push_back(any_non_negative());
    s.mean_sq.push_back(finite_or_nan());
    s.se_sq.push_back(finite_or_nan());
    s.exact_sq.push_back(*rc::gen::arbitrary<bool>() ? std::optional(any_non_negative()) : std::nullopt);
    s.exact_mean.push_back(maybe_finite());
  }
  s.x = s.x_variable == "d" ? s.d_values : s.N;
  return s;
}

void check_same_series(const records::Series& a, const records::Series& b) {
  RC_ASSERT(a.key == b.key);
  RC_ASSERT(a.formula == b.formula);
  RC_ASSERT(a.series_id == b.series_id);
  RC_ASSERT(a.run_seed == b.run_seed);
  RC_ASSERT(same(a.slope, b.slope));
  RC_ASSERT(a.slope_ci == b.slope_ci);
  RC_ASSERT(same(a.slope_se, b.slope_se));
  RC_ASSERT(same(a.intercept, b.intercept));
  RC_ASSERT(same(a.reduced_chi_sq, b.reduced_chi_sq));
  RC_ASSERT(a.fit_points == b.fit_points);
  RC_ASSERT(same(a.claimed_exponent, b.claimed_exponent));
  RC_ASSERT(same(a.tolerance, b.tolerance));
  RC_ASSERT(a.verdict == b.verdict);
  RC_ASSERT(a.basis == b.basis);
  RC_ASSERT(a.verdict_rule == b.verdict_rule);
  RC_ASSERT(a.verdict_reason == b.verdict_reason);
  RC_ASSERT(same(a.extend_to, b.extend_to));
  RC_ASSERT(a.to_settle == b.to_settle);
  RC_ASSERT(a.finding == b.finding);
  RC_ASSERT(a.claims_value == b.claims_value);
  RC_ASSERT(a.counts_for_exit == b.counts_for_exit);
  RC_ASSERT(a.se_reliable == b.se_reliable);
  RC_ASSERT(same(a.jensen_first, b.jensen_first));
  RC_ASSERT(same(a.jensen_last, b.jensen_last));
  RC_ASSERT(a.jensen_source == b.jensen_source);
  check_same_local_exponent(a.local_exponent, b.local_exponent);
  check_same_local_exponent(a.cross_check, b.cross_check);
  RC_ASSERT(a.exact.has_value() == b.exact.has_value());
  RC_ASSERT(a.proved_bounds == b.proved_bounds);
  RC_ASSERT(a.decided_by == b.decided_by);
  RC_ASSERT(a.violation_test.has_value() == b.violation_test.has_value());
  if (a.violation_test) {
    const records::ViolationTestRecord &x = *a.violation_test, &y = *b.violation_test;
    RC_ASSERT(x.x_small == y.x_small && x.x_large == y.x_large && x.upper_source == y.upper_source);
    RC_ASSERT(same(x.upper_at_small, y.upper_at_small) && same(x.lower_at_large, y.lower_at_large));
    RC_ASSERT(same(x.exponent_lower, y.exponent_lower) && x.level == y.level && x.passed == y.passed);
  }
  if (a.exact) {
    RC_ASSERT(a.exact->law.has_value() == b.exact->law.has_value());
    if (a.exact->law) check_same_law(*a.exact->law, *b.exact->law);
    RC_ASSERT(same(a.exact->alarm_abs_z, b.exact->alarm_abs_z));
    RC_ASSERT(a.exact->family_points == b.exact->family_points);
    RC_ASSERT(same(a.exact->family_level, b.exact->family_level));
    RC_ASSERT(same(a.exact->min_sample_over_lower_bound, b.exact->min_sample_over_lower_bound));
    RC_ASSERT(a.exact->lower_bound_undercut_at == b.exact->lower_bound_undercut_at);
    RC_ASSERT(same(a.exact->max_abs_z, b.exact->max_abs_z));
    RC_ASSERT(a.exact->judged_points == b.exact->judged_points);
    RC_ASSERT(a.exact->unjudged_points == b.exact->unjudged_points);
    RC_ASSERT(a.exact->disagrees_at == b.exact->disagrees_at);
    RC_ASSERT(a.exact->bound_checked_points == b.exact->bound_checked_points);
    RC_ASSERT(same(a.exact->max_sample_over_bound, b.exact->max_sample_over_bound));
    RC_ASSERT(a.exact->bound_exceeded_at == b.exact->bound_exceeded_at);
    RC_ASSERT(a.exact->confirmed == b.exact->confirmed);
  }
  RC_ASSERT(a.x_variable == b.x_variable);
  RC_ASSERT(a.fit_of == b.fit_of);
  RC_ASSERT(a.x == b.x);
  RC_ASSERT(a.N == b.N);
  RC_ASSERT(a.d_values == b.d_values);
  RC_ASSERT(a.mean.size() == b.mean.size());
  for (std::size_t i = 0; i < a.mean.size(); ++i) {
    RC_ASSERT(same(a.mean[i], b.mean[i]));
    RC_ASSERT(same(a.se[i], b.se[i]));
    RC_ASSERT(same(a.mean_sq[i], b.mean_sq[i]));
    RC_ASSERT(same(a.se_sq[i], b.se_sq[i]));
    RC_ASSERT(same(a.exact_sq[i], b.exact_sq[i]));
    RC_ASSERT(same(a.exact_mean[i], b.exact_mean[i]));
  }
}

records::Provenance any_provenance() {
  records::Provenance p;
  p.version = any_text();
  p.date = any_text();
  if (*rc::gen::arbitrary<bool>()) {
    p.hostname = any_text();
    p.cpu = any_text() + "x";  // not both empty: the object form
    p.machine = fmt::format("cpu: {}, hostname: {}", p.cpu, p.hostname);
  } else {
    p.machine = any_text();
  }
  p.backend = one_of<std::string>({"cpu", "cuda"});
  p.threads = *rc::gen::inRange(1, 1025);
  p.run_seed = *rc::gen::arbitrary<std::uint64_t>();
  if (*rc::gen::arbitrary<bool>()) p.precision = one_of<std::string>({"double", "mixed"});
  if (*rc::gen::arbitrary<bool>()) p.normals = one_of<std::string>({"scalar", "avx2", "avx512"});
  p.command = any_text();
  p.wall_seconds = maybe_finite();
  if (*rc::gen::arbitrary<bool>()) {
    auto& bounds = p.mixed_precision_bounds.emplace();
    for (int i = *rc::gen::inRange(0, 3); i > 0; --i)
      bounds.push_back({*rc::gen::inRange(2, 7), at_least_one(), any_non_negative()});
  }
  return p;
}

void check_same_provenance(const records::Provenance& a, const records::Provenance& b) {
  RC_ASSERT(a.version == b.version);
  RC_ASSERT(a.date == b.date);
  RC_ASSERT(a.hostname == b.hostname);
  RC_ASSERT(a.cpu == b.cpu);
  RC_ASSERT(a.machine == b.machine);
  RC_ASSERT(a.backend == b.backend);
  RC_ASSERT(a.threads == b.threads);
  RC_ASSERT(a.run_seed == b.run_seed);
  RC_ASSERT(a.precision == b.precision);
  RC_ASSERT(a.normals == b.normals);
  RC_ASSERT(a.command == b.command);
  RC_ASSERT(same(a.wall_seconds, b.wall_seconds));
  RC_ASSERT(a.mixed_precision_bounds == b.mixed_precision_bounds);
}

std::filesystem::path fresh_dir(const std::string& name) {
  const auto dir =
      std::filesystem::temp_directory_path() / fmt::format("attncheck-record-json-{}-{}", name, ::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// The message of the InputError that `run` throws; fails the test when it throws nothing or something else.
template <class Run>
std::string input_error_of(Run&& run) {
  try {
    run();
  } catch (const theory::InputError& e) {
    return e.what();
  }
  FAIL("no InputError was thrown");
  return "";
}

std::string line_of(const records::PointRecord& record) { return json(record).dump() + "\n"; }

}  // namespace

TEST_CASE("a point record reads back from its points.jsonl line exactly as it was written") {
  rc::prop("PointRecord -> JSON line -> PointRecord is the identity", [] {
    const records::PointRecord written = any_point();
    const std::string line = line_of(written);
    RC_ASSERT(json::parse(line)["format_version"] == records::kResultsFormatVersion);
    const std::vector<records::PointRecord> read = records::parse_points_jsonl(line, "points.jsonl");
    RC_ASSERT(read.size() == 1u);
    check_same_point(written, read[0]);
    RC_ASSERT(read[0].line == 1);
    // nlohmann's adl form is the same pair.
    check_same_point(written, json(written).get<records::PointRecord>());
  });
}

TEST_CASE("fitted series and the provenance read back from fits.json exactly as they were written") {
  rc::prop("(runs, Series) -> fits.json -> (runs, Series) is the identity", [] {
    const std::vector<records::Series> written{any_series(), any_series()};
    const records::Provenance run = any_provenance();
    const records::Provenance earlier = any_provenance();
    const std::string text = records::fits_json_text({earlier, run}, written);
    RC_ASSERT(json::parse(text)["format_version"] == records::kResultsFormatVersion);
    const auto [runs, read] = records::parse_fits_json(text, "fits.json");
    RC_ASSERT(runs.size() == 2u);
    check_same_provenance(earlier, runs[0]);
    check_same_provenance(run, runs[1]);
    // "provenance" is the last run's, for readers that know no "runs".
    check_same_provenance(run, json::parse(text)["provenance"].get<records::Provenance>());
    check_same_provenance(run, json(run).get<records::Provenance>());
    RC_ASSERT(read.size() == written.size());
    for (std::size_t i = 0; i < read.size(); ++i) check_same_series(written[i], read[i]);
    check_same_series(written[0], json(written[0]).get<records::Series>());
  });
}

TEST_CASE("the sweep's own records and fits read back field for field") {
  monte_carlo::SweepRequest request;
  request.claim = "C9";  // the most fields at once: mix, dv, sample bounds, exact laws, cross-checks
  monte_carlo::CpuBackend backend(1, 16);
  monte_carlo::SamplingPolicy policy;
  policy.fixed = 24;
  std::vector<records::PointRecord> points;
  for (const auto& series : monte_carlo::build_series(request)) {
    for (theory::Index n : {4, 8, 16}) {
      const monte_carlo::PointSpec spec = monte_carlo::make_point(series, n, 3, 2, 1, 1, 21);
      const monte_carlo::PointOutcome outcome = monte_carlo::run_point(backend, spec.point, series.estimands, policy);
      for (auto estimand : series.estimands)
        points.push_back(monte_carlo::point_record(spec, estimand, outcome, {21, "cpu", 1}));
    }
  }
  REQUIRE(points.size() == 12);  // value, dV, dS, dQ at three N
  CHECK(points[0].sample_bound.has_value());
  std::string lines;
  for (const auto& p : points) lines += line_of(p);
  const std::vector<records::PointRecord> read = records::parse_points_jsonl(lines, "points.jsonl");
  REQUIRE(read.size() == points.size());
  for (std::size_t i = 0; i < read.size(); ++i) {
    INFO("point " << i);
    CHECK(json(read[i]) == json(points[i]));
  }
  const std::vector<records::Series> fitted = monte_carlo::fit_series(points, 0.05);
  REQUIRE(fitted.size() == 4);
  records::Provenance run;
  run.backend = "cpu";
  run.run_seed = 21;
  const auto [runs, series] = records::parse_fits_json(records::fits_json_text({run}, fitted), "fits.json");
  CHECK(runs.back().run_seed == 21u);
  REQUIRE(series.size() == fitted.size());
  for (std::size_t i = 0; i < series.size(); ++i) {
    INFO("series " << i);
    CHECK(json(series[i]) == json(fitted[i]));
  }
}

TEST_CASE("a truncated or corrupt points.jsonl stops a resumed run naming the file and the line") {
  records::PointRecord r;
  r.key.claim = "C4";
  r.key.activation = *theory::activation_from_word("poly", 1);
  r.key.scale = "1/sqrt(N)";
  r.key.D = r.key.d = 4;
  r.formula = "F";
  r.N = 8;
  r.samples = 10;
  r.ci95_sq_lo = r.ci95_sq_hi = 0;  // mean_sq 0 -+ t * se_sq 0, as the rest of the record has it
  r.stopped_by = "samples";
  r.backend = "cpu";
  r.resume_id = "a";
  const std::string first = line_of(r);
  r.resume_id = "b";
  const std::string second = line_of(r);
  const auto dir = fresh_dir("corrupt");
  for (const auto& [text, what] :
       {std::pair<std::string, std::string>{first + second.substr(0, second.size() / 2) + "\n", "malformed JSON"},
        {first + "{\"claim\": \"C4\"}\n", "missing"},
        {first + "\x01\x02 binary\n", "malformed JSON"}}) {
    std::ofstream(dir / "points.jsonl", std::ios::binary | std::ios::trunc) << text;
    const std::string message =
        input_error_of([&] { monte_carlo::ResultsWriter folder(dir, monte_carlo::FolderStart::resume); });
    INFO(message);
    CHECK_THAT(message, Contains((dir / "points.jsonl").string() + " line 2") && Contains(what));
  }
  std::filesystem::remove_all(dir);
}

namespace {

// The records of a small sweep as the sweep writes them: every estimand of every series of `request` at each N.
std::vector<records::PointRecord> sweep_records(const monte_carlo::SweepRequest& request,
                                                const std::vector<theory::Index>& Ns, std::uint64_t samples,
                                                double sigma_x = 1) {
  monte_carlo::CpuBackend backend(1, 16);
  monte_carlo::SamplingPolicy policy;
  policy.fixed = samples;
  std::vector<records::PointRecord> points;
  for (const auto& series : monte_carlo::build_series(request)) {
    for (theory::Index n : Ns) {
      const monte_carlo::PointSpec spec = monte_carlo::make_point(series, n, 3, 2, sigma_x, 1, 21);
      const monte_carlo::PointOutcome outcome = monte_carlo::run_point(backend, spec.point, series.estimands, policy);
      for (auto estimand : series.estimands)
        points.push_back(monte_carlo::point_record(spec, estimand, outcome, {21, "cpu", 1}));
    }
  }
  return points;
}

}  // namespace

TEST_CASE("the sweep's records at its edges read back: two samples, samples that never vary, tiny values") {
  monte_carlo::SweepRequest softmax;
  softmax.phi = "softmax";
  softmax.estimands = "value,dQ,dK,dS,score-var,row-sum,row-mean";
  softmax.claimed_exponent = 0.5;
  monte_carlo::SweepRequest relu = softmax;
  relu.phi = "relu";
  for (const auto& [request, samples, sigma_x] : {std::tuple{softmax, 2, 1.0}, std::tuple{softmax, 40, 1.0},
                                                  std::tuple{relu, 2, 1e-100}, std::tuple{relu, 40, 1e-100}}) {
    const std::vector<records::PointRecord> points =
        sweep_records(request, {4, 8}, static_cast<std::uint64_t>(samples), sigma_x);
    std::string lines;
    for (const auto& p : points) lines += line_of(p);
    const std::vector<records::PointRecord> read = records::parse_points_jsonl(lines, "points.jsonl");
    REQUIRE(read.size() == points.size());
    for (std::size_t i = 0; i < read.size(); ++i) CHECK(json(read[i]) == json(points[i]));
    if (request.phi == "softmax" && samples == 40) {
      // Every row of probabilities sums to 1: samples that vary only by rounding, z against the exact 1 included.
      const auto row_sum = std::find_if(points.begin(), points.end(),
                                        [](const auto& p) { return p.key.estimand == theory::Estimand::row_sum; });
      REQUIRE(row_sum != points.end());
      CHECK(row_sum->se <= 1e-12 * row_sum->mean);
      CHECK(row_sum->z_exact_mean.has_value());
    }
  }
}

TEST_CASE("a record changed after it was written is refused naming the file, the line and the field") {
  monte_carlo::SweepRequest request;
  request.claim = "C4";
  request.p = {1};
  std::vector<records::PointRecord> points = sweep_records(request, {8, 16}, 50);
  // Line 2 holds a record with a closed form (a z to check) and a spread (a sample count to check).
  const auto judged = std::find_if(points.begin(), points.end(), [](const records::PointRecord& p) {
    return p.z_exact_sq && p.jensen_ratio && std::isfinite(p.effective_samples) && std::isfinite(p.ci95_lo);
  });
  REQUIRE(judged != points.end());
  REQUIRE(points.size() >= 2);
  std::iter_swap(points.begin() + 1, judged);
  const auto dir = fresh_dir("edited");
  const std::string file = (dir / "points.jsonl").string();
  const auto write_with_line_2 = [&](const json& second) {
    std::string text;
    for (std::size_t i = 0; i < points.size(); ++i) text += (i == 1 ? second.dump() : json(points[i]).dump()) + "\n";
    std::ofstream(file, std::ios::binary | std::ios::trunc) << text;
  };
  const json original = points[1];
  write_with_line_2(original);
  CHECK(monte_carlo::ResultsWriter(dir, monte_carlo::FolderStart::resume).records().size() == points.size());

  struct Edit {
    const char* what;
    std::function<void(json&)> apply;
    const char* named;  // the field the message names
  };
  const double mean = original["mean"].get<double>();
  const std::vector<Edit> edits{
      {"mean set to 1e308", [](json& r) { r["mean"] = 1e308; }, "\"mean\" = 1e+308"},
      {"mean set to null", [](json& r) { r["mean"] = nullptr; }, "\"mean\" is null"},
      {"mean moved inside its interval", [&](json& r) { r["mean"] = mean * 1.001; }, "\"ci95\""},
      {"CI edited", [](json& r) { r["ci95"][0] = r["ci95"][0].get<double>() / 2; }, "\"ci95\""},
      {"CI set to null",
       [](json& r) {
         r["ci95"] = {nullptr, nullptr};
       },
       "\"ci95\" = [null, null]"},
      {"second moment's CI edited", [](json& r) { r["ci95_sq"][1] = r["ci95_sq"][1].get<double>() * 2; },
       "\"ci95_sq\""},
      {"sample count doubled", [](json& r) { r["samples"] = 2 * r["samples"].get<long long>(); }, "\"samples\" = 100"},
      {"sample count one more", [](json& r) { r["samples"] = r["samples"].get<long long>() + 1; }, "\"samples\" = 51"},
      {"z edited", [](json& r) { r["z_exact_sq"] = r["z_exact_sq"].get<double>() + 0.5; }, "\"z_exact_sq\""},
      {"z removed", [](json& r) { r["z_exact_sq"] = nullptr; }, "\"z_exact_sq\" = null"},
      {"standard error edited", [](json& r) { r["se"] = r["se"].get<double>() * 1.5; }, "\"se\""},
      {"second moment halved", [](json& r) { r["mean_sq"] = r["mean_sq"].get<double>() / 2; }, "\"mean_sq\""},
      {"Jensen ratio edited", [](json& r) { r["jensen_ratio"] = 0.5; }, "\"jensen_ratio\""},
      {"Jensen bound edited", [](json& r) { r["jensen_bound"] = r["jensen_bound"].get<double>() * 2; },
       "\"jensen_bound\""},
      {"lower bound above the mean", [&](json& r) { r["mean_lower_bound"] = mean * 2; }, "\"mean_lower_bound\""},
      {"second moment's floor above its SE", [](json& r) { r["se_sq_floor"] = r["se_sq"].get<double>() * 2; },
       "\"se_sq_floor\""},
  };
  for (const Edit& edit : edits) {
    INFO(edit.what);
    json edited = original;
    edit.apply(edited);
    write_with_line_2(edited);
    const std::string message =
        input_error_of([&] { monte_carlo::ResultsWriter folder(dir, monte_carlo::FolderStart::resume); });
    CHECK_THAT(message, Contains(file + " line 2: ") && Contains(edit.named) && Contains("changed after"));
  }
  // A line without "format_version" (an earlier writer's) is held to what every version wrote: its CI centred on
  // its mean, its z and its Jensen ratios from its moments.
  for (const auto& [edit, named] :
       {std::pair{edits[0], "\"ci95\""}, std::pair{edits[1], "\"ci95\""}, std::pair{edits[3], "\"ci95\""},
        std::pair{edits[8], "\"z_exact_sq\""}, std::pair{edits[12], "\"jensen_ratio\""}}) {
    INFO(edit.what << " (earlier format)");
    json edited = original;
    edited.erase("format_version");
    write_with_line_2(edited);
    CHECK(records::parse_points_jsonl(records::read_text_file(file), file).size() == points.size());
    edit.apply(edited);
    write_with_line_2(edited);
    const std::string message =
        input_error_of([&] { monte_carlo::ResultsWriter folder(dir, monte_carlo::FolderStart::resume); });
    CHECK_THAT(message, Contains(file + " line 2: ") && Contains(named));
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("a later format version is refused by name, an earlier one still reads") {
  records::PointRecord r;
  r.key.claim = "C4";
  r.key.activation = *theory::activation_from_word("poly", 1);
  r.key.scale = "none";
  r.key.D = r.key.d = 4;
  r.formula = "F";
  r.N = 8;
  r.samples = 10;
  r.ci95_sq_lo = r.ci95_sq_hi = 0;  // mean_sq 0 -+ t * se_sq 0, as the rest of the record has it
  r.stopped_by = "samples";
  r.backend = "cpu";
  json later = r;
  later["format_version"] = records::kResultsFormatVersion + 1;
  CHECK_THAT(input_error_of([&] { records::parse_points_jsonl(line_of(r) + later.dump() + "\n", "p.jsonl"); }),
             Contains("p.jsonl line 2") &&
                 Contains(fmt::format("\"format_version\" {}", records::kResultsFormatVersion + 1)) &&
                 Contains("later attncheck"));
  json earlier = r;
  earlier.erase("format_version");  // written before points.jsonl carried it
  CHECK(records::parse_points_jsonl(earlier.dump(), "p.jsonl").size() == 1);
  const std::string later_fits =
      json{{"format_version", 99}, {"provenance", json::object()}, {"series", json::array()}}.dump(2);
  CHECK_THAT(input_error_of([&] { records::parse_fits_json(later_fits, "fits.json"); }),
             Contains("fits.json") && Contains("\"format_version\" 99") && Contains("1 to"));
}

TEST_CASE("a folder of the previous format version resumes, and the lines it rewrites carry the version") {
  const auto dir = fresh_dir("resume-v2");
  for (const char* name : {"points.jsonl", "fits.json", "points.csv"}) {
    std::filesystem::copy_file(std::filesystem::path(ATTNCHECK_RECORDS_DATA "/format-v2-c4") / name, dir / name);
  }
  const std::string before = records::read_text_file(dir / "points.jsonl");
  CHECK(before.find("format_version") == std::string::npos);
  monte_carlo::ResultsWriter folder(dir, monte_carlo::FolderStart::resume);
  REQUIRE(folder.records().size() == 6);  // two readings x N = 8, 16, 32
  const std::vector<records::Series> refit = monte_carlo::fit_series(folder.records(), 0.05);
  const records::ResultsFolder as_written = records::read_results_folder(dir);
  REQUIRE(refit.size() == as_written.series.size());
  for (std::size_t i = 0; i < refit.size(); ++i) {
    CHECK(refit[i].verdict == as_written.series[i].verdict);
    CHECK(refit[i].slope == as_written.series[i].slope);
  }
  folder.append({folder.records().front()});
  std::ifstream in(dir / "points.jsonl");
  int lines = 0;
  for (std::string line; std::getline(in, line); ++lines)
    CHECK(json::parse(line)["format_version"] == records::kResultsFormatVersion);
  CHECK(lines == 6);
  std::filesystem::remove_all(dir);
}

TEST_CASE("a JSON text the parser refuses is named with its place and reason, without the library's tag",
          "[records][errors]") {
  for (const char* text : {"[1e999]", "{\"a\": -1e400}", "[1, 2", "{\"a\": \"\xff\"}"}) {
    INFO(text);
    const std::string message = input_error_of([&] { attncheck::records::parse_json(text, "f.json"); });
    CHECK_THAT(message, Contains("f.json") && Contains("malformed JSON: "));
    CHECK_THAT(message, !Contains("[json.exception"));
  }
}
