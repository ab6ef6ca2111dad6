// The probe section: norms measured on real checkpoints during training, as in the papers' Figs. 2-3.

#include "attncheck/reports/numbers.hpp"
#include "attncheck/reports/report.hpp"

#include <fmt/format.h>

#include <algorithm>
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

bool any_positive(const Curve& curve) {
  return std::any_of(curve.y.begin(), curve.y.end(), [](double y) { return y > 0; });
}

// Adds the plot when it has something to draw on a log axis, and a notice instead when it has not.
void add_plot(PlotSpec plot, const std::string& caption, bool with_plots, Document& document, PendingFigures& pending) {
  plot.curves.erase(std::remove_if(plot.curves.begin(), plot.curves.end(), [](const Curve& c) { return !any_positive(c); }),
                    plot.curves.end());
  if (!with_plots) return;
  if (plot.curves.empty()) {
    document.blocks.push_back(Notice{fmt::format("nothing to plot for \"{}\": no positive values.", plot.title)});
    return;
  }
  pending.plots.push_back(std::move(plot));
  pending.block_of_plot.push_back(document.blocks.size());
  document.blocks.push_back(Figure{"", "", caption});
}

}  // namespace

void add_probe_section(const std::vector<ProbeRecord>& records, const std::filesystem::path& log, bool with_plots,
                       Document& document, PendingFigures& pending) {
  auto& blocks = document.blocks;
  const std::vector<ProbeSeries> models = summarize_probe_log(records);
  blocks.push_back(Heading{2, "Probes during training", "probes"});
  std::set<std::string> checkpoints;
  std::set<long long> lengths;
  for (const ProbeRecord& r : records) {
    checkpoints.insert(r.checkpoint);
    lengths.insert(r.N);
  }
  std::string length_text;
  for (long long n : lengths) length_text += (length_text.empty() ? "" : ", ") + fmt::format("{}", n);
  blocks.push_back(Facts{{{"probe log", log.string()},
                          {"lines", fmt::format("{}", records.size())},
                          {"checkpoints", fmt::format("{}", checkpoints.size())},
                          {"trained activations", fmt::format("{}", models.size())},
                          {"sequence lengths N", length_text.empty() ? "-" : length_text}}});
  if (records.empty()) {
    blocks.push_back(Notice{fmt::format("{} has no records yet.", log.string())});
    return;
  }
  blocks.push_back(Paragraph{
      "Each value is the mean over all probed layers and heads of a checkpoint, with the range [min, max] over "
      "them; these are measurements of the given checkpoints, not estimates, so they carry no standard error. "
      "The ||A||_F columns evaluate each activation on the same scores of the model; the model's own activation "
      "is the one it was trained with."});

  // The papers' Fig. 2 and Fig. 3: the models side by side, each with its own activation.
  const bool steps_known = std::all_of(models.begin(), models.end(), [](const ProbeSeries& m) { return m.steps_known; });
  PlotSpec own_norm{"probe-attention", "||A||_F of each model's own activation (mean over layers and heads)",
                    steps_known ? "training step" : "checkpoint (in the order of the log)", "||A||_F", false, true, {}};
  PlotSpec own_grad{"probe-gradient", "||dA/dS||_F of each model's own activation (mean over layers and heads)",
                    own_norm.x_label, "||dA/dS||_F", false, true, {}};
  for (const ProbeSeries& model : models) {
    if (const auto own = own_attention_quantity(model.activation)) {
      own_norm.curves.push_back(mean_curve(model, *own, "trained with " + model.activation, CurveStyle::line_with_points));
    }
    if (const auto own = own_gradient_quantity(model.activation)) {
      own_grad.curves.push_back(mean_curve(model, *own, "trained with " + model.activation, CurveStyle::line_with_points));
    }
  }
  blocks.push_back(Heading{3, "All models: attention norm and gradient norm against training", "probes-all"});
  if (own_norm.curves.empty()) {
    blocks.push_back(Paragraph{"The log does not say which activation the models were trained with (or names "
                               "one without an ||A||_F column), so the comparison of own activations is left out; "
                               "the per-model plots below show every activation on the same scores."});
  } else {
    add_plot(own_norm, "||A||_F of each model's own activation against training (log y axis), as in the papers' Fig. 2.",
             with_plots, document, pending);
  }
  if (!own_grad.curves.empty()) {
    add_plot(own_grad, "||dA/dS||_F of each model's own activation against training (log y axis), as in the papers' "
             "Fig. 3.", with_plots, document, pending);
  }

  for (std::size_t m = 0; m < models.size(); ++m) {
    const ProbeSeries& model = models[m];
    blocks.push_back(Heading{3, "Model trained with " + model.activation, fmt::format("probe-model-{}", m + 1)});
    if (!model.steps_known) {
      blocks.push_back(Notice{"some checkpoints of this model have no step: they are placed in the order of the log."});
    }
    PlotSpec norms{fmt::format("probe-model{}-attention", m + 1),
                   fmt::format("trained with {}: ||A||_F of each activation on its scores", model.activation),
                   x_label(model), "||A||_F (mean over layers and heads)", false, true, {}};
    for (ProbeQuantity q : kAttentionQuantities) {
      norms.curves.push_back(mean_curve(model, q, std::string(probe_meaning(q)),
                                        own_attention_quantity(model.activation) == q ? CurveStyle::line_with_points
                                                                                      : CurveStyle::dashed_line));
    }
    add_plot(norms, "||A||_F of every activation evaluated on this model's scores (solid: its own activation).",
             with_plots, document, pending);
    PlotSpec gradients{fmt::format("probe-model{}-gradient", m + 1),
                       fmt::format("trained with {}: ||dA/dS||_F of each activation on its scores", model.activation),
                       x_label(model), "||dA/dS||_F (mean over layers and heads)", false, true, {}};
    for (ProbeQuantity q : kScoreGradientQuantities) {
      gradients.curves.push_back(mean_curve(model, q, std::string(probe_meaning(q)),
                                            own_gradient_quantity(model.activation) == q ? CurveStyle::line_with_points
                                                                                         : CurveStyle::dashed_line));
    }
    add_plot(gradients, "Jacobian norms in the scores of every activation on this model's scores (solid: its own).",
             with_plots, document, pending);

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
}

}  // namespace attncheck::reports
