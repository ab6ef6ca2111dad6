#include "attncheck/reports/training_curves.hpp"

#include "attncheck/theory/accumulator.hpp"

#include "attncheck/records/input_file.hpp"
#include "attncheck/reports/numbers.hpp"
#include "attncheck/reports/report.hpp"

#include "attncheck/records/json_fields.hpp"
#include "attncheck/records/json_input.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <iterator>
#include <set>
#include <tuple>

namespace attncheck::reports {

namespace {

using records::detail::JsonFields;

// Names become keys and are matched between lines; labels are free text (escaped wherever they are shown).
void require_name(const JsonFields& fields, const char* key, const std::string& name) {
  const bool plain = !name.empty() && name.size() <= 64 && std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
  });
  if (!plain) {
    // Dumped as JSON so that a control character in it is shown escaped, not printed.
    fields.fail(fmt::format("\"{}\" must be 1-64 letters, digits, '_', '-' or '.', got {}", key,
                            records::json_excerpt(name, 64)));
  }
}

bool optional_boolean(const JsonFields& fields, const char* key, bool fallback) {
  return fields.is_null(key) ? fallback : fields.boolean(key);
}

}  // namespace

TrainingCurves parse_training_curves(const std::string& text, const std::string& name) {
  TrainingCurves curves;
  bool header = false;
  std::set<std::tuple<std::string, long long, long long>> seen;
  const auto find_variant = [&](const std::string& variant) {
    return std::any_of(curves.variants.begin(), curves.variants.end(),
                       [&](const CurveVariant& v) { return v.name == variant; });
  };
  const auto find_metric = [&](const std::string& metric) {
    return std::any_of(curves.metrics.begin(), curves.metrics.end(),
                       [&](const CurveMetric& m) { return m.name == metric; });
  };
  records::detail::for_each_json_line(text, name, [&](const JsonFields& fields, int) {
    const std::string record = fields.word("record", {"curves", "variant", "metric", "point"});
    if (!header && record != "curves") fields.fail("the first line must be the \"curves\" record");
    if (record == "curves") {
      if (header) fields.fail("a second \"curves\" record");
      header = true;
      if (fields.integer("format") != 1) {
        fields.fail(fmt::format("\"format\" = {} is not 1, the only format this attncheck reads",
                                fields.scalar_text("format")));
      }
      curves.title = fields.text("title");
      curves.x_label = fields.text_or_null("x_label").value_or("training step");
      curves.headline = fields.text("headline");
      curves.description = fields.text_or_null("description").value_or("");
      if (!fields.is_null("settings")) curves.settings = fields.scalar_text("settings");
    } else if (record == "variant") {
      CurveVariant variant{fields.text("name"), fields.text("label"), fields.text_or_null("description").value_or("")};
      require_name(fields, "name", variant.name);
      if (find_variant(variant.name)) fields.fail(fmt::format("variant \"{}\" is declared twice", variant.name));
      curves.variants.push_back(std::move(variant));
    } else if (record == "metric") {
      CurveMetric metric;
      metric.name = fields.text("name");
      require_name(fields, "name", metric.name);
      if (find_metric(metric.name)) fields.fail(fmt::format("metric \"{}\" is declared twice", metric.name));
      metric.label = fields.text("label");
      metric.unit = fields.text_or_null("unit").value_or("");
      if (!fields.is_null("higher_is_better")) metric.higher_is_better = fields.boolean("higher_is_better");
      metric.log_y = optional_boolean(fields, "log_y", false);
      if (!fields.is_null("reference")) {
        const JsonFields reference(fields.at("reference"), fields.where() + " \"reference\"");
        metric.reference = reference.number("value");
        metric.reference_label = reference.text("label");
      }
      curves.metrics.push_back(std::move(metric));
    } else {
      TrainingPoint point;
      point.variant = fields.text("variant");
      if (!find_variant(point.variant)) {
        fields.fail(fmt::format("variant {} is not declared by a \"variant\" line above",
                                records::json_excerpt(point.variant, 64)));
      }
      point.seed = fields.integer("seed");
      point.step = fields.integer("step");
      if (point.step < 0) fields.fail(fmt::format("\"step\" = {} is negative", point.step));
      if (!seen.insert({point.variant, point.seed, point.step}).second) {
        fields.fail(
            fmt::format("variant \"{}\" seed {} step {} is recorded twice", point.variant, point.seed, point.step));
      }
      const JsonFields values(fields.at("values"), fields.where() + " \"values\"");
      for (const auto& [metric, value] : fields.at("values").items()) {
        if (!find_metric(metric)) {
          values.fail(
              fmt::format("metric {} is not declared by a \"metric\" line above", records::json_excerpt(metric, 64)));
        }
        if (const auto number = values.number_or_null(metric.c_str())) point.values[metric] = *number;
      }
      curves.points.push_back(std::move(point));
    }
  });
  if (!header) throw theory::InputError(fmt::format("{}: no \"curves\" record: the file is empty", name));
  if (!find_metric(curves.headline)) {
    throw theory::InputError(fmt::format("{}: the headline metric {} is not declared by a \"metric\" line", name,
                                         records::json_excerpt(curves.headline, 64)));
  }
  return curves;
}

TrainingCurves read_training_curves(const std::filesystem::path& path) {
  return parse_training_curves(records::read_text_file(path), path.string());
}

std::vector<SeedSummary> summarize_seeds(const TrainingCurves& curves, const std::string& variant,
                                         const std::string& metric) {
  std::map<long long, std::vector<double>> by_step;
  for (const TrainingPoint& point : curves.points) {
    if (point.variant != variant) continue;
    if (const auto it = point.values.find(metric); it != point.values.end()) by_step[point.step].push_back(it->second);
  }
  std::vector<SeedSummary> out;
  for (const auto& [step, values] : by_step) {
    theory::Accumulator seeds;
    for (double v : values) seeds.add(v);
    out.push_back({step, seeds.mean(), values.size() > 1 ? seeds.standard_error() : std::nan(""), values.size()});
  }
  return out;
}

std::optional<long long> last_common_step(const TrainingCurves& curves, const std::string& metric) {
  std::optional<std::set<long long>> common;
  for (const CurveVariant& variant : curves.variants) {
    std::set<long long> steps;
    for (const SeedSummary& s : summarize_seeds(curves, variant.name, metric)) steps.insert(s.step);
    if (!common) {
      common = std::move(steps);
      continue;
    }
    std::set<long long> both;
    std::set_intersection(common->begin(), common->end(), steps.begin(), steps.end(), std::inserter(both, both.end()));
    common = std::move(both);
  }
  if (!common || common->empty()) return std::nullopt;
  return *common->rbegin();
}

namespace {

const CurveMetric& metric_named(const TrainingCurves& curves, const std::string& name) {
  return *std::find_if(curves.metrics.begin(), curves.metrics.end(),
                       [&](const CurveMetric& m) { return m.name == name; });
}

std::optional<SeedSummary> summary_at(const TrainingCurves& curves, const std::string& variant,
                                      const std::string& metric, long long step) {
  for (const SeedSummary& s : summarize_seeds(curves, variant, metric)) {
    if (s.step == step) return s;
  }
  return std::nullopt;
}

std::string estimate_text(const SeedSummary& s) {
  return fmt::format("{} over {} seed{}", format_estimate(s.mean, s.standard_error), s.seeds, s.seeds == 1 ? "" : "s");
}

}  // namespace

std::string headline_statement(const TrainingCurves& curves) {
  const CurveMetric& metric = metric_named(curves, curves.headline);
  const auto step = last_common_step(curves, metric.name);
  if (!step || curves.variants.empty()) {
    return fmt::format("No step has {} recorded for every variant, so the variants cannot be compared.", metric.label);
  }
  const bool higher = metric.higher_is_better.value_or(true);
  struct Entry {
    const CurveVariant* variant;
    SeedSummary summary;
  };
  std::vector<Entry> entries;
  for (const CurveVariant& variant : curves.variants) {
    entries.push_back({&variant, *summary_at(curves, variant.name, metric.name, *step)});
  }
  std::stable_sort(entries.begin(), entries.end(), [higher](const Entry& a, const Entry& b) {
    return higher ? a.summary.mean > b.summary.mean : a.summary.mean < b.summary.mean;
  });
  const Entry& best = entries.front();
  std::string text =
      fmt::format("At step {}, {} ends {} in {} (mean ± standard error over seeds): {}", *step, best.variant->label,
                  higher ? "highest" : "lowest", metric.label, estimate_text(best.summary));
  for (std::size_t k = 1; k < entries.size(); ++k) {
    const SeedSummary& other = entries[k].summary;
    const double difference = std::fabs(best.summary.mean - other.mean);
    const double se = std::hypot(best.summary.standard_error, other.standard_error);
    std::string distance;
    if (!std::isfinite(se)) {
      distance = "with a single seed, no standard error to measure the gap by";
    } else if (se == 0) {
      distance = difference == 0 ? "equal on every seed" : "apart with no spread over seeds";
    } else {
      const double z = difference / se;
      distance = fmt::format("{:.1f} standard errors of the difference {}", z, higher ? "lower" : "higher");
      if (z < 2) distance += ", which is within two standard errors: not a clear difference";
    }
    text += fmt::format("{} {} ends at {}, {}", k == 1 ? ";" : "; and", entries[k].variant->label, estimate_text(other),
                        distance);
  }
  return text + ".";
}

namespace {

Curve mean_line(const std::vector<SeedSummary>& summaries, const std::string& title, int colour) {
  Curve curve{title, CurveStyle::line_with_points, {}, {}, {}, {}, colour};
  for (const SeedSummary& s : summaries) {
    curve.x.push_back(static_cast<double>(s.step));
    curve.y.push_back(s.mean);
  }
  return curve;
}

// One standard error either side; steps with a single seed have no band.
std::optional<Curve> error_band(const std::vector<SeedSummary>& summaries, int colour) {
  Curve band{"", CurveStyle::band, {}, {}, {}, {}, colour};
  for (const SeedSummary& s : summaries) {
    if (!std::isfinite(s.standard_error)) continue;
    band.x.push_back(static_cast<double>(s.step));
    band.y.push_back(s.mean);
    band.y_lo.push_back(s.mean - s.standard_error);
    band.y_hi.push_back(s.mean + s.standard_error);
  }
  if (band.x.size() < 2) return std::nullopt;
  return band;
}

}  // namespace

void add_training_curves_section(const TrainingCurves& curves, const std::filesystem::path& file, bool with_plots,
                                 Document& document, PendingFigures& pending) {
  auto& blocks = document.blocks;
  blocks.push_back(Heading{2, "Training curves: " + curves.title, "training-curves"});
  std::set<long long> seeds;
  for (const TrainingPoint& p : curves.points) seeds.insert(p.seed);
  std::vector<std::pair<std::string, std::string>> facts{{"file", file.string()},
                                                         {"points", fmt::format("{}", curves.points.size())},
                                                         {"seeds", fmt::format("{}", seeds.size())}};
  if (!curves.settings.empty()) facts.emplace_back("settings", curves.settings);
  blocks.push_back(Facts{std::move(facts)});
  if (!curves.description.empty()) blocks.push_back(Paragraph{curves.description});
  Table variants;
  variants.header = {"variant", "label", "description"};
  for (const CurveVariant& v : curves.variants) variants.rows.push_back({v.name, v.label, v.description});
  blocks.push_back(std::move(variants));
  if (curves.points.empty()) {
    blocks.push_back(Notice{fmt::format("{} has no points yet.", file.string())});
    return;
  }
  blocks.push_back(Paragraph{headline_statement(curves)});
  if (seeds.size() < 2) {
    blocks.push_back(
        Notice{"one seed only: the curves have no standard error band and the comparison above no "
               "standard error."});
  }

  for (std::size_t m = 0; m < curves.metrics.size(); ++m) {
    const CurveMetric& metric = curves.metrics[m];
    PlotSpec plot{fmt::format("curves-metric{}", m + 1),
                  metric.label + " (mean ± standard error over seeds)",
                  curves.x_label,
                  metric.label,
                  false,
                  metric.log_y,
                  {}};
    long long first = 0, last = 0;
    bool any = false;
    for (std::size_t v = 0; v < curves.variants.size(); ++v) {
      const auto summaries = summarize_seeds(curves, curves.variants[v].name, metric.name);
      if (summaries.empty()) continue;
      first = any ? std::min(first, summaries.front().step) : summaries.front().step;
      last = any ? std::max(last, summaries.back().step) : summaries.back().step;
      any = true;
      if (auto band = error_band(summaries, static_cast<int>(v))) plot.curves.push_back(std::move(*band));
      plot.curves.push_back(mean_line(summaries, curves.variants[v].label, static_cast<int>(v)));
    }
    if (!any) continue;
    if (metric.reference) {
      plot.curves.push_back(Curve{metric.reference_label,
                                  CurveStyle::dashed_line,
                                  {static_cast<double>(first), static_cast<double>(last)},
                                  {*metric.reference, *metric.reference},
                                  {},
                                  {},
                                  6});
    }
    blocks.push_back(Heading{3, metric.label, fmt::format("training-curves-metric{}", m + 1)});
    const bool drawable = std::any_of(plot.curves.begin(), plot.curves.end(), [&](const Curve& c) {
      return std::any_of(c.y.begin(), c.y.end(),
                         [&](double y) { return std::isfinite(y) && (!metric.log_y || y > 0); });
    });
    if (with_plots && drawable) {
      pending.add(std::move(plot),
                  fmt::format("{}{} against {}: the mean over seeds of each variant, shaded one "
                              "standard error either side{}.",
                              metric.label, metric.unit.empty() ? "" : " (" + metric.unit + ")", curves.x_label,
                              metric.log_y ? " (log y axis)" : ""),
                  blocks);
    } else if (with_plots) {
      blocks.push_back(Notice{fmt::format("nothing to plot for \"{}\": no value fits its axis.", metric.label)});
    }
  }

  // The numbers behind the end of every curve.
  Table final_values;
  final_values.header = {"metric", "step"};
  for (const CurveVariant& v : curves.variants) final_values.header.push_back(v.label + ": mean ± SE");
  for (const CurveMetric& metric : curves.metrics) {
    const auto step = last_common_step(curves, metric.name);
    if (!step) continue;
    std::vector<std::string> row{metric.label, fmt::format("{}", *step)};
    for (const CurveVariant& v : curves.variants)
      row.push_back(estimate_text(*summary_at(curves, v.name, metric.name, *step)));
    final_values.rows.push_back(std::move(row));
  }
  blocks.push_back(Heading{3, "Values at the last step every variant recorded", "training-curves-final"});
  blocks.push_back(std::move(final_values));
}

}  // namespace attncheck::reports
