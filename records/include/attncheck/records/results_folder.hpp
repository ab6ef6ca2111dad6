#pragma once
// The results folder written by `attncheck mc` (docs/results-format.md), read and checked. Only the keys the
// contract names are read; unknown keys are ignored. Every error names the file and the line (JSON lines) or
// the place in the document (fits.json), and is thrown as theory::InputError.

#include "attncheck/records/input_file.hpp"
#include "attncheck/records/verdict.hpp"

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace attncheck::records {

// How the run that produced a folder was made (fits.json "provenance"). Kept as text as written, so a seed
// beyond 2^53 is not rounded; an object (e.g. machine: {hostname, cpu}) reads "hostname: ..., cpu: ...".
struct Provenance {
  std::string version;
  std::string date;  // ISO 8601 UTC
  std::string machine;
  std::string backend;
  std::string threads;
  std::string run_seed;
  std::string command;
  std::optional<double> wall_seconds;
};

// The configuration that identifies one fitted series, shared by its points.
struct SeriesKey {
  std::string claim;                   // "C3".."C9" or "custom"
  std::optional<std::string> reading;  // "elementwise" | "matrix"
  std::string phi;
  long long p = 1;
  std::optional<double> alpha;
  std::optional<double> mix;           // C9's mix alpha of softmax_col(V) and V
  std::optional<long long> dv;         // C9's value columns
  std::string scale;
  long long D = 0;
  long long d = 0;
  std::string estimand;
  double sigma_x = 1;
  double sigma_t = 1;
  // How the scores are formed: "projected" (the papers' model; also when the key is absent), "qk-layernorm",
  // "iid-unit", "sign-coupled".
  std::string scores = "projected";

  bool operator==(const SeriesKey&) const = default;
  // Short human name, e.g. "C3 elementwise poly p=2 value, D=64 d=64".
  std::string label() const;
};

// One line of points.jsonl: one finished sweep point and estimand.
struct PointRecord {
  SeriesKey key;
  std::string formula;
  double inner = 1;
  long long N = 0;
  long long samples = 0;
  // NaN where the writer had no finite value.
  double mean = 0;  // estimate of E||F||_F
  double se = 0;
  double ci95_lo = 0, ci95_hi = 0;
  double mean_sq = 0;  // estimate of E||F||_F^2
  double se_sq = 0;
  std::optional<double> exact_sq;
  std::optional<double> z_exact_sq;
  std::optional<double> exact_mean;    // where the expectation itself is known (row sums)
  std::optional<double> z_exact_mean;
  std::optional<double> jensen_bound;
  // C9 at mix alpha = 1: the deterministic bound every sample obeys (facts 10-11) and the largest sample.
  std::optional<double> sample_bound, sample_max;
  bool se_reliable = true;
  std::optional<std::string> unreliable_because;
  std::string stopped_by;
  std::string seed;
  std::string run_seed;
  std::string backend;
  std::string threads;
  double wall_seconds = 0;
  int line = 0;  // where it was read, for messages
};

// fits.json "local_exponent" (or "cross_check"): the exponent over the last doublings of x that an
// asymptotic-fit verdict rests on, with its interval (sampling half-width + systematic drift).
struct LocalExponentRecord {
  std::vector<double> window;                // the x used
  std::optional<double> exponent;
  std::optional<std::pair<double, double>> interval;  // absent where the writer gave none ("missing" says why)
};

// One entry of fits.json "series": the fit of log(estimate) against log(N) (or log(d), see x_variable) and its
// verdict. Where the writer could not fit (fewer than two usable points) slope, CI and intercept are absent;
// a custom map states no exponent, so it has no claimed exponent and no verdict.
struct Series {
  SeriesKey key;
  std::string formula;
  std::optional<double> slope;
  std::optional<std::pair<double, double>> slope_ci;  // 95%
  std::optional<double> intercept;  // natural log: the fitted line is exp(intercept) * x^slope
  std::optional<double> claimed_exponent;
  std::optional<double> tolerance;
  std::optional<Verdict> verdict;
  // What the verdict rests on, the rule it applied and its numbers; absent in folders written before verdicts
  // named their basis (their verdict came from the global fit).
  std::optional<Basis> basis;
  std::optional<std::string> verdict_rule;
  std::optional<std::string> verdict_reason;
  std::optional<std::string> finding;  // C8: what each model is
  bool claims_value = false;           // "claim_form": "equality" (C8's Var(q . k) = d_k), not an exponent
  bool counts_for_exit = true;
  // The global fit (slope, slope_ci) is the finite-N diagnostic; beside it the Jensen ratio
  // E||F|| / sqrt(E||F||^2) at the first and last point, exact or estimated.
  std::optional<double> jensen_first, jensen_last;
  std::string jensen_source;
  std::optional<LocalExponentRecord> local_exponent;  // the primary quantity's (E||F||_F, or the fitted one)
  std::optional<LocalExponentRecord> cross_check;     // sqrt(E||F||^2)'s, where the writer gives it
  // What the fit runs over: "N" (sequence length), or "d" (head dimension: C8, Var(q . k) = d_k), and of what:
  // "mean" (E||F||_F) or "mean_sq" (the second moment). Extra keys of `attncheck mc`; "N"/"mean" without them.
  std::string x_variable = "N";
  std::string fit_of = "mean";
  std::vector<long long> x;  // the values of x_variable
  std::vector<long long> N;
  // Per point; NaN where the writer had no finite value.
  std::vector<double> mean;
  std::vector<double> se;
  std::vector<double> mean_sq;  // NaN throughout when the writer gave none
  std::vector<double> se_sq;
  std::vector<std::optional<double>> exact_sq;
  std::vector<std::optional<double>> exact_mean;  // the exact expectation (row sums); none where absent
  // The points.jsonl record of each point, where the folder has one (same order as x).
  std::vector<std::optional<PointRecord>> points;

  // The fitted quantity at point i and its standard error (mean/se or mean_sq/se_sq, per fit_of).
  double fitted(std::size_t i) const { return fit_of == "mean_sq" ? mean_sq[i] : mean[i]; }
  double fitted_se(std::size_t i) const { return fit_of == "mean_sq" ? se_sq[i] : se[i]; }
};

struct ResultsFolder {
  std::filesystem::path folder;
  Provenance provenance;
  std::vector<Series> series;
  bool has_points_file = false;  // points.jsonl was present (it adds per-point detail)
};

// What --resume matches in points.jsonl ("key"): the sweep point's configuration key, the estimand and the run
// seed. Formatted here only, so that the writer and every reader agree on it.
std::string resume_key(std::string_view point_key, std::string_view estimand, std::uint64_t run_seed);

// Reads DIR/fits.json (required) and DIR/points.jsonl (optional; joined to the series by configuration and N).
ResultsFolder read_results_folder(const std::filesystem::path& folder);

// Parsers of the two files on their own, for tests and other readers. `name` is used in messages.
std::pair<Provenance, std::vector<Series>> parse_fits_json(const std::string& text, const std::string& name);
std::vector<PointRecord> parse_points_jsonl(const std::string& text, const std::string& name);

}  // namespace attncheck::records
