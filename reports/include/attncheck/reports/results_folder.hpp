#pragma once
// The results folder written by `attncheck mc` (docs/results-format.md), read and checked. Only the keys the
// contract names are read; unknown keys are ignored. Every error names the file and the line (JSON lines) or
// the place in the document (fits.json), and is thrown as theory::InputError.

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace attncheck::reports {

// How the run that produced a folder was made (fits.json "provenance"). Scalars are kept as the text they
// were written as, so a seed beyond 2^53 is not rounded.
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
  std::string claim;                   // "C3".."C8" or "custom"
  std::optional<std::string> reading;  // "elementwise" | "matrix"
  std::string phi;
  long long p = 1;
  std::optional<double> alpha;
  std::string scale;
  long long D = 0;
  long long d = 0;
  std::string estimand;
  double sigma_x = 1;
  double sigma_t = 1;

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
  double mean = 0;  // estimate of E||F||_F
  double se = 0;
  double ci95_lo = 0, ci95_hi = 0;
  double mean_sq = 0;  // estimate of E||F||_F^2
  double se_sq = 0;
  std::optional<double> exact_sq;
  std::optional<double> z_exact_sq;
  std::optional<double> jensen_bound;
  bool se_reliable = true;
  std::string stopped_by;
  std::string seed;
  std::string run_seed;
  std::string backend;
  std::string threads;
  double wall_seconds = 0;
  int line = 0;  // where it was read, for messages
};

enum class Verdict { holds, tight, violated, inconclusive };
std::string_view to_string(Verdict verdict);

// One entry of fits.json "series": the fit of log E||F||_F against log N and its verdict.
struct Series {
  SeriesKey key;
  std::string formula;
  double slope = 0;
  double slope_ci_lo = 0, slope_ci_hi = 0;  // 95%
  double intercept = 0;  // natural log: the fitted line is exp(intercept) * N^slope
  double claimed_exponent = 0;
  double tolerance = 0;
  Verdict verdict = Verdict::inconclusive;
  std::vector<long long> N;
  std::vector<double> mean;
  std::vector<double> se;
  std::vector<std::optional<double>> exact_sq;
  // The points.jsonl record of each N, where the folder has one (same order as N).
  std::vector<std::optional<PointRecord>> points;
};

struct ResultsFolder {
  std::filesystem::path folder;
  Provenance provenance;
  std::vector<Series> series;
  bool has_points_file = false;  // points.jsonl was present (it adds per-point detail)
};

// Reads DIR/fits.json (required) and DIR/points.jsonl (optional; joined to the series by configuration and N).
ResultsFolder read_results_folder(const std::filesystem::path& folder);

// Parsers of the two files on their own, for tests and other readers. `name` is used in messages.
std::pair<Provenance, std::vector<Series>> parse_fits_json(const std::string& text, const std::string& name);
std::vector<PointRecord> parse_points_jsonl(const std::string& text, const std::string& name);

// The whole file as text; throws theory::InputError naming it when it cannot be read.
std::string read_text_file(const std::filesystem::path& path);

}  // namespace attncheck::reports
