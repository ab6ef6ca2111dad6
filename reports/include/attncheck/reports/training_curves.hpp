#pragma once
// Training curves: any metric against the training step, for several variants of one model and several seeds
// each (docs/results-format.md, "Training curves"). The report draws each metric's mean over seeds with a band
// of one standard error per variant, and states which variant ends best in the headline metric.

#include "attncheck/reports/document.hpp"

#include <cstddef>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace attncheck::reports {

struct PendingFigures;

inline constexpr const char* kTrainingCurvesName = "attncheck-curves.jsonl";

struct CurveVariant {
  std::string name, label, description;
};

struct CurveMetric {
  std::string name, label, unit;
  std::optional<bool> higher_is_better;  // unknown: the statement says "highest"
  bool log_y = false;
  std::optional<double> reference;  // a line drawn across the plot (a bound, chance level)
  std::string reference_label;
};

struct TrainingPoint {
  std::string variant;
  long long seed = 0, step = 0;
  std::map<std::string, double> values;  // metric name -> value (metrics written as null are absent)
};

struct TrainingCurves {
  std::string title, x_label, headline, description, settings;  // settings: "name: value, ..." as written
  std::vector<CurveVariant> variants;                           // in the file's order
  std::vector<CurveMetric> metrics;
  std::vector<TrainingPoint> points;
};

// Throws theory::InputError naming `name`, the line and the key for anything malformed: a missing or second
// "curves" line, an unknown format, a point naming an undeclared variant or metric, a repeated
// (variant, seed, step), a headline that is not a declared metric.
TrainingCurves parse_training_curves(const std::string& text, const std::string& name);
TrainingCurves read_training_curves(const std::filesystem::path& path);

// One metric of one variant at one step, over the seeds that recorded it.
struct SeedSummary {
  long long step = 0;
  double mean = 0;
  double standard_error = 0;  // sample standard deviation / sqrt(seeds); NaN for one seed
  std::size_t seeds = 0;
};
// In increasing step order.
std::vector<SeedSummary> summarize_seeds(const TrainingCurves& curves, const std::string& variant,
                                         const std::string& metric);

// The last step that every variant recorded the headline metric at (none when there is no such step).
std::optional<long long> last_common_step(const TrainingCurves& curves, const std::string& metric);

// The plain statement of which variant ends best in the headline metric, and by how many standard errors of
// the difference each other variant trails: computed from the data, never written by hand.
std::string headline_statement(const TrainingCurves& curves);

void add_training_curves_section(const TrainingCurves& curves, const std::filesystem::path& file, bool with_plots,
                                 Document& document, PendingFigures& pending);

}  // namespace attncheck::reports
