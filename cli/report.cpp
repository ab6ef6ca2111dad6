// attncheck report INPUT [INPUT...] --out REPORT_DIR: the scaling report (and probe plots) as HTML and Markdown;
// several probe logs or probe --json outputs are compared in one report.

#include "number_options.hpp"
#include "subcommand.hpp"

#include "attncheck/reports/report.hpp"

#include <fmt/format.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace {

struct ReportArguments {
  std::vector<std::string> inputs;
  std::string out;
  std::string gnuplot = "gnuplot";
  bool no_plots = false;
  bool force = false;
  long long map_layer = 0, map_head = 0;
};

std::function<int()> setup(CLI::App& command) {
  auto arguments = std::make_shared<ReportArguments>();
  command
      .add_option(
          "input", arguments->inputs,
          "results folder written by `attncheck mc --out` (fits.json, points.jsonl) and/or holding "
          "attncheck-probe.jsonl, attncheck-curves.jsonl (training curves) and/or vit-results.json "
          "(examples/vit_digits.py); or a probe log or training curves (.jsonl) on their own; or the "
          "output of `attncheck probe --json` (.json) or `--csv` (.csv): layer x head maps. Several runs of one kind "
          "are compared in one report: probe logs (or run folders holding one), probe outputs, or mc "
          "results folders; a folder that holds no run itself but runs in its subfolders stands for those "
          "runs, in the order of their names")
      ->required()
      ->type_name("INPUT");
  command.add_option("--out", arguments->out, "report folder: index.html, report.md, plots/")->required();
  command.add_flag("--force", arguments->force,
                   "replace files of REPORT_DIR that no report wrote (report.md, index.html, plots/*); without it "
                   "such a file is left as it is and the report refused");
  command.add_option("--gnuplot", arguments->gnuplot, "gnuplot program that draws the plots")->capture_default_str();
  command.add_flag("--no-plots", arguments->no_plots,
                   "write the report without plots (no gnuplot needed); the report says so at the top");
  command
      .add_option("--map-layer", arguments->map_layer,
                  "layer of the attention maps drawn from a ViT results folder's attention-*.safetensors")
      ->capture_default_str()
      ->check(attncheck::cli::integer_in(0, INT32_MAX));
  command.add_option("--map-head", arguments->map_head, "head of those attention maps")
      ->capture_default_str()
      ->check(attncheck::cli::integer_in(0, INT32_MAX));
  return [arguments] {
    attncheck::reports::ReportOptions options;
    options.input = arguments->inputs.front();
    options.compare_with.assign(arguments->inputs.begin() + 1, arguments->inputs.end());
    options.out = arguments->out;
    options.gnuplot = arguments->gnuplot;
    options.plots = !arguments->no_plots;
    options.force = arguments->force;
    options.map_layer = arguments->map_layer;
    options.map_head = arguments->map_head;
    const auto summary = attncheck::reports::write_report(options);
    for (const std::string& warning : summary.warnings) fmt::print(stderr, "attncheck report: warning: {}\n", warning);
    fmt::print("wrote {} and {} ({} plots)\n", summary.html.string(), summary.markdown.string(), summary.plots);
    if (summary.series > 0) {
      const std::size_t checked =
          summary.holds + summary.tight + summary.violated + summary.inconclusive + summary.consistent;
      fmt::print("{} series: {} holds, {} tight, {} violated, {} consistent (not a proof), {} inconclusive{}\n",
                 summary.series, summary.holds, summary.tight, summary.violated, summary.consistent,
                 summary.inconclusive,
                 checked < summary.series
                     ? fmt::format(", {} not checked (no claimed exponent)", summary.series - checked)
                     : "");
    }
    if (summary.probe_records > 0) fmt::print("{} probe records\n", summary.probe_records);
    if (summary.curve_points > 0) fmt::print("{} training-curve points\n", summary.curve_points);
    if (summary.vit_runs > 0) fmt::print("{} ViT training runs\n", summary.vit_runs);
    if (summary.probe_outputs > 0) fmt::print("{} probe outputs drawn as layer x head maps\n", summary.probe_outputs);
    return attncheck::cli::kExitHolds;
  };
}

const bool registered = attncheck::cli::register_subcommand(
    "report",
    "write an HTML and Markdown report (plots by gnuplot) from a results folder, a probe log or probe "
    "--json output, or compare several runs",
    setup);

}  // namespace
