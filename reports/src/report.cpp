#include "attncheck/reports/report.hpp"

#include "attncheck/records/atomic_file.hpp"
#include "attncheck/records/errors.hpp"
#include "attncheck/records/folder_lock.hpp"
#include "attncheck/reports/head_maps.hpp"
#include "attncheck/reports/training_curves.hpp"
#include "attncheck/theory/common.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <string_view>
#include <system_error>

namespace attncheck::reports {

namespace fs = std::filesystem;
using theory::InputError;

namespace {

struct Inputs {
  std::optional<fs::path> results_folder;  // has fits.json
  std::optional<fs::path> probe_log;
  std::optional<fs::path> training_curves;
  std::optional<fs::path> vit_results;   // examples/vit_digits.py's
  std::optional<fs::path> probe_output;  // `attncheck probe --json` output

  // What a comparison of runs can hold: probe logs (alone or in run folders), or probe --json outputs.
  std::string kind() const {
    if (probe_output) return "a probe --json or --csv output";
    if (results_folder) return "results of `attncheck mc`";
    if (vit_results) return "results of examples/vit_digits.py";
    if (training_curves && !probe_log) return "training curves";
    return "a probe log";
  }
  // Inputs of one kind can be compared; none: this input cannot be part of a comparison.
  enum class Comparison { probe_outputs, probe_logs, scaling };
  std::optional<Comparison> comparison() const {
    if (probe_output) return Comparison::probe_outputs;
    if (vit_results) return std::nullopt;
    if (results_folder) return Comparison::scaling;
    if (probe_log) return Comparison::probe_logs;
    return std::nullopt;
  }
};

// Whether a folder holds a run of its own: mc results, a probe log, training curves or ViT results.
bool holds_a_run(const fs::path& folder) {
  std::error_code error;
  return fs::exists(folder / "fits.json", error) || fs::exists(folder / kProbeLogName, error) ||
         fs::exists(folder / kTrainingCurvesName, error) || fs::exists(folder / kVitResultsName, error);
}

// A folder that holds no run itself but runs in its subfolders (runs/a, runs/b, ...) stands for those runs, in the
// order of their names; anything else stands for itself.
std::vector<fs::path> runs_of(const fs::path& input) {
  std::error_code error;
  if (!fs::is_directory(input, error) || holds_a_run(input)) return {input};
  std::vector<fs::path> runs;
  for (fs::directory_iterator it(input, error), end; !error && it != end; it.increment(error)) {
    if (it->is_directory(error) && holds_a_run(it->path())) runs.push_back(it->path());
  }
  std::sort(runs.begin(), runs.end());
  return runs.empty() ? std::vector<fs::path>{input} : runs;
}

Inputs find_inputs(const fs::path& input) {
  std::error_code error;
  if (!fs::exists(input, error)) throw InputError(fmt::format("{} does not exist", input.string()));
  Inputs inputs;
  if (!fs::is_directory(input, error)) {
    if ((input.extension() == ".json" && input.filename() != kVitResultsName) || input.extension() == ".csv") {
      inputs.probe_output = input;
      return inputs;
    }
    if (input.extension() != ".jsonl") {
      throw InputError(
          fmt::format("{} is neither a results folder nor a probe log or training curves (*.jsonl) nor "
                      "the output of `attncheck probe --json` (*.json) or `--csv` (*.csv)",
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
    throw InputError(
        fmt::format("{} is missing, and so are {}, {} and {}: the folder holds neither the results of "
                    "`attncheck mc --out`, nor the log of `attncheck probe --watch`, nor training "
                    "curves, nor the results of examples/vit_digits.py, and none of its subfolders does",
                    (input / "fits.json").string(), (input / kProbeLogName).string(),
                    (input / kTrainingCurvesName).string(), (input / kVitResultsName).string()));
  }
  return inputs;
}

// The files of plots/ that reports wrote are listed in plots/.attncheck-plots, so that a later report into the
// same folder removes those it no longer draws (they would be mistaken for part of it), and nothing else: plots/
// may hold a user's own figures and notes. report.md and index.html are listed in .attncheck-report for the same
// reason: a report replaces only what a report wrote, never a user's own file of the same name.
constexpr const char* kPlotManifest = ".attncheck-plots";
constexpr const char* kReportManifest = ".attncheck-report";

bool is_plot_file_name(const std::string& name) {
  const auto ends_with = [&](std::string_view end) { return name.size() > end.size() && name.ends_with(end); };
  return name == "plots.gp" ||
         (name.find('/') == std::string::npos && name.front() != '.' && (ends_with(".svg") || ends_with(".png")));
}

bool is_document_file_name(const std::string& name) { return name == "report.md" || name == "index.html"; }

// A manifest is read only when it is a regular file of its own: one that is a symbolic link was not written by a
// report (they write files, never links), and names read through it could make a report remove a user's files.
std::set<std::string> files_written(const fs::path& manifest, bool (*is_valid_name)(const std::string&)) {
  std::set<std::string> names;
  std::error_code error;
  if (!fs::is_regular_file(fs::symlink_status(manifest, error)) ||
      fs::file_size(manifest, error) > (std::uintmax_t{1} << 20)) {
    return names;
  }
  std::string text;
  try {
    text = records::read_text_file(manifest);
  } catch (const InputError&) {
    return names;
  }
  for (std::size_t begin = 0; begin < text.size();) {
    const std::size_t end = std::min(text.find('\n', begin), text.size());
    const std::string name = text.substr(begin, end - begin);
    if (!name.empty() && is_valid_name(name)) names.insert(name);
    begin = end + 1;
  }
  return names;
}

void record_files_written(const fs::path& manifest, const std::set<std::string>& names) {
  std::error_code error;
  if (names.empty()) {
    fs::remove(manifest, error);
    return;
  }
  fs::create_directories(manifest.parent_path(), error);
  if (error)
    throw records::IoError(fmt::format("cannot create {}: {}", manifest.parent_path().string(), error.message()));
  std::string text;
  for (const std::string& name : names) text += name + "\n";
  records::write_file_atomically(manifest, text);
}

// Reports written before .attncheck-report was kept are known by how every report begins: its renderer's output up
// to the title's fixed part, "attncheck report: " (one input) or "attncheck report comparing " (several), so that a
// report into the folder of an earlier one replaces it as before.
bool begins_as_a_report(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::string head(4096, '\0');
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  head.resize(static_cast<std::size_t>(in.gcount()));
  for (const std::string stem : {"attncheck report: ", "attncheck report comparing "}) {
    Document empty;
    empty.title = stem;
    const std::string rendered = path.filename() == "report.md" ? render_markdown(empty) : render_html(empty);
    if (head.starts_with(rendered.substr(0, rendered.find(stem) + stem.size()))) return true;
  }
  return false;
}

// Refuses, before anything is written, to replace `path` unless a report wrote it (`written`) or the user said
// --force. A folder or a symbolic link in the way of plots/ is refused even then: the report writes into no folder
// it did not make, and never through a link.
void check_replaceable(const fs::path& path, bool written, bool force) {
  std::error_code error;
  const fs::file_status status = fs::symlink_status(path, error);
  if (!fs::exists(status)) return;
  if (fs::is_directory(status)) {
    throw InputError(
        fmt::format("cannot write {}: a folder of that name is in the way; write the report into "
                    "another folder (--out)",
                    path.string()));
  }
  if ((written && fs::is_regular_file(status)) || force) return;
  throw InputError(fmt::format(
      "{} exists and was not written by `attncheck report`{}: it is left as it is; write the report into another "
      "folder (--out), or replace it with --force",
      path.string(), fs::is_symlink(status) ? " (it is a symbolic link)" : ""));
}

void check_plot_folder(const fs::path& folder) {
  std::error_code error;
  const fs::file_status status = fs::symlink_status(folder, error);
  if (fs::is_symlink(status)) {
    throw InputError(
        fmt::format("{} is a symbolic link: a report writes its plots only into a plots folder of its "
                    "own, never through a link; remove the link or write the report into another "
                    "folder (--out)",
                    folder.string()));
  }
  if (fs::exists(status) && !fs::is_directory(status)) {
    throw InputError(
        fmt::format("cannot write the plots into {}: a file of that name is in the way; write the "
                    "report into another folder (--out)",
                    folder.string()));
  }
}

// Removes what earlier reports drew and this one did not, and what killed runs left half-written (this one holds
// the folder's lock): only names of the manifest, and only their own temporaries.
void remove_stale_plots(const fs::path& folder, const std::set<std::string>& before, const std::set<std::string>& now) {
  std::error_code error;
  for (const std::string& name : before) {
    if (!now.contains(name)) fs::remove(folder / name, error);
  }
  if (!fs::is_directory(folder, error)) return;
  std::set<std::string> written = before;
  written.insert(now.begin(), now.end());
  written.insert({"plots.gp", "gnuplot.log", kPlotManifest});
  for (const std::string& name : written) records::remove_stale_temporaries(folder / name);
}

void count_verdicts(const records::ResultsFolder& results, ReportSummary& summary) {
  summary.series += results.series.size();
  for (const records::Series& s : results.series) {
    if (!s.verdict) continue;
    switch (*s.verdict) {
      case records::Verdict::holds: ++summary.holds; break;
      case records::Verdict::tight: ++summary.tight; break;
      case records::Verdict::violated: ++summary.violated; break;
      case records::Verdict::inconclusive: ++summary.inconclusive; break;
      case records::Verdict::consistent: ++summary.consistent; break;
    }
  }
}

Document start_document(std::string title, bool with_plots) {
  Document document;
  document.title = std::move(title);
  if (!with_plots) {
    document.blocks.push_back(
        Notice{"this report was written with --no-plots: it has no plots (gnuplot was not "
               "run); the tables hold every number."});
  }
  return document;
}

// What the readers skipped (a probe log's last line cut short) is said at the top of the report and on the
// command line.
void add_warnings(std::vector<std::string> warnings, Document& document, ReportSummary& summary) {
  for (const std::string& text : warnings) document.blocks.push_back(Notice{text});
  summary.warnings.insert(summary.warnings.end(), warnings.begin(), warnings.end());
}

// The name of a run in a comparison: its folder's name, or the file's name when it is not a run folder's log.
std::string run_name(const fs::path& input) {
  const fs::path trimmed = input.filename().empty() ? input.parent_path() : input;
  if (trimmed.filename() == kProbeLogName && !trimmed.parent_path().filename().empty()) {
    return trimmed.parent_path().filename().string();
  }
  return trimmed.filename().string();
}

// A report of several runs: all probe logs (their runs side by side in each plot) or all probe --json outputs
// (a heat map each). Anything else has no common axis to compare on and is refused, naming the odd one out.
ReportSummary write_comparison(const ReportOptions& options, const std::vector<fs::path>& paths,
                               const std::vector<Inputs>& inputs);

ReportSummary write_document(const ReportOptions& options, Document& document, PendingFigures& pending,
                             ReportSummary summary);

}  // namespace

ReportSummary write_report(const ReportOptions& options) {
  std::vector<fs::path> paths = runs_of(options.input);
  for (const fs::path& given : options.compare_with) {
    for (fs::path& run : runs_of(given)) paths.push_back(std::move(run));
  }
  std::vector<Inputs> all;
  for (const fs::path& path : paths) all.push_back(find_inputs(path));
  if (paths.size() > 1) return write_comparison(options, paths, all);
  const Inputs& inputs = all.front();
  // Read everything before writing anything, so that bad input leaves no half-made report behind.
  std::optional<ProbeOutput> probe_output;
  if (inputs.probe_output) probe_output = read_probe_output(*inputs.probe_output);
  std::optional<records::ResultsFolder> results;
  if (inputs.results_folder) results = records::read_results_folder(*inputs.results_folder);
  std::vector<std::string> warnings;
  const auto warn = [&warnings](const std::string& text) { warnings.push_back(text); };
  std::optional<std::vector<ProbeRecord>> probes;
  if (inputs.probe_log) probes = read_probe_log(*inputs.probe_log, warn);
  std::optional<TrainingCurves> curves;
  if (inputs.training_curves) curves = read_training_curves(*inputs.training_curves);
  std::optional<VitResults> vit;
  if (inputs.vit_results) vit = read_vit_results(*inputs.vit_results);

  Document document =
      start_document(fmt::format("attncheck report: {}", options.input.filename().empty()
                                                             ? options.input.parent_path().filename().string()
                                                             : options.input.filename().string()),
                     options.plots);
  PendingFigures pending;
  ReportSummary summary;
  add_warnings(std::move(warnings), document, summary);
  if (results) {
    add_scaling_section(*results, options.plots, document, pending);
    count_verdicts(*results, summary);
  }
  if (vit) {
    add_vit_section(*vit, inputs.vit_results->parent_path(), options.plots, document, pending,
                    options.read_attention_map, options.map_layer, options.map_head);
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
  if (probe_output) {
    add_head_map_section({*probe_output}, options.plots, document, pending);
    summary.probe_outputs = 1;
  }
  return write_document(options, document, pending, summary);
}

namespace {

ReportSummary write_comparison(const ReportOptions& options, const std::vector<fs::path>& paths,
                               const std::vector<Inputs>& inputs) {
  for (std::size_t i = 0; i < paths.size(); ++i) {
    if (!inputs[i].comparison() || inputs[i].comparison() != inputs[0].comparison()) {
      throw InputError(fmt::format(
          "cannot compare {} ({}) with {} ({}): a report compares several probe logs (or run folders holding "
          "{}), several `attncheck probe --json` outputs, or several results folders of `attncheck mc`; report "
          "other results one at a time",
          paths[i].string(), inputs[i].kind(), paths[0].string(), inputs[0].kind(), kProbeLogName));
    }
  }
  Document document = start_document(fmt::format("attncheck report comparing {} runs", paths.size()), options.plots);
  PendingFigures pending;
  ReportSummary summary;
  if (inputs[0].comparison() == Inputs::Comparison::scaling) {
    std::vector<records::ResultsFolder> folders;
    for (const Inputs& input : inputs) folders.push_back(records::read_results_folder(*input.results_folder));
    for (std::size_t k = 0; k < folders.size(); ++k) {
      if (inputs[k].probe_log || inputs[k].training_curves) {
        document.blocks.push_back(
            Notice{fmt::format("only the scaling results of {} are part of this comparison; a "
                               "report of that folder alone draws the rest.",
                               paths[k].string())});
      }
    }
    for (std::size_t k = 0; k < folders.size(); ++k) {
      document.blocks.push_back(
          Heading{1, fmt::format("Run {}: {}", k + 1, paths[k].string()), fmt::format("run-{}", k + 1)});
      const std::size_t first_block = document.blocks.size(), first_plot = pending.plots.size();
      add_scaling_section(folders[k], options.plots, document, pending);
      count_verdicts(folders[k], summary);
      // Each run's plots and link targets get the run's prefix, so that two runs' series 1 stay apart.
      const std::string prefix = fmt::format("run{}-", k + 1);
      for (std::size_t p = first_plot; p < pending.plots.size(); ++p)
        pending.plots[p].name = prefix + pending.plots[p].name;
      for (std::size_t b = first_block; b < document.blocks.size(); ++b) {
        if (auto* heading = std::get_if<Heading>(&document.blocks[b]); heading && !heading->anchor.empty()) {
          heading->anchor = prefix + heading->anchor;
        }
        if (auto* table = std::get_if<Table>(&document.blocks[b])) {
          for (std::string& anchor : table->row_anchors) {
            if (!anchor.empty()) anchor = prefix + anchor;
          }
        }
      }
    }
  } else if (inputs[0].probe_output) {
    std::vector<ProbeOutput> outputs;
    for (const Inputs& input : inputs) outputs.push_back(read_probe_output(*input.probe_output));
    add_head_map_section(outputs, options.plots, document, pending);
    summary.probe_outputs = outputs.size();
  } else {
    std::vector<ProbeLog> logs;
    std::vector<std::string> warnings;
    const auto warn = [&warnings](const std::string& text) { warnings.push_back(text); };
    for (std::size_t i = 0; i < paths.size(); ++i) {
      if (inputs[i].training_curves) {
        document.blocks.push_back(
            Notice{fmt::format("the training curves {} are not part of a comparison of probe "
                               "logs; a report of that folder alone draws them.",
                               inputs[i].training_curves->string())});
      }
      logs.push_back(ProbeLog{*inputs[i].probe_log, run_name(paths[i]), read_probe_log(*inputs[i].probe_log, warn)});
      summary.probe_records += logs.back().records.size();
    }
    for (std::size_t i = 0; i < logs.size(); ++i) {
      for (std::size_t j = 0; j < i; ++j) {
        if (logs[i].run == logs[j].run) {
          throw InputError(fmt::format("{} and {} are both named {}: the runs compared need different names",
                                       paths[j].string(), paths[i].string(), logs[i].run));
        }
      }
    }
    add_warnings(std::move(warnings), document, summary);
    add_probe_section(logs, options.plots, document, pending);
  }
  return write_document(options, document, pending, summary);
}

ReportSummary write_document(const ReportOptions& options, Document& document, PendingFigures& pending,
                             ReportSummary summary) {
  std::error_code error;
  if (!fs::exists(options.out, error) || fs::is_directory(options.out, error))
    fs::create_directories(options.out, error);
  if (error) {
    throw records::IoError(
        fmt::format("cannot create the report folder {}: {}", options.out.string(), error.message()));
  }
  if (!fs::is_directory(options.out, error)) {
    throw InputError(
        fmt::format("cannot create the report folder {}: a file of that name is in the way", options.out.string()));
  }
  // Two reports into one folder take turns, and what a killed one left half-written is removed.
  const records::FolderLock lock(options.out);
  const fs::path plot_folder = options.out / "plots";
  const std::set<std::string> documents_before = files_written(options.out / kReportManifest, is_document_file_name);
  // Before its manifest is read: names read through a link could make even a report without plots remove a user's
  // files.
  check_plot_folder(plot_folder);
  const std::set<std::string> before = files_written(plot_folder / kPlotManifest, is_plot_file_name);
  std::set<std::string> now;
  if (!pending.plots.empty()) now.insert("plots.gp");
  for (const PlotSpec& plot : pending.plots) now.insert({plot.name + ".svg", plot.name + ".png"});
  // Every file this report would replace is checked before the first is written, so that a refusal leaves the
  // folder as it was.
  for (const char* name : {"report.md", "index.html"}) {
    const fs::path path = options.out / name;
    const bool written =
        documents_before.contains(name) ||
        (documents_before.empty() && fs::is_regular_file(fs::symlink_status(path, error)) && begins_as_a_report(path));
    check_replaceable(path, written, options.force);
  }
  for (const std::string& name : now) check_replaceable(plot_folder / name, before.contains(name), options.force);
  records::remove_stale_temporaries(options.out / "report.md");
  records::remove_stale_temporaries(options.out / "index.html");
  // Listed before they are drawn, so that a run killed midway leaves its files for the next one to remove.
  std::set<std::string> either = before;
  either.insert(now.begin(), now.end());
  if (either != before) record_files_written(plot_folder / kPlotManifest, either);
  const std::vector<std::string> svgs = render_plots(pending.plots, plot_folder, options.gnuplot);
  for (std::size_t i = 0; i < svgs.size(); ++i) {
    Figure& figure = std::get<Figure>(document.blocks[pending.block_of_plot[i]]);
    figure.file = "plots/" + pending.plots[i].name + ".svg";
    figure.png_file = "plots/" + pending.plots[i].name + ".png";
    figure.inline_svg = inline_svg(svgs[i], pending.plots[i].name + "-");
  }
  summary.plots = svgs.size();
  remove_stale_plots(plot_folder, before, now);
  if (now != either) record_files_written(plot_folder / kPlotManifest, now);
  if (documents_before.size() != 2) record_files_written(options.out / kReportManifest, {"report.md", "index.html"});
  summary.markdown = options.out / "report.md";
  summary.html = options.out / "index.html";
  records::write_file_atomically(summary.markdown, render_markdown(document));
  records::write_file_atomically(summary.html, render_html(document));
  return summary;
}

}  // namespace

}  // namespace attncheck::reports
