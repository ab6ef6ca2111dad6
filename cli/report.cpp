// attncheck report RESULTS_DIR --out REPORT_DIR: the scaling report (and probe plots) as HTML and Markdown.

#include "subcommand.hpp"

#include "attncheck/reports/report.hpp"

#include <fmt/format.h>

#include <memory>

namespace {

struct ReportArguments {
  std::string input;
  std::string out;
  std::string gnuplot = "gnuplot";
  bool no_plots = false;
};

std::function<int()> setup(CLI::App& command) {
  auto arguments = std::make_shared<ReportArguments>();
  command.add_option("input", arguments->input,
                     "results folder written by `attncheck mc --out` (fits.json, points.jsonl) and/or holding "
                     "attncheck-probe.jsonl and/or attncheck-curves.jsonl (training curves); or a probe log or training "
                     "curves (.jsonl) on their own")
      ->required();
  command.add_option("--out", arguments->out, "report folder: index.html, report.md, plots/")->required();
  command.add_option("--gnuplot", arguments->gnuplot, "gnuplot program that draws the plots")
      ->capture_default_str();
  command.add_flag("--no-plots", arguments->no_plots,
                   "write the report without plots (no gnuplot needed); the report says so at the top");
  return [arguments] {
    attncheck::reports::ReportOptions options;
    options.input = arguments->input;
    options.out = arguments->out;
    options.gnuplot = arguments->gnuplot;
    options.plots = !arguments->no_plots;
    const auto summary = attncheck::reports::write_report(options);
    fmt::print("wrote {} and {} ({} plots)\n", summary.html.string(), summary.markdown.string(), summary.plots);
    if (summary.series > 0) {
      const std::size_t checked = summary.holds + summary.tight + summary.violated + summary.inconclusive;
      fmt::print("{} series: {} holds, {} tight, {} violated, {} inconclusive{}\n", summary.series, summary.holds,
                 summary.tight, summary.violated, summary.inconclusive,
                 checked < summary.series ? fmt::format(", {} not checked (no claimed exponent)", summary.series - checked)
                                          : "");
    }
    if (summary.probe_records > 0) fmt::print("{} probe records\n", summary.probe_records);
    if (summary.curve_points > 0) fmt::print("{} training-curve points\n", summary.curve_points);
    return attncheck::cli::kExitHolds;
  };
}

const bool registered = attncheck::cli::register_subcommand(
    "report", "write an HTML and Markdown report (plots by gnuplot) from a results folder or a probe log", setup);

}  // namespace
