#pragma once
// The records of the results folder of `attncheck mc` (docs/results-format.md) and their one JSON form: the sweep
// writes them and every reader reads them through the same to_json/from_json pairs, so the two cannot drift
// apart. Only the keys the contract names are read; unknown keys are ignored. Every error names the file and the line
// (JSON lines) or the place in the document (fits.json), and is thrown as theory::InputError.

#include "attncheck/records/input_file.hpp"
#include "attncheck/records/verdict.hpp"
#include "attncheck/theory/vocabulary.hpp"

#include <nlohmann/json_fwd.hpp>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace attncheck::records {

// The version of the results format (docs/results-format.md): fits.json's top-level "format_version" and, from
// version 3 on, every line of points.jsonl. 2: every verdict names its basis; 3: points.jsonl lines carry the
// version; 4: proved bounds decide first, the basis `bound` and the verdict `consistent`, order-statistics lower
// bounds on the means. Files without it are of an earlier version and still read; a later version is refused.
inline constexpr int kResultsFormatVersion = 4;

// The relative error bound of one (p, d) whose scores were FP32 (`mc --precision mixed`).
struct MixedPrecisionBound {
  int p = 0;
  long long d = 0;
  std::optional<long long> D;        // the projections' input width; absent where only the scores were FP32
  double relative_bound_sum_sq = 0;  // of each sample's squared norms (of the norms, half that)

  bool operator==(const MixedPrecisionBound&) const = default;
};

// How the run that produced a folder was made (fits.json "provenance", and `mc --json`'s). Text fields are kept
// as written, so that a reader shows what another writer put there ("not recorded" for null).
struct Provenance {
  std::string version;
  std::string date;           // ISO 8601 UTC
  std::string hostname, cpu;  // where the writer gave "machine" as {hostname, cpu}
  std::string machine;        // as shown: "cpu: ..., hostname: ..." for that object, else the text written
  std::string backend;
  int threads = 1;
  std::uint64_t run_seed = 0;
  std::optional<std::string> precision;  // "double" | "mixed"; absent in earlier folders
  // The CPU backend's Box-Muller path ("scalar" | "avx2" | "avx512", ATTNCHECK_NORMALS's values; rank 0's under
  // mpirun): the normals' last bits depend on it. Absent for the GPU (cuRAND) and in earlier folders.
  std::optional<std::string> normals;
  std::string command;
  std::optional<double> wall_seconds;
  std::optional<std::vector<MixedPrecisionBound>> mixed_precision_bounds;  // runs with --precision mixed
  // Under mpirun: how many ranks, their distinct hosts, and per rank the GPU it ran on (nullopt on the CPU).
  // Absent in folders written before distribution existed.
  std::optional<int> ranks;
  std::optional<std::vector<std::string>> hosts;
  std::optional<std::vector<std::optional<int>>> rank_devices;
};

void to_json(nlohmann::json& out, const Provenance& provenance);
void from_json(const nlohmann::json& in, Provenance& provenance);

// The configuration that identifies one fitted series, shared by its points. Words of the results format ("phi",
// "estimand", "scores") are read into the vocabulary's enums (theory/vocabulary.hpp) and written back from them.
struct SeriesKey {
  std::string claim;              // an id of the claims table that `mc` samples (records/claims.hpp), or "custom"
  theory::Activation activation;  // "phi" and "p" (p is written for every activation, 1 where none applies)
  std::optional<double> alpha;
  std::optional<double> mix;    // C9's mix alpha of softmax_col(V) and V
  std::optional<long long> dv;  // C9's value columns
  std::string scale;
  long long D = 0;
  long long d = 0;
  theory::Estimand estimand = theory::Estimand::value;
  double sigma_x = 1;
  double sigma_t = 1;
  // How the scores are formed; "scores" absent in a file means the papers' projected model.
  theory::ScoreModel scores = theory::ScoreModel::projected;

  bool operator==(const SeriesKey&) const = default;
  // Short human name, e.g. "C3 elementwise poly p=2 value, D=64 d=64".
  std::string label() const;
  // "elementwise" for x^p, "matrix" for the matrix power (the two readings of "(.)^p" in C3/C4); none otherwise.
  std::optional<std::string_view> reading() const;
};

// A closed form that decides a series (docs/THEORY.md): of what, its exponent in x and constant.
struct ExactLaw {
  std::string of;     // "sqrt(E||F||^2)", "E[row sum]", "E[row mean]", "Var(s)"
  bool bound = true;  // it bounds the fitted E||F|| from above (Jensen) rather than being the expectation itself
  std::optional<double> exponent;  // absent: the quantity is 0 for every x
  double constant = 0;             // NaN where the writer had no finite value
  bool deterministic = false;      // it bounds every sample, for every input (C9's facts 10-11), not only the mean
};

// A proved statement about how a series' quantity grows in N (docs/THEORY.md, "Bounds in N"): an upper or a lower
// bound of order N^exponent, on every sample (deterministic: it holds for every input, and every sample is checked
// against it) or on the expectation.
struct ProvedBound {
  enum class Side { upper, lower };
  Side side = Side::upper;
  // Absent for an upper bound: the quantity is 0 for every N.
  std::optional<double> exponent;
  bool deterministic = false;
  // Up to a factor N^o(1) (a power of log N, exp(-M sqrt(log N))): it decides only claims strictly on its side.
  bool subpolynomial = false;
  std::string statement;  // what is proved, e.g. "||softmax(S)||_F <= sqrt(N) for every S"
  std::string proof;      // where: "docs/THEORY.md, B1"

  bool operator==(const ProvedBound&) const = default;
};
std::string_view to_string(ProvedBound::Side side);
void to_json(nlohmann::json& out, const ProvedBound& bound);

// One line of points.jsonl: one finished sweep point and estimand. The sweep writes it and every reader reads
// it through the one to_json/from_json pair below. Fields a folder of an earlier version may lack are optional.
struct PointRecord {
  SeriesKey key;
  std::string formula;
  double inner = 1;
  double outer_factor = 1;
  long long N = 0;
  long long samples = 0;
  // NaN where the writer had no finite value.
  double mean = 0;  // estimate of E||F||_F
  double se = 0;
  double ci95_lo = 0, ci95_hi = 0;
  double mean_sq = 0;  // estimate of E||F||_F^2
  double se_sq = 0;
  double ci95_sq_lo = NAN, ci95_sq_hi = NAN;
  std::optional<double> se_sq_floor;  // the standard error the exact floor of Var(||F||^2) allows
  std::optional<double> exact_sq;
  std::optional<double> z_exact_sq;
  std::optional<double> exact_mean;  // where the expectation itself is known (row sums)
  std::optional<double> z_exact_mean;
  bool exact_out_of_range = false;  // the closed form exceeds double precision
  std::optional<double> jensen_bound;
  std::optional<double> jensen_ratio;            // E||F|| / sqrt(exact E||F||^2)
  std::optional<double> jensen_ratio_estimated;  // E||F|| / sqrt(estimated E||F||^2)
  // The deterministic bounds every sample obeys at this point where one is proved (softmax, bounded activations,
  // C9 at mix alpha = 1), with the largest and the smallest sample to check them.
  std::optional<double> sample_bound, sample_max;
  std::optional<double> sample_lower_bound, sample_min;
  // For norms: a lower confidence bound on E||F||_F valid for any distribution of the samples (order statistics,
  // docs/THEORY.md), and its one-sided confidence level.
  std::optional<double> mean_lower_bound, mean_lower_bound_level;
  bool se_reliable = true;                               // both of the next two
  std::optional<bool> se_mean_reliable, se_sq_reliable;  // absent in folders written before the split
  std::optional<std::string> unreliable_because;
  double effective_samples = NAN, effective_samples_sq = NAN;
  double variance_relative_se = NAN, variance_relative_se_sq = NAN;
  double se_plain = NAN, se_batch_means = NAN;
  std::string stopped_by;
  std::uint64_t seed = 0;
  std::uint64_t run_seed = 0;
  std::string backend;
  int threads = 1;
  double wall_seconds = 0;
  std::optional<double> claimed_exponent;
  std::string claim_form = "exponent";  // or "equality" (C8's Var(q . k) = d_k)
  std::optional<double> claimed_value;
  std::optional<ExactLaw> exact_law;
  std::string fit_variable = "N";  // or "d"
  std::string fit_of = "mean";     // or "mean_sq"
  bool counts_for_exit = false;
  std::string resume_id;            // "key": what --resume matches (resume_key)
  std::string series_id;            // "series_key": what the fit groups by
  std::optional<std::string> path;  // how the CPU evaluated it ("direct", "tensor"); absent in earlier folders
  int line = 0;                     // where it was read, for messages; not written

  bool mean_reliable() const { return se_mean_reliable.value_or(se_reliable); }
  bool sq_reliable() const { return se_sq_reliable.value_or(se_reliable); }
};

// The one JSON form of a point record (a line of points.jsonl, with "format_version"). from_json checks every
// field as docs/results-format.md states it and throws theory::InputError naming the field.
void to_json(nlohmann::json& out, const ExactLaw& law);
void to_json(nlohmann::json& out, const PointRecord& record);
void from_json(const nlohmann::json& in, PointRecord& record);

// The local exponent over one window of two doublings [x / 4, x].
struct WindowExponentRecord {
  double first = 0, last = 0;  // the window's smallest and largest x
  double exponent = 0;
  double sampling_half_width = 0;  // 95%

  bool operator==(const WindowExponentRecord&) const = default;
};

// fits.json "local_exponent" (or "cross_check"): the exponent over the last doublings of x that an
// asymptotic-fit verdict rests on, with its interval (sampling half-width + systematic spread).
struct LocalExponentRecord {
  std::vector<double> window;                 // the x used
  std::optional<double> exponent;             // given where the window has two points or more
  std::optional<double> sampling_half_width;  // 95%, beside the exponent
  std::optional<std::string> missing;         // why there is no interval
  // Given where nothing is missing: the exponent of the window ending one point earlier, the drift between them,
  // and the interval; the interval is absent when either end is not finite.
  std::optional<double> previous;
  double systematic = NAN;
  std::optional<std::pair<double, double>> interval;
  std::vector<double> unreliable_at;          // x of window points whose standard error is not reliable
  std::vector<WindowExponentRecord> windows;  // every window's exponent, in order of x: the trend
  // The windows' exponents against log2 x: their slope per doubling and its SE (three windows or more).
  std::optional<double> climb_per_doubling, climb_se;
  std::optional<bool> rising;          // still rising: the last window, or the climb, significantly above 0
  std::optional<double> disagreement;  // |exponent - the cross-check's exponent| (primary only)
};

// fits.json "violation_test": the asymptotic fit's test of a violation that stays valid under heavy tails: a
// lower confidence bound on E||F|| at the largest x (order statistics) against an upper bound at a smaller x.
struct ViolationTestRecord {
  double x_small = 0, x_large = 0;
  double upper_at_small = 0;  // E||F|| at x_small is at most this
  std::string upper_source;   // "exact" (the closed form's sqrt(E||F||^2) or expectation) | "estimate + z se"
  double lower_at_large = 0;  // E||F|| at x_large is at least this
  double exponent_lower = 0;  // log(lower_at_large / upper_at_small) / log(x_large / x_small)
  double level = 0;           // the test's confidence level (one-sided)
  bool passed = false;        // exponent_lower > claimed exponent + tolerance

  bool operator==(const ViolationTestRecord&) const = default;
};
void to_json(nlohmann::json& out, const ViolationTestRecord& test);

// fits.json "exact": the Monte Carlo confirmation of a series' closed form (and of a deterministic bound).
struct ExactCheckRecord {
  std::optional<ExactLaw> law;      // absent where only deterministic bounds are checked
  std::optional<double> max_abs_z;  // over the points with a reliable standard error
  int judged_points = 0, unjudged_points = 0;
  std::vector<double> disagrees_at;  // x where |z| exceeds the tool's limit: a failure of the tool
  // The limit on |z|: Bonferroni's for `family_points` judged points of the folder at family-wise error
  // `family_level`, so that chance alone raises the alarm with probability at most that level. Absent in older
  // folders (a fixed |z| > 4).
  std::optional<double> alarm_abs_z;
  std::optional<int> family_points;
  std::optional<double> family_level;
  int bound_checked_points = 0;
  std::optional<double> max_sample_over_bound;
  std::vector<double> bound_exceeded_at;
  std::optional<double> min_sample_over_lower_bound;  // the smallest sample / its deterministic lower bound
  std::vector<double> lower_bound_undercut_at;
  bool confirmed = true;  // disagrees_at is empty
};

// One entry of fits.json "series": the fit of log(estimate) against log(N) (or log(d), see x_variable) and its
// verdict. Where the writer could not fit (fewer than two usable points) slope, CI and intercept are absent;
// a custom map states no exponent, so it has no claimed exponent and no verdict. The fit writes it and every
// reader reads it through the one to_json/from_json pair below; fields earlier versions lack are optional.
struct Series {
  SeriesKey key;
  std::string formula;
  std::string series_id;  // "series_key": what the fit grouped the points by
  std::optional<std::uint64_t> run_seed;
  std::optional<double> slope;
  std::optional<std::pair<double, double>> slope_ci;  // 95%
  std::optional<double> slope_se;
  std::optional<double> intercept;  // natural log: the fitted line is exp(intercept) * x^slope
  std::optional<double> reduced_chi_sq;
  int fit_points = 0;
  std::optional<double> claimed_exponent;
  std::optional<double> tolerance;
  std::optional<Verdict> verdict;
  // What the verdict rests on, the rule it applied and its numbers; absent in folders written before verdicts
  // named their basis (their verdict came from the global fit).
  std::optional<Basis> basis;
  std::optional<std::string> verdict_rule;
  std::optional<std::string> verdict_reason;
  std::optional<double> extend_to;       // inconclusive: the x that would settle it
  std::optional<std::string> to_settle;  // inconclusive: what would settle it, in one short sentence
  std::optional<std::string> finding;    // C8: what each model is
  bool claims_value = false;             // "claim_form": "equality" (C8's Var(q . k) = d_k), not an exponent
  bool counts_for_exit = true;
  bool se_reliable = true;  // every point's standard error is
  // The global fit (slope, slope_ci) is the finite-N diagnostic; beside it the Jensen ratio
  // E||F|| / sqrt(E||F||^2) at the first and last point, exact or estimated.
  std::optional<double> jensen_first, jensen_last;
  std::string jensen_source;
  std::optional<LocalExponentRecord> local_exponent;  // the primary quantity's (E||F||_F, or the fitted one)
  std::optional<LocalExponentRecord> cross_check;     // sqrt(E||F||^2)'s, where the writer gives it
  std::optional<ExactCheckRecord> exact;              // where a closed form or a bound is checked
  // What is proved about the series' growth in N, and the statement that decided the verdict (bases bound, exact).
  std::vector<ProvedBound> proved_bounds;
  std::optional<ProvedBound> decided_by;
  std::optional<ViolationTestRecord> violation_test;  // asymptotic fit: the heavy-tail-valid test of a violation
  // What the fit runs over: "N" (sequence length), or "d" (head dimension: C8, Var(q . k) = d_k), and of what:
  // "mean" (E||F||_F) or "mean_sq" (the second moment). Extra keys of `attncheck mc`; "N"/"mean" without them.
  std::string x_variable = "N";
  std::string fit_of = "mean";
  std::vector<long long> x;  // the values of x_variable
  std::vector<long long> N;
  std::vector<long long> d_values;  // d of each point (empty where an earlier writer gave none)
  // Per point; NaN where the writer had no finite value.
  std::vector<double> mean;
  std::vector<double> se;
  std::vector<double> mean_sq;  // NaN throughout when the writer gave none
  std::vector<double> se_sq;
  std::vector<std::optional<double>> exact_sq;
  std::vector<std::optional<double>> exact_mean;  // the exact expectation (row sums); none where absent
  // The points.jsonl record of each point, where the folder has one (same order as x); not written.
  std::vector<std::optional<PointRecord>> points;

  // The fitted quantity at point i and its standard error (mean/se or mean_sq/se_sq, per fit_of).
  double fitted(std::size_t i) const { return fit_of == "mean_sq" ? mean_sq[i] : mean[i]; }
  double fitted_se(std::size_t i) const { return fit_of == "mean_sq" ? se_sq[i] : se[i]; }
};

void to_json(nlohmann::json& out, const Series& series);
void from_json(const nlohmann::json& in, Series& series);

// fits.json: the version, the run's provenance (as the writer gives it) and every series of the folder.
// `runs` are the provenances of every run that wrote the folder, earliest first: "runs" holds them all and
// "provenance" the last (what readers of earlier versions show).
std::string fits_json_text(const std::vector<Provenance>& runs, const std::vector<Series>& series);

struct ResultsFolder {
  std::filesystem::path folder;
  Provenance provenance;         // the last run's
  std::vector<Provenance> runs;  // every run that wrote the folder, earliest first (the last alone in older folders)
  std::vector<Series> series;
  bool has_points_file = false;  // points.jsonl was present (it adds per-point detail)
};

// What --resume matches in points.jsonl ("key"): the sweep point's configuration key, the estimand and the run
// seed. Formatted here only, so that the writer and every reader agree on it.
std::string resume_key(std::string_view point_key, std::string_view estimand, std::uint64_t run_seed);

// Reads DIR/fits.json (required) and DIR/points.jsonl (optional; joined to the series by configuration and N).
ResultsFolder read_results_folder(const std::filesystem::path& folder);

// Parsers of the two files on their own, for tests and other readers. `name` is used in messages.
struct FitsDocument {
  std::vector<Provenance> runs;  // earliest first; never empty
  std::vector<Series> series;
};
FitsDocument parse_fits_json(const std::string& text, const std::string& name);
std::vector<PointRecord> parse_points_jsonl(const std::string& text, const std::string& name);

}  // namespace attncheck::records
