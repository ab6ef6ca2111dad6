// The probe section: norms measured on real checkpoints during training, as in the papers' Figs. 2-3.

#include "attncheck/reports/head_maps.hpp"
#include "attncheck/reports/numbers.hpp"
#include "attncheck/reports/report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

namespace attncheck::reports {

namespace {

std::string x_label(const ProbeSeries& series) {
  return series.steps_known ? "training step" : "checkpoint (in the order of the log; steps unknown)";
}

std::string summary_text(const std::optional<ProbeStep::Summary>& s) {
  if (!s) return "-";
  if (s->count == 1) return format_number(s->mean);
  return fmt::format("{} {}", format_number(s->mean), format_interval(s->min, s->max, 3));
}

Curve mean_curve(const ProbeSeries& series, ProbeQuantity quantity, std::string title, CurveStyle style) {
  Curve curve{std::move(title), style, {}, {}, {}, {}};
  for (const ProbeStep& step : series.steps) {
    if (const auto& s = step.summary(quantity)) {
      curve.x.push_back(step.position);
      curve.y.push_back(s->mean);
    }
  }
  return curve;
}

// A trained model of one run: its label in the report (with the run's name in a comparison) and its series.
struct Model {
  std::string label;  // "trained with softmax" or "RUN: trained with softmax"
  std::size_t log = 0;
  int variant = 0;  // its place among the models of one activation, so that runs of one activation differ
  ProbeSeries series;
};

// The band from the min to the max over layers and heads of one quantity, beside its mean.
Curve min_max_band(const ProbeSeries& series, ProbeQuantity quantity, int colour) {
  Curve band{"", CurveStyle::band, {}, {}, {}, {}, colour};
  for (const ProbeStep& step : series.steps) {
    if (const auto& s = step.summary(quantity)) {
      band.x.push_back(step.position);
      band.y.push_back(s->mean);
      band.y_lo.push_back(s->min);
      band.y_hi.push_back(s->max);
    }
  }
  return band;
}

std::string step_text(const ProbeStep& step) { return step.step ? fmt::format("step {}", *step.step) : "step unknown"; }

// The layer x head maps of a model's first and last checkpoints: the start and the end of training, the
// contrast a reader looks for; the maps of the checkpoints between them are left to the tables' summaries.
void add_checkpoint_maps(const Model& model, const std::vector<ProbeRecord>& records, std::size_t index,
                         bool with_plots, Document& document, PendingFigures& pending) {
  const auto& steps = model.series.steps;
  if (steps.empty() || !with_plots) return;
  std::vector<const ProbeStep*> chosen{&steps.front()};
  if (steps.size() > 1) chosen.push_back(&steps.back());
  document.blocks.push_back(Paragraph{
      steps.size() == 1
          ? "Layer x head maps of its one checkpoint:"
          : fmt::format("Layer x head maps of the first and the last of its {} checkpoints (in training order):",
                        steps.size())});
  for (std::size_t c = 0; c < chosen.size(); ++c) {
    const ProbeStep& step = *chosen[c];
    const HeadMaps maps =
        head_maps(checkpoint_ratios(records, model.series.activation, step.checkpoint), step.checkpoint);
    pending.add(head_map_figure(fmt::format("probe-model{}-heads-{}", index + 1, c == 0 ? "first" : "last"),
                                fmt::format("{}: softmax norms per head relative to their bounds", model.label),
                                {fmt::format("checkpoint {} ({})", step.checkpoint, step_text(step))}, maps),
                fmt::format("{}, {}: ||A||_F / sqrt(N) (left) and ||dA/dS||_F / (sqrt(N)/2) "
                            "(right) of the softmax on the model's scores, "
                            "per layer and head, one colour scale; the bound is 1.",
                            model.label, step_text(step)),
                document.blocks);
  }
}

// One line per layer over training: the largest over the layer's heads of the softmax's ||A||_F / sqrt(N) and
// ||dA/dS||_F / (sqrt(N)/2) on the model's scores, with the bounds (ratio 1) drawn. The mean over layers and heads
// of the plots above can hide one layer that nears a bound; its largest head shows it.
void add_layer_curves(const Model& model, std::size_t index, const std::vector<ProbeRecord>& records, bool with_plots,
                      std::vector<Block>& blocks, PendingFigures& pending) {
  const auto& steps = model.series.steps;
  if (steps.empty() || !with_plots) return;
  std::map<long long, std::pair<Curve, Curve>> layers;  // layer -> (attention, gradient)
  double largest = 1;
  for (const ProbeStep& step : steps) {
    std::map<long long, std::pair<double, double>> of_layer;
    for (const HeadRatios& head : checkpoint_ratios(records, model.series.activation, step.checkpoint)) {
      auto [it, fresh] = of_layer.try_emplace(head.layer, head.attention, head.gradient);
      if (!fresh) {
        it->second.first = std::fmax(it->second.first, head.attention);
        it->second.second = std::fmax(it->second.second, head.gradient);
      }
    }
    for (const auto& [layer, ratios] : of_layer) {
      auto& [attention, gradient] = layers[layer];
      for (auto [curve, value] : {std::pair{&attention, ratios.first}, std::pair{&gradient, ratios.second}}) {
        curve->x.push_back(step.position);
        curve->y.push_back(value);
        if (std::isfinite(value)) largest = std::max(largest, value);
      }
    }
  }
  if (layers.empty()) return;
  PlotSpec figure;
  figure.name = fmt::format("probe-model{}-layers", index + 1);
  figure.title = fmt::format("{}: per layer, the largest head's ratio to its bound", model.label);
  figure.columns = 2;
  const std::pair<double, double> steps_range{steps.front().position, steps.back().position};
  for (const bool gradient : {false, true}) {
    PlotSpec panel;
    panel.title = gradient ? "||dA/dS||_F / (sqrt(N)/2) per layer" : "||A||_F / sqrt(N) per layer";
    panel.x_label = x_label(model.series);
    panel.y_label = "ratio to the bound (max over heads)";
    panel.log_x = false;
    panel.log_y = false;
    panel.y_range = std::pair{0.0, 1.05 * largest};
    int place = 0;
    for (auto& [layer, curves] : layers) {
      Curve curve = gradient ? curves.second : curves.first;
      curve.title = fmt::format("layer {}", layer);
      curve.style = CurveStyle::line_with_points;
      curve.colour = place;
      curve.variant = place / 7;  // past the palette's seven colours, another point type and dash
      ++place;
      panel.curves.push_back(std::move(curve));
    }
    panel.curves.push_back(Curve{gradient ? "bound: sqrt(N)/2 (ratio 1)" : "bound: sqrt(N) (ratio 1)",
                                 CurveStyle::dashed_line,
                                 {steps_range.first, steps_range.second},
                                 {1, 1},
                                 {},
                                 {},
                                 activation_colour("")});  // black: the colour of no activation
    figure.panels.push_back(std::move(panel));
  }
  pending.add(std::move(figure),
              fmt::format("{}: for each layer (one line each), the largest over its heads of ||A||_F / sqrt(N) "
                          "(left) and of ||dA/dS||_F / (sqrt(N)/2) (right) of the softmax on the model's scores; the "
                          "dashed black line at 1 is the bound (Theorem 4.1: ||A||_F <= sqrt(N), and the exact sup "
                          "sqrt(N)/2 of ||dA/dS||_F, a quarter of the published 2 sqrt(N)).",
                          model.label),
              blocks);
}

// The models of every log: one per trained activation of each run.
std::vector<Model> models_of(const std::vector<ProbeLog>& logs) {
  std::vector<Model> models;
  std::map<std::string, int> runs_of_activation;
  for (std::size_t l = 0; l < logs.size(); ++l) {
    for (ProbeSeries& series : summarize_probe_log(logs[l].records)) {
      const std::string label = (logs[l].run.empty() ? "" : logs[l].run + ": ") + "trained with " + series.activation;
      models.push_back(Model{label, l, runs_of_activation[series.activation]++, std::move(series)});
    }
  }
  return models;
}

// How a model is told apart in the figures of all models: by its activation's colour (and, across runs of one
// activation, its dash), or, where runs are compared, by its run's colour (and its activation's place in the run).
std::pair<int, int> model_colour(const std::vector<Model>& models, const Model& model) {
  const bool runs_compared = std::any_of(models.begin(), models.end(), [](const Model& m) { return m.log != 0; });
  if (!runs_compared) return {activation_colour(model.series.activation), model.variant};
  const auto place_in_run =
      std::count_if(models.begin(), models.end(), [&](const Model& m) { return m.log == model.log && &m < &model; });
  return {static_cast<int>(model.log), static_cast<int>(place_in_run)};
}

// What each log holds. Returns the number of records over all logs.
std::size_t add_log_facts(const std::vector<ProbeLog>& logs, const std::vector<Model>& models,
                          std::vector<Block>& blocks) {
  std::size_t total_records = 0;
  for (const ProbeLog& log : logs) {
    std::set<std::string> checkpoints;
    std::set<long long> lengths;
    for (const ProbeRecord& r : log.records) {
      checkpoints.insert(r.checkpoint);
      lengths.insert(r.metrics.N);
    }
    std::string length_text;
    for (long long n : lengths) length_text += (length_text.empty() ? "" : ", ") + fmt::format("{}", n);
    Facts facts;
    if (!log.run.empty()) facts.items.emplace_back("run", log.run);
    facts.items.insert(facts.items.end(),
                       {{"probe log", log.path.string()},
                        {"lines", fmt::format("{}", log.records.size())},
                        {"checkpoints", fmt::format("{}", checkpoints.size())},
                        {"trained activations",
                         fmt::format("{}", std::count_if(models.begin(), models.end(),
                                                         [&](const Model& m) { return &logs[m.log] == &log; }))},
                        {"sequence lengths N", length_text.empty() ? "-" : length_text}});
    blocks.push_back(std::move(facts));
    if (log.records.empty()) blocks.push_back(Notice{fmt::format("{} has no records yet.", log.path.string())});
    total_records += log.records.size();
  }
  return total_records;
}

// The runs' end points in one table: what the plots show over training, at the last checkpoint.
void add_run_ends(const std::vector<ProbeLog>& logs, const std::vector<Model>& models, std::vector<Block>& blocks) {
  Table ends;
  ends.header = {"run",
                 "trained activation",
                 "checkpoints",
                 "last step",
                 "own ||A||_F at the last step, mean [min, max]",
                 "own ||dA/dS||_F at the last step, mean [min, max]"};
  for (const Model& model : models) {
    if (model.series.steps.empty()) continue;
    const ProbeStep& last = model.series.steps.back();
    const auto own_attention = own_attention_quantity(model.series.activation);
    const auto own_gradient = own_gradient_quantity(model.series.activation);
    ends.rows.push_back({logs[model.log].run, model.series.activation, fmt::format("{}", model.series.steps.size()),
                         last.step ? fmt::format("{}", *last.step) : "-",
                         own_attention ? summary_text(last.summary(*own_attention)) : "-",
                         own_gradient ? summary_text(last.summary(*own_gradient)) : "-"});
  }
  blocks.push_back(Heading{3, "The runs at their last checkpoints", "probes-runs"});
  blocks.push_back(std::move(ends));
}

// The papers' Fig. 2 and Fig. 3: the models side by side, each with its own activation.
void add_own_activation_figures(const std::vector<Model>& models, bool with_plots, std::vector<Block>& blocks,
                                PendingFigures& pending) {
  const bool steps_known =
      std::all_of(models.begin(), models.end(), [](const Model& m) { return m.series.steps_known; });
  PlotSpec own_norm{"probe-attention",
                    "||A||_F of each model's own activation (line: mean over layers and heads, band: min to max)",
                    steps_known ? "training step" : "checkpoint (in the order of the log)",
                    "||A||_F",
                    false,
                    true,
                    {}};
  PlotSpec own_grad{"probe-gradient",
                    "||dA/dS||_F of each model's own activation (line: mean over layers and heads, band: min to max)",
                    own_norm.x_label,
                    "||dA/dS||_F",
                    false,
                    true,
                    {}};
  for (const Model& model : models) {
    const auto [colour, variant] = model_colour(models, model);
    for (auto [plot, own] : {std::pair{&own_norm, own_attention_quantity(model.series.activation)},
                             std::pair{&own_grad, own_gradient_quantity(model.series.activation)}}) {
      if (!own) continue;
      plot->curves.push_back(min_max_band(model.series, *own, colour));
      plot->curves.push_back(mean_curve(model.series, *own, model.label, CurveStyle::line_with_points));
      plot->curves.back().colour = colour;
      plot->curves.back().variant = variant;
    }
  }
  blocks.push_back(Heading{3, "All models: attention norm and gradient norm against training", "probes-all"});
  if (own_norm.curves.empty()) {
    blocks.push_back(
        Paragraph{"The log does not say which activation the models were trained with (or names "
                  "one without an ||A||_F column), so the comparison of own activations is left out; "
                  "the per-model plots below show every activation on the same scores."});
  } else {
    if (with_plots)
      pending.add_drawable(
          own_norm,
          "||A||_F of each model's own activation against training (log y axis), as in the papers' Fig. 2: "
          "the line is the mean over layers and heads, the shaded band their min to max.",
          blocks);
  }
  if (!own_grad.curves.empty()) {
    if (with_plots)
      pending.add_drawable(
          own_grad,
          "||dA/dS||_F of each model's own activation against training (log y axis), as in the papers' "
          "Fig. 3: the line is the mean over layers and heads, the shaded band their min to max.",
          blocks);
  }
}

// Softmax's norms on every model's scores over training as ratios to their bounds, ||A||_F / sqrt(N) and
// ||dA/dS||_F / (sqrt(N)/2), the bound a dashed line at 1: the models (and runs) on one scale whatever their N,
// which the raw norms above are not. Line: the mean over layers and heads; band: their min to max.
void add_bound_ratio_figure(const std::vector<Model>& models, const std::vector<ProbeLog>& logs, bool with_plots,
                            std::vector<Block>& blocks, PendingFigures& pending) {
  if (!with_plots || models.empty()) return;
  PlotSpec figure;
  figure.name = "probe-ratios";
  figure.title = "Softmax on every model's scores: ratio to its bound (1: at the bound)";
  figure.columns = 2;
  double largest = 1, first_position = INFINITY, last_position = -INFINITY;
  for (const bool gradient : {false, true}) {
    PlotSpec panel;
    panel.title = gradient ? "||dA/dS||_F / (sqrt(N)/2)" : "||A||_F / sqrt(N)";
    panel.x_label = models.front().series.steps_known ? "training step" : "checkpoint (in the order of the log)";
    panel.y_label = "ratio to the bound (mean over layers and heads)";
    panel.log_x = false;
    panel.log_y = false;
    for (const Model& model : models) {
      const auto [colour, variant] = model_colour(models, model);
      Curve band{"", CurveStyle::band, {}, {}, {}, {}, colour};
      Curve mean{model.label, CurveStyle::line_with_points, {}, {}, {}, {}, colour, variant};
      for (const ProbeStep& step : model.series.steps) {
        const auto heads = checkpoint_ratios(logs[model.log].records, model.series.activation, step.checkpoint);
        double sum = 0, low = INFINITY, high = -INFINITY;
        std::size_t count = 0;
        for (const HeadRatios& head : heads) {
          const double ratio = gradient ? head.gradient : head.attention;
          if (!std::isfinite(ratio)) continue;
          sum += ratio;
          low = std::min(low, ratio);
          high = std::max(high, ratio);
          ++count;
        }
        if (count == 0) continue;
        mean.x.push_back(step.position);
        mean.y.push_back(sum / static_cast<double>(count));
        band.x.push_back(step.position);
        band.y.push_back(mean.y.back());
        band.y_lo.push_back(low);
        band.y_hi.push_back(high);
        largest = std::max(largest, high);
        first_position = std::min(first_position, step.position);
        last_position = std::max(last_position, step.position);
      }
      if (mean.x.empty()) continue;
      panel.curves.push_back(std::move(band));
      panel.curves.push_back(std::move(mean));
    }
    figure.panels.push_back(std::move(panel));
  }
  if (!(first_position <= last_position)) return;
  for (std::size_t gradient = 0; gradient < 2; ++gradient) {
    PlotSpec& panel = figure.panels[gradient];
    panel.y_range = std::pair{0.0, 1.05 * largest};
    panel.curves.push_back(Curve{gradient ? "bound: sqrt(N)/2 (ratio 1)" : "bound: sqrt(N) (ratio 1)",
                                 CurveStyle::dashed_line,
                                 {first_position, last_position},
                                 {1, 1},
                                 {},
                                 {},
                                 activation_colour("")});  // black: the colour of no activation
  }
  pending.add(std::move(figure),
              "Softmax evaluated on each model's own scores, every model on one linear scale: ||A||_F / sqrt(N) "
              "(left) and ||dA/dS||_F / (sqrt(N)/2) (right) against training, the line the mean over layers and "
              "heads, the shaded band their min to max; the dashed black line at 1 is the bound (Theorem 4.1's "
              "sqrt(N), and sqrt(N)/2, the exact sup of ||dA/dS||_F).",
              blocks);
}

// One model: every activation on its scores, its first and last layer x head maps, and its checkpoints' table.
// The --what-if expressions recorded for this model (AttentionRecorder(what_if=...), probe --what-if), one curve
// each: the mean over layers and heads of ||phi(S)||_F (or ||dphi/dS||_F) per checkpoint, a later line for a head
// replacing an earlier one as everywhere in the log.
std::vector<Curve> what_if_curves(const Model& entry, const std::vector<ProbeRecord>& records, bool gradient) {
  std::vector<std::string> order;
  std::map<std::string, Curve> curves;
  for (const ProbeStep& step : entry.series.steps) {
    std::map<std::pair<long long, long long>, const records::ProbeHeadRecord*> latest;
    for (const ProbeRecord& r : records) {
      if (r.checkpoint == step.checkpoint && r.activation.value_or("unknown") == entry.series.activation) {
        latest[{r.metrics.layer, r.metrics.head}] = &r.metrics;
      }
    }
    std::map<std::string, std::pair<double, int>> sums;
    for (const auto& [key, head] : latest) {
      for (const records::ProbeWhatIf& w : head->what_if) {
        const double value = gradient ? w.norms.grad : w.norms.value;
        if (!std::isfinite(value)) continue;
        if (std::find(order.begin(), order.end(), w.phi) == order.end()) order.push_back(w.phi);
        sums[w.phi].first += value;
        ++sums[w.phi].second;
      }
    }
    for (const auto& [phi, sum] : sums) {
      Curve& curve =
          curves.try_emplace(phi, Curve{fmt::format("what-if phi = {}", phi), CurveStyle::line, {}, {}, {}, {}})
              .first->second;
      curve.x.push_back(step.position);
      curve.y.push_back(sum.first / sum.second);
    }
  }
  std::vector<Curve> out;
  for (std::size_t k = 0; k < order.size(); ++k) {
    out.push_back(curves.at(order[k]));
    out.back().colour = 4 + static_cast<int>(k % 3);  // past the four activations' colours
  }
  return out;
}

// What training-stability studies watch: the softmax attention's entropy (mean and band over heads) and the largest
// logit (the largest over heads), per checkpoint. Nothing for logs written before they were recorded.
void add_stability_curves(const Model& model, std::size_t index, bool with_plots, std::vector<Block>& blocks,
                          PendingFigures& pending) {
  const ProbeSeries& series = model.series;
  Curve largest_logit{"max |S| over layers and heads", CurveStyle::line_with_points, {}, {}, {}, {}, 0};
  for (const ProbeStep& step : series.steps) {
    if (const auto& s = step.summary(ProbeQuantity::max_logit)) {
      largest_logit.x.push_back(step.position);
      largest_logit.y.push_back(s->max);
    }
  }
  Curve entropy =
      mean_curve(series, ProbeQuantity::entropy, "mean over layers and heads", CurveStyle::line_with_points);
  if (!with_plots || (entropy.x.empty() && largest_logit.x.empty())) return;
  entropy.colour = 0;
  PlotSpec figure;
  figure.name = fmt::format("probe-model{}-stability", index + 1);
  figure.title = fmt::format("{}: attention entropy and largest logit", model.label);
  figure.columns = 2;
  PlotSpec left{"", "softmax attention entropy", x_label(series), "entropy (nats, mean over rows)", false, false, {}};
  left.curves = {min_max_band(series, ProbeQuantity::entropy, 0), std::move(entropy)};
  left.curves.front().title = "[min, max] over layers and heads";
  PlotSpec right{"", "largest logit", x_label(series), "max |S| (scaled score)", false, false, {}};
  right.curves = {std::move(largest_logit)};
  figure.panels = {std::move(left), std::move(right)};
  pending.add(std::move(figure),
              fmt::format("{}: the Shannon entropy of each head's softmax attention (left; mean over its rows, 0 for "
                          "one-hot rows, log of the attended count for uniform ones) and the largest |score| of any "
                          "head (right). A falling entropy with a growing largest logit is the entropy collapse that "
                          "precedes divergence in training.",
                          model.label),
              blocks);
}

void add_model(const Model& entry, std::size_t m, const std::vector<ProbeRecord>& records, bool with_plots,
               Document& document, PendingFigures& pending) {
  auto& blocks = document.blocks;
  const ProbeSeries& model = entry.series;
  blocks.push_back(Heading{3, "Model " + entry.label, fmt::format("probe-model-{}", m + 1)});
  if (!model.steps_known) {
    blocks.push_back(Notice{"some checkpoints of this model have no step: they are placed in the order of the log."});
  }
  for (const bool gradient : {false, true}) {
    const auto own = gradient ? own_gradient_quantity(model.activation) : own_attention_quantity(model.activation);
    const std::string norm = gradient ? "||dA/dS||_F" : "||A||_F";
    PlotSpec plot{fmt::format("probe-model{}-{}", m + 1, gradient ? "gradient" : "attention"),
                  fmt::format("{}: {} of each activation on its scores", entry.label, norm),
                  x_label(model),
                  norm + " (mean over layers and heads)",
                  false,
                  true,
                  {}};
    if (own) plot.curves.push_back(min_max_band(model, *own, activation_colour(model.activation)));
    for (ProbeQuantity q : gradient ? kScoreGradientQuantities : kAttentionQuantities) {
      plot.curves.push_back(mean_curve(model, q, std::string(probe_meaning(q)),
                                       own == q ? CurveStyle::line_with_points : CurveStyle::dashed_line));
      plot.curves.back().colour = activation_colour(probe_activation(q));
    }
    for (Curve& curve : what_if_curves(entry, records, gradient)) plot.curves.push_back(std::move(curve));
    if (with_plots)
      pending.add_drawable(
          plot,
          gradient ? "Jacobian norms in the scores of every activation on this model's scores against training (log y "
                     "axis; solid with points: its own, with the band from its min to its max over layers and heads; "
                     "plain lines: the what-if expressions recorded, if any)."
                   : "||A||_F of every activation evaluated on this model's scores against training (log y axis; solid "
                     "with points: its own activation, with the band from its min to its max over layers and heads; "
                     "plain lines: the what-if expressions recorded, if any).",
          blocks);
  }
  add_layer_curves(entry, m, records, with_plots, blocks, pending);
  add_stability_curves(entry, m, with_plots, blocks, pending);
  add_checkpoint_maps(entry, records, m, with_plots, document, pending);

  Table table;
  table.header = {"step", "checkpoint", "layer-heads"};
  std::vector<ProbeQuantity> present;
  for (int index = 0; index < kProbeQuantityCount; ++index) {
    const auto q = static_cast<ProbeQuantity>(index);
    const bool any = std::any_of(model.steps.begin(), model.steps.end(),
                                 [q](const ProbeStep& s) { return s.summary(q).has_value(); });
    if (!any) continue;
    present.push_back(q);
    table.header.push_back(fmt::format("{} mean [min, max]", probe_meaning(q)));
  }
  for (const ProbeStep& step : model.steps) {
    std::vector<std::string> row = {step.step ? fmt::format("{}", *step.step) : "-", step.checkpoint,
                                    fmt::format("{}", step.heads)};
    for (ProbeQuantity q : present) row.push_back(summary_text(step.summary(q)));
    table.rows.push_back(std::move(row));
  }
  blocks.push_back(std::move(table));
}

}  // namespace

void add_probe_section(const std::vector<ProbeRecord>& records, const std::filesystem::path& log, bool with_plots,
                       Document& document, PendingFigures& pending) {
  add_probe_section({ProbeLog{log, "", records}}, with_plots, document, pending);
}

void add_probe_section(const std::vector<ProbeLog>& logs, bool with_plots, Document& document,
                       PendingFigures& pending) {
  auto& blocks = document.blocks;
  const std::vector<Model> models = models_of(logs);
  blocks.push_back(
      Heading{2, logs.size() == 1 ? "Probes during training" : "Probes during training: runs compared", "probes"});
  if (add_log_facts(logs, models, blocks) == 0) return;
  blocks.push_back(Paragraph{
      "Each value is the mean over all probed layers and heads of a checkpoint, with the range [min, max] over "
      "them (the shaded band in the plots); these are measurements of the given checkpoints, not estimates, so "
      "they carry no standard error. The ||A||_F columns evaluate each activation on the same scores of the "
      "model; the model's own activation is the one it was trained with. Each activation has one colour in "
      "every plot of this report, except where runs are compared: there the figures of all models give each run "
      "its own colour."});
  if (logs.size() > 1) add_run_ends(logs, models, blocks);
  add_own_activation_figures(models, with_plots, blocks, pending);
  add_bound_ratio_figure(models, logs, with_plots, blocks, pending);
  for (std::size_t m = 0; m < models.size(); ++m) {
    add_model(models[m], m, logs[models[m].log].records, with_plots, document, pending);
  }
}

}  // namespace attncheck::reports
