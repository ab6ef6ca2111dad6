#pragma once
// The results folder of `attncheck mc` (docs/results-format.md): points.jsonl and points.csv, rewritten
// atomically after every finished point, and fits.json with the fitted series and verdicts of the whole folder.

#include "attncheck/monte_carlo/runner.hpp"
#include "attncheck/monte_carlo/sweep.hpp"
#include "attncheck/records/input_file.hpp"
#include "attncheck/records/results_folder.hpp"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace attncheck::monte_carlo {

struct RunContext {
  std::uint64_t run_seed = 0;
  std::string backend;
  int threads = 1;
  ScorePrecision precision = ScorePrecision::fp64;
};

// What identifies a finished (point, estimand) of a run seed and score precision in a results folder: "key" of its
// record. Mixed-precision points carry ";precision=mixed", so --resume never takes one for a double point (or
// the reverse) and they fit as a series of their own; double keys are those of folders written before.
std::string record_key(const PointSpec& point, Estimand estimand, std::uint64_t run_seed,
                       ScorePrecision precision = ScorePrecision::fp64);

// The record of one (point, estimand) with every field of the format, its resume key (what --resume matches)
// and its series key (what the fit groups by).
records::PointRecord point_record(const PointSpec& point, Estimand estimand, const PointOutcome& outcome,
                                  const RunContext& context);

// Points whose Monte Carlo estimate is judged against a closed form (a reliable standard error): the family over
// which the tool-failure alarm controls its error.
int judged_points(const std::vector<records::PointRecord>& records);

// Fits every series found in `records` (in order of first appearance) with its verdict. The alarm's family is
// `family_points` judged points (those of a whole results folder), or the judged points of `records`.
std::vector<records::Series> fit_series(const std::vector<records::PointRecord>& records, double tolerance,
                                        std::optional<int> family_points = std::nullopt);

// What the counted series (counts_for_exit) of a run settle together: violated when any is violated, else
// unsettled when any is only consistent or inconclusive, else holds. The command line's exit codes are 1, 5, 0.
enum class RunVerdict { holds, violated, unsettled };
RunVerdict run_verdict(const std::vector<records::Series>& series);
// The exit code of `attncheck mc` (and "exit_code" of its JSON) for a run's verdict: 0 holds, 1 violated, 5 not
// settled (cli/subcommand.hpp names every command's codes).
constexpr int exit_code_of(RunVerdict verdict) {
  return verdict == RunVerdict::violated ? 1 : verdict == RunVerdict::unsettled ? 5 : 0;
}

// What `mc --out DIR` does with points already in DIR.
enum class FolderStart {
  fresh,      // refuse a folder that holds finished points (neither --resume nor --force)
  resume,     // keep them; points this run repeats are skipped (--resume)
  overwrite,  // remove them (and points.csv, fits.json) first (--force)
};

// Several processes may write one folder at once (runs of other claims resumed into it, or the same sweep
// split over machines sharing the disk): every change is a read-merge-write of points.jsonl under the folder's
// lock (records/folder_lock.hpp), so a finished point of either process is never lost, and a point present
// twice (same key) counts once, its last record kept.
class ResultsWriter {
 public:
  // Creates `dir` if needed and removes the temporaries a killed run left. Throws theory::InputError naming
  // the folder for `fresh` when it already holds points.
  ResultsWriter(std::filesystem::path dir, FolderStart start);
  // The folder's records, one per key, as last read from disk.
  const std::vector<records::PointRecord>& records() const { return records_; }
  // The record of a finished point, after re-reading points.jsonl if another process changed it.
  std::optional<records::PointRecord> finished(const std::string& key);
  // The folder's records, after re-reading points.jsonl if another process changed it.
  const std::vector<records::PointRecord>& current_records();
  // Adds the records (replacing any with the same key) to what the folder holds now, and rewrites
  // points.jsonl and points.csv.
  void append(const std::vector<records::PointRecord>& records);
  // Fits every series of the folder's records as they are on disk now and writes fits.json with `provenance` after
  // those of the runs that wrote the folder before; `note` hears when their provenance could not be read.
  void write_fits(const records::Provenance& provenance, double tolerance,
                  const std::function<void(const std::string&)>& note = {});
  const std::filesystem::path& dir() const { return dir_; }

 private:
  void reload();  // under the lock or not: points.jsonl is only ever replaced whole
  std::filesystem::path dir_;
  std::vector<records::PointRecord> records_;
  std::optional<records::FileIdentity> loaded_;  // of the points.jsonl records_ came from
};

// Resume planning: the records of a planned point when `existing` holds every estimand of it for this run seed
// and precision (the point is skipped, its records reused), none when any is missing (the point runs).
std::optional<std::vector<records::PointRecord>> finished_records(const std::vector<records::PointRecord>& existing,
                                                                  const PointSpec& point, std::uint64_t run_seed,
                                                                  ScorePrecision precision);

// Text of points.csv for these records (header + one row each).
std::string records_csv(const std::vector<records::PointRecord>& records);

}  // namespace attncheck::monte_carlo
