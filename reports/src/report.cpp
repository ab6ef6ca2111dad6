#include "attncheck/reports/report.hpp"

#include "attncheck/records/atomic_file.hpp"
#include "attncheck/records/errors.hpp"
#include "attncheck/records/folder_lock.hpp"
#include "attncheck/reports/training_curves.hpp"
#include "attncheck/theory/common.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <system_error>

namespace attncheck::reports {

namespace fs = std::filesystem;
using theory::InputError;

namespace {

struct Inputs {
  std::optional<fs::path> results_folder;  // has fits.json
  std::optional<fs::path> probe_log;
  std::optional<fs::path> training_curves;
  std::optional<fs::path> vit_results;  // examples/vit_digits.py's
};

Inputs find_inputs(const fs::path& input) {
  std::error_code error;
  if (!fs::exists(input, error)) throw InputError(fmt::format("{} does not exist", input.string()));
  Inputs inputs;
  if (!fs::is_directory(input, error)) {
    if (input.extension() != ".jsonl") {
      throw InputError(fmt::format("{} is neither a results folder nor a probe log or training curves (*.jsonl)",
                                   input.string()));
    }
    if (input.filename() == kTrainingCurvesName) {
      inputs.training_curves = input;
    } else {
      inputs.probe_log = input;
    }
    return inputs;
  }
  if (fs::exists(input / "fits.json", error)) inputs.results_folder = input;
  if (fs::exists(input / kProbeLogName, error)) inputs.probe_log = input / kProbeLogName;
  if (fs::exists(input / kTrainingCurvesName, error)) inputs.training_curves = input / kTrainingCurvesName;
  if (fs::exists(input / kVitResultsName, error)) inputs.vit_results = input / kVitResultsName;
  if (!inputs.results_folder && !inputs.probe_log && !inputs.training_curves && !inputs.vit_results) {
    throw InputError(fmt::format("{} is missing, and so are {}, {} and {}: the folder holds neither the results of "
                                 "`attncheck mc --out`, nor the log of `attncheck probe --watch`, nor training "
                                 "curves, nor the results of examples/vit_digits.py",
                                 (input / "fits.json").string(), (input / kProbeLogName).string(),
                                 (input / kTrainingCurvesName).string(), (input / kVitResultsName).string()));
  }
  return inputs;
}

// plots/ belongs to the report: an SVG or PNG there that this run did not draw is left from an earlier report of other
// results, and would be mistaken for part of this one. Temporaries there are a killed run's (this one holds the
// folder's lock).
void remove_stale_plots(const fs::path& plot_folder, const std::vector<PlotSpec>& drawn) {
  std::error_code error;
  if (!fs::is_directory(plot_folder, error)) return;
  std::vector<fs::path> stale;
  for (const auto& entry : fs::directory_iterator(plot_folder, error)) {
    const std::string name = entry.path().filename().string();
    if (name.find(".tmp.") != std::string::npos) {
      stale.push_back(entry.path());
      continue;
    }
    if (entry.path().extension() != ".svg" && entry.path().extension() != ".png") continue;
    const std::string stem = entry.path().stem().string();
    const bool current = std::any_of(drawn.begin(), drawn.end(), [&](const PlotSpec& p) { return p.name == stem; });
    if (!current) stale.push_back(entry.path());
  }
  for (const fs::path& path : stale) fs::remove(path, error);
}

}  // namespace

ReportSummary write_report(const ReportOptions& options) {
  const Inputs inputs = find_inputs(options.input);
  // Read everything before writing anything, so that bad input leaves no half-made report behind.
  std::optional<records::ResultsFolder> results;
  if (inputs.results_folder) results = records::read_results_folder(*inputs.results_folder);
  std::optional<std::vector<ProbeRecord>> probes;
  if (inputs.probe_log) probes = read_probe_log(*inputs.probe_log);
  std::optional<TrainingCurves> curves;
  if (inputs.training_curves) curves = read_training_curves(*inputs.training_curves);
  std::optional<VitResults> vit;
  if (inputs.vit_results) vit = read_vit_results(*inputs.vit_results);

  Document document;
  document.title = fmt::format("attncheck report: {}", options.input.filename().empty()
                                                           ? options.input.parent_path().filename().string()
                                                           : options.input.filename().string());
  if (!options.plots) {
    document.blocks.push_back(Notice{"this report was written with --no-plots: it has no plots (gnuplot was not "
                                     "run); the tables hold every number."});
  }
  PendingFigures pending;
  ReportSummary summary;
  if (results) {
    add_scaling_section(*results, options.plots, document, pending);
    summary.series = results->series.size();
    for (const records::Series& s : results->series) {
      if (!s.verdict) continue;
      switch (*s.verdict) {
        case records::Verdict::holds: ++summary.holds; break;
        case records::Verdict::tight: ++summary.tight; break;
        case records::Verdict::violated: ++summary.violated; break;
        case records::Verdict::inconclusive: ++summary.inconclusive; break;
      }
    }
  }
  if (vit) {
    add_vit_section(*vit, inputs.vit_results->parent_path(), options.plots, document, pending, options.read_attention_map,
                    options.map_layer, options.map_head);
    summary.vit_runs = vit->runs.size();
  }
  if (probes) {
    add_probe_section(*probes, *inputs.probe_log, options.plots, document, pending);
    summary.probe_records = probes->size();
  }
  if (curves) {
    add_training_curves_section(*curves, *inputs.training_curves, options.plots, document, pending);
    summary.curve_points = curves->points.size();
  }

  std::error_code error;
  if (!fs::exists(options.out, error) || fs::is_directory(options.out, error)) fs::create_directories(options.out, error);
  if (error) {
    throw records::IoError(fmt::format("cannot create the report folder {}: {}", options.out.string(), error.message()));
  }
  if (!fs::is_directory(options.out, error)) {
    throw InputError(fmt::format("cannot create the report folder {}: a file of that name is in the way",
                                 options.out.string()));
  }
  // Two reports into one folder take turns, and what a killed one left half-written is removed.
  const records::FolderLock lock(options.out);
  records::remove_stale_temporaries(options.out / "report.md");
  records::remove_stale_temporaries(options.out / "index.html");
  const std::vector<std::string> svgs = render_plots(pending.plots, options.out / "plots", options.gnuplot);
  for (std::size_t i = 0; i < svgs.size(); ++i) {
    Figure& figure = std::get<Figure>(document.blocks[pending.block_of_plot[i]]);
    figure.file = "plots/" + pending.plots[i].name + ".svg";
    figure.png_file = "plots/" + pending.plots[i].name + ".png";
    figure.inline_svg = inline_svg(svgs[i], pending.plots[i].name + "-");
  }
  summary.plots = svgs.size();
  remove_stale_plots(options.out / "plots", pending.plots);
  summary.markdown = options.out / "report.md";
  summary.html = options.out / "index.html";
  records::write_file_atomically(summary.markdown, render_markdown(document));
  records::write_file_atomically(summary.html, render_html(document));
  return summary;
}

}  // namespace attncheck::reports
