// The ViT section: the papers' Figures 1-3, Table 1 and Figures 6-7 from examples/vit_digits.py's results, and
// what of the papers' findings the small model reproduces.

#include "attncheck/probes/safetensors.hpp"
#include "attncheck/records/input_file.hpp"
#include "attncheck/reports/numbers.hpp"
#include "attncheck/reports/report.hpp"
#include "attncheck/reports/vit_results.hpp"
#include "attncheck/theory/accumulator.hpp"
#include "attncheck/theory/common.hpp"

#include "attncheck/records/json_fields.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <set>

namespace attncheck::reports {

namespace fs = std::filesystem;

AttentionMapReader safetensors_attention_maps() {
  return [](const fs::path& file, const std::string& tensor, long long head) {
    const theory::Matrix map = probes::read_attention_head(file, tensor, head);
    return AttentionMatrix{map.rows(), std::vector<double>(map.data(), map.data() + map.size())};
  };
}
using records::detail::JsonFields;
using theory::InputError;

namespace {

constexpr std::array<std::string_view, 5> kActivations = {"softmax", "poly3", "poly3_scaled", "identity",
                                                          "identity_scaled"};

std::string activation_label(const std::string& activation) {
  if (activation == "softmax") return "softmax";
  if (activation == "poly3") return "x^3";
  if (activation == "poly3_scaled") return "x^3/sqrt(N)";
  if (activation == "identity") return "x";
  return "x/sqrt(N)";
}

VitRun read_run(const JsonFields& fields) {
  VitRun run;
  run.experiment = fields.word("experiment", {"activations", "scale-sweep"});
  run.activation = fields.word("activation", kActivations);
  run.scale = fields.number_or_null("scale");
  if (run.scale && !(*run.scale > 0 && std::isfinite(*run.scale))) {
    fields.fail(fmt::format("\"scale\" = {} must be a positive number", *run.scale));
  }
  if (!run.scale && run.activation != "softmax") fields.fail(fmt::format("\"scale\" is null for {}", run.activation));
  if (run.experiment == "scale-sweep" && run.activation != "poly3") {
    fields.fail(fmt::format("the scale sweep is of poly3, not {}", run.activation));
  }
  run.N = fields.integer("N");
  run.patch = fields.integer("patch");
  run.seed = fields.integer("seed");
  run.steps = fields.integer("steps");
  run.test_size = fields.integer("test_size");
  run.image_side = fields.integer_or_null("image_side");
  if (run.image_side && *run.image_side < 1)
    fields.fail(fmt::format("\"image_side\" = {} must be >= 1", *run.image_side));
  if (run.N < 1 || run.patch < 1 || run.steps < 1 || run.test_size < 1 || run.seed < 0) {
    fields.fail(fmt::format("N = {}, patch = {}, steps = {} and test_size = {} must be >= 1 and seed = {} >= 0", run.N,
                            run.patch, run.steps, run.test_size, run.seed));
  }
  run.accuracy = fields.number_or_null("accuracy");
  if (run.accuracy && !(*run.accuracy >= 0 && *run.accuracy <= 1)) {
    fields.fail(fmt::format("\"accuracy\" = {} is not a fraction in [0, 1]", *run.accuracy));
  }
  run.diverged_at = fields.integer_or_null("diverged_at");
  if (!run.accuracy && !run.diverged_at) fields.fail("\"accuracy\" is null but the run did not diverge");
  const auto& trace = fields.array("trace");
  for (std::size_t i = 0; i < trace.size(); ++i) {
    const JsonFields point(trace[i], fmt::format("{} trace[{}]", fields.where(), i));
    VitTracePoint p;
    p.step = point.integer("step");
    p.layer = point.integer("layer");
    if (p.step < 0 || p.layer < 0) point.fail(fmt::format("step = {} and layer = {} must be >= 0", p.step, p.layer));
    p.attention_fro = point.number_or_null("attention_fro");
    p.jacobian_fro = point.number_or_null("jacobian_fro");
    for (const auto& [key, value] :
         {std::pair{"attention_fro", p.attention_fro}, std::pair{"jacobian_fro", p.jacobian_fro}}) {
      if (value && !(*value >= 0 && std::isfinite(*value)))
        point.fail(fmt::format("\"{}\" = {} is not a norm", key, *value));
    }
    run.trace.push_back(p);
  }
  return run;
}

// Mean and standard error of the mean over seeds; one value has no spread to estimate, so its SE is NaN
// (printed "± ?").
struct MeanSe {
  double mean = NAN, se = NAN;
  std::size_t count = 0;
};
MeanSe mean_se(const std::vector<double>& values) {
  theory::Accumulator seeds;
  for (double v : values) seeds.add(v);
  return {values.empty() ? NAN : seeds.mean(), values.size() < 2 ? NAN : seeds.standard_error(), values.size()};
}

std::string estimate_text(const MeanSe& m) {
  if (m.count == 0) return "-";
  if (m.count == 1) return format_number(m.mean) + " (one seed: no SE)";
  return format_estimate(m.mean, m.se);
}

// Two means differ by more than `z` combined standard errors (both SEs known).
std::optional<double> z_of_difference(const MeanSe& a, const MeanSe& b) {
  const double combined = std::hypot(a.se, b.se);
  if (!std::isfinite(combined) || combined == 0) return std::nullopt;
  return (a.mean - b.mean) / combined;
}

std::string z_text(const std::optional<double>& z) {
  return z ? fmt::format("z = {:.1f}", *z) : "z unknown (one seed)";
}

struct ActivationSummary {
  MeanSe accuracy;
  std::size_t runs = 0, diverged = 0;
  long long N = 0;
};

}  // namespace

VitResults parse_vit_results(const std::string& text, const std::string& name) {
  const records::detail::json document = records::detail::parse_json(text, name, true);
  const JsonFields top(document, name);
  if (top.text("format") != "attncheck-vit-digits") top.fail(fmt::format("\"format\" is not \"attncheck-vit-digits\""));
  if (top.integer("format_version") != 1)
    top.fail(fmt::format("\"format_version\" {} is not 1", top.integer("format_version")));
  VitResults results;
  const JsonFields provenance(top.at("provenance"), name + " provenance");
  results.command = provenance.text("command");
  results.date = provenance.text("date");
  results.wall_seconds = provenance.number("wall_seconds");
  results.device = provenance.text_or_null("device");
  results.dtype = provenance.text_or_null("dtype");
  results.norms = provenance.text_or_null("norms");
  results.plan = provenance.text_or_null("plan");
  results.runs_planned = provenance.integer_or_null("runs_planned");
  results.runs_skipped = provenance.integer_or_null("runs_skipped");
  if (results.runs_skipped && *results.runs_skipped < 0) provenance.fail("\"runs_skipped\" must be >= 0");
  if (top.has("dataset") && !top.is_null("dataset")) {
    results.dataset = JsonFields(top.at("dataset"), name + " dataset").text("caption");
  }
  if (top.has("model") && !top.is_null("model")) {
    const JsonFields model(top.at("model"), name + " model");
    if (const auto model_name = model.text_or_null("name")) {
      constexpr std::string_view kModels[] = {"small", "vit-tiny"};
      results.model = model.word("name", kModels);
    }
  }
  const auto& runs = top.array("runs");
  for (std::size_t i = 0; i < runs.size(); ++i) {
    results.runs.push_back(read_run(JsonFields(runs[i], fmt::format("{} runs[{}]", name, i))));
  }
  return results;
}

VitResults read_vit_results(const fs::path& path) {
  return parse_vit_results(records::read_text_file(path), path.string());
}

namespace {

// Table 1: accuracy per activation over seeds. Returns the summaries the findings compare.
std::map<std::string, ActivationSummary> add_accuracy_table(const VitResults& results, std::vector<Block>& blocks) {
  std::map<std::string, ActivationSummary> summaries;
  std::map<std::string, std::vector<double>> accuracies;
  for (const VitRun& run : results.runs) {
    if (run.experiment != "activations") continue;
    auto& s = summaries[run.activation];
    s.N = run.N;
    ++s.runs;
    if (run.accuracy)
      accuracies[run.activation].push_back(*run.accuracy);
    else
      ++s.diverged;
  }
  for (auto& [activation, s] : summaries) s.accuracy = mean_se(accuracies[activation]);
  blocks.push_back(Heading{3, "Table 1: test accuracy per activation", "vit-table"});
  if (summaries.empty()) {
    blocks.push_back(Notice{"the results hold no runs of the activations experiment."});
    return summaries;
  }
  Table table;
  table.header = {"activation", "N", "seeds", "diverged", "test accuracy (mean ± SE over seeds)"};
  for (std::string_view name : kActivations) {
    const auto found = summaries.find(std::string(name));
    if (found == summaries.end()) continue;
    const auto& s = found->second;
    table.rows.push_back({activation_label(found->first), fmt::format("{}", s.N), fmt::format("{}", s.runs),
                          fmt::format("{}", s.diverged), estimate_text(s.accuracy)});
  }
  blocks.push_back(std::move(table));
  blocks.push_back(
      Paragraph{"A diverged run (a loss that is not finite) has no accuracy and is left out of the "
                "mean; the table counts it."});
  return summaries;
}

std::set<long long> traced_layers(const VitResults& results) {
  std::set<long long> layers;
  for (const VitRun& run : results.runs) {
    for (const VitTracePoint& p : run.trace) layers.insert(p.layer);
  }
  return layers;
}

// Figures 2-3: per layer, the mean over seeds (of the mean over heads) against the training step.
void add_norm_figures(const VitResults& results, const std::set<long long>& layers, bool with_plots,
                      std::vector<Block>& blocks, PendingFigures& pending) {
  if (layers.empty()) return;
  blocks.push_back(Heading{3, "Figures 2-3: ||A||_F and ||dA/dS||_F per layer over training", "vit-norms"});
  blocks.push_back(Paragraph{
      "Each curve is one activation's mean over seeds of the mean over heads, measured on the first image of "
      "each training batch with the weights of that step; ||dA/dS||_F is the Frobenius norm of the activation's "
      "Jacobian in the scores (softmax row-wise, the polynomials entrywise: for c x it is the constant c N)."});
  if (!with_plots) return;
  for (bool jacobian : {false, true}) {
    for (long long layer : layers) {
      const std::string quantity = jacobian ? "||dA/dS||_F" : "||A||_F";
      PlotSpec plot{fmt::format("vit-{}-layer{}", jacobian ? "jacobian" : "attention", layer),
                    fmt::format("layer {}: {} (mean over heads and seeds)", layer, quantity),
                    "training step",
                    quantity,
                    false,
                    true,
                    {}};
      for (std::string_view name : kActivations) {
        std::map<long long, std::vector<double>> by_step;
        for (const VitRun& run : results.runs) {
          if (run.experiment != "activations" || run.activation != name) continue;
          for (const VitTracePoint& p : run.trace) {
            const auto value = jacobian ? p.jacobian_fro : p.attention_fro;
            if (p.layer == layer && value) by_step[p.step].push_back(*value);
          }
        }
        Curve curve{
            activation_label(std::string(name)), CurveStyle::line_with_points, {}, {}, {}, {}, activation_colour(name)};
        for (const auto& [step, values] : by_step) {
          curve.x.push_back(static_cast<double>(step));
          curve.y.push_back(mean_se(values).mean);
        }
        if (!curve.x.empty()) plot.curves.push_back(std::move(curve));
      }
      pending.add_drawable(
          std::move(plot),
          fmt::format("Layer {}: {} of each activation against training (log y axis), as in the papers' Fig. {}.",
                      layer, quantity, jacobian ? 3 : 2),
          blocks);
    }
  }
}

// The best scale c of one sweep of c x^3 (one N and image side).
struct BestScale {
  std::string label;  // "64", or "64 (16x16 images)" when the sweep has several image sides
  long long N = 0;
  double c = 0;
};

// Figure 1: accuracy against c for each N, with the table of runs and the best c per N.
std::vector<BestScale> add_scale_sweep(const VitResults& results, bool with_plots, std::vector<Block>& blocks,
                                       PendingFigures& pending) {
  // (N, image side: 0 when not recorded) -> c -> accuracies (diverged: absent); the same N from 8 x 8 and from
  // upsampled 16 x 16 digits are different experiments.
  using SweepKey = std::pair<long long, long long>;
  std::map<SweepKey, std::map<double, std::vector<double>>> sweep;
  std::map<SweepKey, std::map<double, std::size_t>> sweep_diverged;
  std::set<long long> sides;
  for (const VitRun& run : results.runs) {
    if (run.experiment != "scale-sweep") continue;
    const SweepKey key{run.N, run.image_side.value_or(0)};
    sides.insert(key.second);
    auto& values = sweep[key][*run.scale];
    if (run.accuracy)
      values.push_back(*run.accuracy);
    else
      ++sweep_diverged[key][*run.scale];
  }
  std::vector<BestScale> best_scale;
  if (sweep.empty()) return best_scale;
  const auto sweep_label = [&](const SweepKey& key) {
    return sides.size() > 1 && key.second > 0 ? fmt::format("{} ({}x{} images)", key.first, key.second, key.second)
                                              : fmt::format("{}", key.first);
  };
  blocks.push_back(Heading{3, "Figure 1: accuracy against the scale c of c x^3", "vit-scale"});
  PlotSpec plot{"vit-scale-sweep",
                "test accuracy against c of c x^3 (mean ± SE over seeds)",
                "c (log scale)",
                "test accuracy",
                true,
                false,
                {}};
  Table table;
  table.header = {"N", "c", "1/sqrt(N)", "seeds", "diverged", "test accuracy (mean ± SE)"};
  for (const auto& [key, by_scale] : sweep) {
    const long long n = key.first;
    Curve curve{"N = " + sweep_label(key), CurveStyle::points_with_error_bars, {}, {}, {}, {}};
    double best = NAN, best_accuracy = -1;
    for (const auto& [c, values] : by_scale) {
      const MeanSe m = mean_se(values);
      const std::size_t diverged = sweep_diverged[key][c];
      table.rows.push_back({sweep_label(key), format_number(c), format_number(1 / std::sqrt(double(n))),
                            fmt::format("{}", values.size() + diverged), fmt::format("{}", diverged),
                            estimate_text(m)});
      if (!m.count) continue;
      const double se = std::isfinite(m.se) ? m.se : 0;
      curve.x.push_back(c);
      curve.y.push_back(m.mean);
      curve.y_lo.push_back(m.mean - se);
      curve.y_hi.push_back(m.mean + se);
      if (m.mean > best_accuracy) best_accuracy = m.mean, best = c;
    }
    if (std::isfinite(best)) best_scale.push_back({sweep_label(key), n, best});
    plot.curves.push_back(std::move(curve));
  }
  if (with_plots)
    pending.add_drawable(std::move(plot),
                         "Test accuracy against c (log axis) for each sequence length N, as in the papers' Fig. 1.",
                         blocks);
  blocks.push_back(std::move(table));
  Table best_table;
  best_table.header = {"N", "best c (highest mean accuracy)", "1/sqrt(N)", "best c · sqrt(N)"};
  for (const BestScale& b : best_scale) {
    best_table.rows.push_back({b.label, format_number(b.c), format_number(1 / std::sqrt(double(b.N))),
                               format_number(b.c * std::sqrt(double(b.N)))});
  }
  blocks.push_back(std::move(best_table));
  return best_scale;
}

// Figures 6-7: one head's attention map of the final softmax and x^3/sqrt(N) models.
void add_attention_maps(const fs::path& folder, bool with_plots, std::vector<Block>& blocks, PendingFigures& pending,
                        const AttentionMapReader& read_attention_map, long long map_layer, long long map_head) {
  std::vector<std::string> maps;
  for (std::string_view name : {"softmax", "poly3_scaled", "poly3"}) {
    std::error_code error;
    if (fs::exists(folder / fmt::format("attention-{}.safetensors", name), error)) maps.emplace_back(name);
  }
  if (maps.empty()) return;
  if (!read_attention_map) {
    blocks.push_back(
        Notice{fmt::format("attention maps of {} are in {} but no safetensors reader was given: "
                           "`attncheck report` draws them",
                           fmt::join(maps, ", "), folder.string())});
    return;
  }
  blocks.push_back(
      Heading{3, fmt::format("Figures 6-7: attention maps (layer {}, head {}, first test digit)", map_layer, map_head),
              "vit-maps"});
  for (const std::string& name : maps) {
    const fs::path file = folder / fmt::format("attention-{}.safetensors", name);
    const AttentionMatrix matrix = read_attention_map(file, fmt::format("layer.{}", map_layer), map_head);
    const bool signed_scale = name != "softmax";
    PlotSpec plot{fmt::format("vit-map-{}", name),
                  fmt::format("{}: attention of layer {}, head {}", activation_label(name), map_layer, map_head),
                  "key j",
                  "query i",
                  false,
                  false,
                  {},
                  HeatMap{matrix.N, matrix.N, matrix.values, signed_scale}};
    if (with_plots)
      pending.add_drawable(std::move(plot),
                           fmt::format("{} ({}): {} colour scale.", activation_label(name), file.filename().string(),
                                       signed_scale ? "signed, centred at 0 (red negative, blue positive)"
                                                    : "0 (white) to the largest weight"),
                           blocks);
  }
}

// Table 1 in words: x^3/sqrt(N) against softmax, and x^3 unscaled.
std::vector<std::string> accuracy_findings(const std::map<std::string, ActivationSummary>& summaries) {
  std::vector<std::string> findings;
  const auto summary_of = [&](const char* name) -> const ActivationSummary* {
    const auto found = summaries.find(name);
    return found == summaries.end() || !found->second.accuracy.count ? nullptr : &found->second;
  };
  const ActivationSummary* softmax = summary_of("softmax");
  const ActivationSummary* scaled = summary_of("poly3_scaled");
  const ActivationSummary* unscaled = summary_of("poly3");
  if (softmax && scaled) {
    const auto z = z_of_difference(scaled->accuracy, softmax->accuracy);
    const bool agrees = z && std::fabs(*z) <= 2;
    findings.push_back(
        fmt::format("x^3/sqrt(N) trains like softmax: {}. Accuracy {} against {} ({}; agreement means |z| <= 2).",
                    !z       ? "undecided (one seed)"
                    : agrees ? "agrees (no difference detected)"
                             : "does not agree",
                    estimate_text(scaled->accuracy), estimate_text(softmax->accuracy), z_text(z)));
  }
  if (softmax && unscaled) {
    const auto z = z_of_difference(unscaled->accuracy, softmax->accuracy);
    const bool worse = unscaled->diverged > 0 || (z && *z < -2);
    findings.push_back(fmt::format(
        "x^3 without a scale diverges or loses accuracy: {}. {} of {} runs diverged; accuracy {} against softmax's "
        "{} ({}; a loss means z < -2).",
        worse ? "agrees"
        : !z  ? "undecided (one seed)"
              : "not reproduced at this scale",
        unscaled->diverged, unscaled->runs, estimate_text(unscaled->accuracy), estimate_text(softmax->accuracy),
        z_text(z)));
  }
  return findings;
}

// Figs. 2-3 in words: per layer and norm, x^3, x^3/sqrt(N) and softmax at the last step each recorded.
std::vector<std::string> norm_findings(const VitResults& results, const std::set<long long>& layers) {
  std::vector<std::string> findings;
  for (bool jacobian : {false, true}) {
    const char* quantity = jacobian ? "||dA/dS||_F" : "||A||_F";
    for (long long layer : layers) {
      std::map<std::string, std::pair<long long, std::vector<double>>> last;  // activation -> (step, values)
      for (const VitRun& run : results.runs) {
        if (run.experiment != "activations") continue;
        if (run.activation != "poly3" && run.activation != "poly3_scaled" && run.activation != "softmax") continue;
        for (const VitTracePoint& p : run.trace) {
          const auto value = jacobian ? p.jacobian_fro : p.attention_fro;
          if (p.layer != layer || !value) continue;
          auto& [step, values] = last[run.activation];
          if (values.empty() || p.step > step) step = p.step, values.clear();
          if (p.step == step) values.push_back(*value);
        }
      }
      if (last.size() != 3) continue;
      const double unscaled_norm = mean_se(last["poly3"].second).mean;
      const double scaled_norm = mean_se(last["poly3_scaled"].second).mean;
      const double softmax_norm = mean_se(last["softmax"].second).mean;
      // "Toward softmax" on the log axis the figures use.
      const bool agrees = unscaled_norm > scaled_norm && std::fabs(std::log(scaled_norm / softmax_norm)) <
                                                             std::fabs(std::log(unscaled_norm / softmax_norm));
      findings.push_back(fmt::format(
          "Layer {}, {} at the last recorded step (mean over heads and seeds): x^3 {}, x^3/sqrt(N) {}, softmax {} "
          "(steps {}, {}, {}). The papers find x^3's far larger and the scale bringing it toward softmax's: {}.",
          layer, quantity, format_number(unscaled_norm, 3), format_number(scaled_norm, 3),
          format_number(softmax_norm, 3), last["poly3"].first, last["poly3_scaled"].first, last["softmax"].first,
          agrees ? "agrees" : "does not agree"));
    }
  }
  return findings;
}

// Fig. 1 in words: does the best c shrink as N grows?
std::optional<std::string> scale_finding(const std::vector<BestScale>& best_scale) {
  if (best_scale.size() < 2) return std::nullopt;
  bool shrinks = true;
  for (std::size_t i = 1; i < best_scale.size(); ++i) shrinks = shrinks && best_scale[i].c <= best_scale[i - 1].c;
  const bool strictly = best_scale.back().c < best_scale.front().c;
  std::string where;
  for (const BestScale& b : best_scale) {
    where += fmt::format("{}N = {}: best c = {} = {} / sqrt(N)", where.empty() ? "" : "; ", b.label, format_number(b.c),
                         format_number(b.c * std::sqrt(double(b.N)), 3));
  }
  return fmt::format(
      "The best scale c shrinks as N grows (Fig. 1): {}. {}. The best c is the grid point of highest mean "
      "accuracy; neighbouring points within their standard errors are as good.",
      shrinks && strictly ? "agrees" : "not reproduced at this scale", where);
}

}  // namespace

void add_vit_section(const VitResults& results, const fs::path& folder, bool with_plots, Document& document,
                     PendingFigures& pending, const AttentionMapReader& read_attention_map, long long map_layer,
                     long long map_head) {
  auto& blocks = document.blocks;
  const bool papers_model = results.model == "vit-tiny";
  blocks.push_back(Heading{2,
                           papers_model ? "ViT-Tiny (12 layers, 3 heads, width 192): the papers' figures at their scale"
                                        : "ViT on the digits: the papers' figures at small scale",
                           "vit"});
  Facts facts{{{"results", (folder / kVitResultsName).string()},
               {"command", results.command},
               {"date", results.date},
               {"wall time", fmt::format("{:.0f} s", results.wall_seconds)},
               {"runs", fmt::format("{}", results.runs.size())}}};
  const auto add = [&](const char* what, const std::optional<std::string>& value) {
    if (value) facts.items.emplace_back(what, *value);
  };
  add("data", results.dataset);
  add("device", results.device);
  add("training precision", results.dtype);
  add("norms", results.norms);
  add("plan", results.plan);
  blocks.push_back(std::move(facts));
  if (results.runs_skipped && *results.runs_skipped > 0) {
    blocks.push_back(
        Notice{fmt::format("{} of the plan's {} runs were not started (its time limit): the table and "
                           "figures below lack them",
                           *results.runs_skipped, results.runs_planned.value_or(0))});
  }
  const std::map<std::string, ActivationSummary> summaries = add_accuracy_table(results, blocks);
  const std::set<long long> layers = traced_layers(results);
  add_norm_figures(results, layers, with_plots, blocks, pending);
  const std::vector<BestScale> best_scale = add_scale_sweep(results, with_plots, blocks, pending);
  add_attention_maps(folder, with_plots, blocks, pending, read_attention_map, map_layer, map_head);

  // What agrees with the papers and what does not, from the numbers above.
  std::vector<std::string> findings = accuracy_findings(summaries);
  for (std::string& f : norm_findings(results, layers)) findings.push_back(std::move(f));
  if (auto f = scale_finding(best_scale)) findings.push_back(std::move(*f));
  if (findings.empty()) return;
  blocks.push_back(Heading{3,
                           papers_model ? "Agreement with the papers (diagnostic: few seeds)"
                                        : "Agreement with the papers (diagnostic: a small model, few seeds)",
                           "vit-agreement"});
  for (const std::string& f : findings) blocks.push_back(Paragraph{f});
}

}  // namespace attncheck::reports
