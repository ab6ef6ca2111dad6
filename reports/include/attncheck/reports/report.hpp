#pragma once
// `attncheck report`: a results folder (and/or a probe log) in, REPORT_DIR/index.html and REPORT_DIR/report.md
// out, with the plots as REPORT_DIR/plots/*.svg (embedded inline in index.html) and the gnuplot script that
// drew them (REPORT_DIR/plots/plots.gp).

#include "attncheck/reports/document.hpp"
#include "attncheck/reports/plots.hpp"
#include "attncheck/reports/probe_log.hpp"
#include "attncheck/records/results_folder.hpp"
#include "attncheck/reports/vit_results.hpp"

#include <cstddef>
#include <filesystem>
#include <string>
#include <vector>

namespace attncheck::reports {

inline constexpr const char* kProbeLogName = "attncheck-probe.jsonl";
// In a results folder: the output of `attncheck bounds --json`, C1 and C2 checked exactly, shown beside the
// Monte Carlo claims.
inline constexpr const char* kBoundsName = "bounds.json";

struct ReportOptions {
  // a results folder (fits.json, attncheck-probe.jsonl, attncheck-curves.jsonl, vit-results.json), or a probe
  // log (.jsonl) or training curves (attncheck-curves.jsonl) on their own
  // or the output of `attncheck probe --json` (.json)
  std::filesystem::path input;
  // Further runs compared with `input` in one report: probe logs (or run folders holding one), or probe --json
  // outputs, all of one kind as `input`.
  std::vector<std::filesystem::path> compare_with;
  std::filesystem::path out;  // REPORT_DIR
  // Replace files in REPORT_DIR that no report wrote (report.md, index.html, plots/*) instead of refusing.
  bool force = false;
  std::string gnuplot = "gnuplot";
  // Without plots no gnuplot is needed; the report says so at the top.
  bool plots = true;
  // Which attention map the ViT section draws from each attention-ACTIVATION.safetensors.
  long long map_layer = 0, map_head = 0;
  // Reads those maps; without it the ViT section lists the map files and draws none.
  AttentionMapReader read_attention_map = safetensors_attention_maps();
};

struct ReportSummary {
  std::filesystem::path html, markdown;
  std::size_t series = 0;
  std::size_t holds = 0, tight = 0, violated = 0, inconclusive = 0, consistent = 0;
  std::size_t probe_records = 0;
  std::size_t curve_points = 0;  // training-curve points (attncheck-curves.jsonl)
  std::size_t vit_runs = 0;
  std::size_t probe_outputs = 0;  // `attncheck probe --json` documents drawn as layer x head maps
  std::size_t plots = 0;
  std::vector<std::string> warnings;  // what the readers skipped, also noted in the report
};

// Reads the input, renders the plots and writes both documents (each file atomically). Throws
// theory::InputError for a missing or malformed input (naming the file and line), when gnuplot is needed but
// cannot be run, and, before writing anything, when a file it would replace was not written by a report (unless
// `force`) or plots/ is a symbolic link.
ReportSummary write_report(const ReportOptions& options);

// The plots a report's sections ask for, drawn together once every section has added its blocks; each Figure
// block gets its files and inline SVG then.
struct PendingFigures {
  std::vector<PlotSpec> plots;
  std::vector<std::size_t> block_of_plot;  // index into document.blocks of each plot's Figure

  // Queues `plot` and adds its Figure, with `caption`, to `blocks`.
  void add(PlotSpec plot, std::string caption, std::vector<Block>& blocks);
  // The same for a plot on log axes, without its curves that have no positive value; with none left, a notice
  // that there is nothing to plot takes the figure's place. Heat maps are added whole.
  void add_drawable(PlotSpec plot, std::string caption, std::vector<Block>& blocks);
};

// The scaling part of a report, for one results folder: adds its blocks to `document` and the plots it needs
// to `pending`.
void add_scaling_section(const records::ResultsFolder& results, bool with_plots, Document& document,
                         PendingFigures& pending);

// The probe part (the papers' Figs. 2-3): per trained activation, the mean over layers and heads of ||A||_F
// and of the gradient norms against the training step, with the band from their min to their max, per layer the
// largest head's ratios to the softmax bounds, and the layer x head maps of the first and the last checkpoint.
void add_probe_section(const std::vector<ProbeRecord>& records, const std::filesystem::path& log, bool with_plots,
                       Document& document, PendingFigures& pending);

// One run's probe log in a comparison of runs.
struct ProbeLog {
  std::filesystem::path path;
  std::string run;  // how the report names the run; empty in a report of one log
  std::vector<ProbeRecord> records;
};
// Several runs side by side: each activation in one colour in every plot, each run's models named by the run.
void add_probe_section(const std::vector<ProbeLog>& logs, bool with_plots, Document& document, PendingFigures& pending);

// The ViT section (the papers' Figs. 1-3, 6-7 and Table 1) from examples/vit_digits.py's results in `folder`,
// with the attention maps it finds there (attention-ACTIVATION.safetensors).
void add_vit_section(const VitResults& results, const std::filesystem::path& folder, bool with_plots,
                     Document& document, PendingFigures& pending, const AttentionMapReader& read_attention_map,
                     long long map_layer = 0, long long map_head = 0);

}  // namespace attncheck::reports
