#pragma once
// The results folder of `attncheck mc` (docs/results-format.md): points.jsonl and points.csv, rewritten
// atomically after every finished point, and fits.json with the fitted series and verdicts.

#include "attncheck/monte_carlo/runner.hpp"
#include "attncheck/monte_carlo/sweep.hpp"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>
#include <vector>

namespace attncheck::monte_carlo {

// fits.json "format_version": 2 since every verdict names its basis (docs/results-format.md); absent before.
inline constexpr int kResultsFormatVersion = 2;

struct RunContext {
  std::uint64_t run_seed = 0;
  std::string backend;
  int threads = 1;
};

// One JSON object per (point, estimand) with every field of the format plus "key" (what --resume matches)
// and "series_key" (what the fit groups by).
nlohmann::json point_record(const PointSpec& point, Estimand estimand, const PointOutcome& outcome,
                            const RunContext& context);

// Fits every series found in `records` (in order of first appearance) with its verdict.
nlohmann::json fit_series(const std::vector<nlohmann::json>& records, double tolerance);

// Exit code of the run: 1 when a series that states a paper's claim (counts_for_exit) is violated, else 0.
int exit_code_of(const nlohmann::json& series);

class ResultsFolder {
 public:
  // Creates `dir` if needed. With `resume`, loads DIR/points.jsonl so finished points can be skipped;
  // without it, earlier results in the folder are replaced when the first point finishes.
  ResultsFolder(std::filesystem::path dir, bool resume);
  bool finished(const std::string& key) const;
  const std::vector<nlohmann::json>& records() const { return records_; }
  void append(const std::vector<nlohmann::json>& records);
  void write_fits(const nlohmann::json& fits) const;
  const std::filesystem::path& dir() const { return dir_; }

 private:
  void flush() const;
  std::filesystem::path dir_;
  std::vector<nlohmann::json> records_;
};

// Text of points.csv for these records (header + one row each).
std::string records_csv(const std::vector<nlohmann::json>& records);

}  // namespace attncheck::monte_carlo
