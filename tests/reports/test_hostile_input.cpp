// Strings read from results folders and probe logs reach gnuplot only as quoted data, and report.md and
// index.html only as text: an attacker's string executes nothing and makes no markup.

#include "attncheck/reports/plots.hpp"
#include "attncheck/reports/probe_log.hpp"
#include "attncheck/reports/report.hpp"
#include "attncheck/theory/common.hpp"

#include "records/fixtures.hpp"

#include <catch2/catch.hpp>

#include <sstream>

using namespace attncheck::reports;
using namespace attncheck::records;
using namespace attncheck::records::testing;
using attncheck::theory::InputError;
using Catch::Matchers::Contains;

namespace {

// A payload that, were it script text, would make gnuplot run a shell command creating `marker`.
std::string gnuplot_payload(const fs::path& marker) {
  return "x\nsystem('touch " + marker.string() + "')\r\nset output '" + marker.string() + "'\n# ";
}

// Markup that must come out as text.
const std::string kMarkup =
    "<script>alert(1)</script> [click](javascript:alert(2)) ![img](http://x/y.png) `code` *em* __b__ \n# heading\n| a "
    "|";

ReportOptions options_for(const TempDir& dir, const fs::path& input, bool plots) {
  ReportOptions options;
  options.input = input;
  options.out = dir.path() / "report";
  options.plots = plots;
  return options;
}

}  // namespace

TEST_CASE("titles and labels reach gnuplot as quoted one-line strings, never as commands", "[plots][hostile]") {
  TempDir dir;
  const fs::path marker = dir.path() / "executed";
  PlotSpec plot;
  plot.name = "hostile";
  plot.title = gnuplot_payload(marker);
  plot.x_label = gnuplot_payload(marker);
  plot.y_label = gnuplot_payload(marker);
  plot.curves.push_back(Curve{gnuplot_payload(marker), CurveStyle::line, {1, 2}, {1, 4}, {}, {}});
  const std::string script = gnuplot_script({plot}, ".tmp");
  std::istringstream lines(script);
  std::string line;
  while (std::getline(lines, line)) {
    INFO(line);
    CHECK(line.rfind("system", 0) == std::string::npos);
    CHECK(line.find('\r') == std::string::npos);
  }
  // And gnuplot itself agrees: it draws the plot and runs nothing.
  const auto svgs = render_plots({plot}, dir.path() / "plots", "gnuplot");
  REQUIRE(svgs.size() == 1);
  CHECK_FALSE(fs::exists(marker));
  CHECK_THAT(svgs[0], Contains("system(&apos;touch") || Contains("system('touch"));
}

TEST_CASE("a figure of panels keeps every text quoted and literal: titles, notes, labels and legends",
          "[plots][hostile]") {
  TempDir dir;
  const fs::path marker = dir.path() / "executed";
  // Enhanced-text markup besides the command payload: the tick labels use gnuplot's enhanced mode, so a text
  // from the input that were not written noenhanced would be typeset (and its braces lost) instead of shown.
  const std::string markup = "E^{up}_{down} @{/Symbol a}";
  PlotSpec panel;
  panel.title = gnuplot_payload(marker) + markup;
  panel.x_label = gnuplot_payload(marker);
  panel.y_label = markup;
  panel.curves.push_back(
      Curve{gnuplot_payload(marker) + markup, CurveStyle::band, {1, 2, 4}, {1, 4, 16}, {0.5, 3, 15}, {2, 5, 17}});
  panel.curves.push_back(Curve{markup, CurveStyle::line_with_points, {1, 2, 4}, {1, 4, 16}, {}, {}});
  PlotSpec figure;
  figure.name = "figure";
  figure.title = gnuplot_payload(marker);
  figure.notes = {gnuplot_payload(marker), markup};
  figure.panels = {panel, panel};
  figure.columns = 2;
  const std::string script = gnuplot_script({figure}, ".tmp");
  std::istringstream lines(script);
  std::string line;
  while (std::getline(lines, line)) {
    INFO(line);
    CHECK(line.rfind("system", 0) == std::string::npos);
    CHECK(line.find('\r') == std::string::npos);
    // Every line that carries a text from the input writes it noenhanced (comments aside: one line, inert).
    if (line.rfind("#", 0) == 0) continue;
    if (line.find("touch") != std::string::npos || line.find("/Symbol") != std::string::npos) {
      CHECK_THAT(line, Contains("noenhanced"));
    }
  }
  const auto svgs = render_plots({figure}, dir.path() / "plots", "gnuplot");
  REQUIRE(svgs.size() == 1);
  CHECK_FALSE(fs::exists(marker));
  CHECK(fs::file_size(dir.path() / "plots" / "figure.png") > 0);
  CHECK_THAT(svgs[0], Contains("E^{up}_{down} @{/Symbol a}"));
}

TEST_CASE("a scale, phi, estimand or backend the tool never writes is refused naming file and line",
          "[results][hostile]") {
  TempDir dir;
  const fs::path marker = dir.path() / "executed";
  const fs::path results = dir.path() / "results";
  FixtureSeries series;
  series.scale = "none\nsystem('touch " + marker.string() + "')";
  write_results_folder(results, {series});
  CHECK_THROWS_WITH(write_report(options_for(dir, results, true)),
                    Contains((results / "fits.json").string() + " line ") && Contains("\"scale\" must be"));
  CHECK_FALSE(fs::exists(marker));
  CHECK_FALSE(fs::exists(dir.path() / "report"));

  for (const auto& [field, value] : std::vector<std::pair<std::string, std::string>>{
           {"phi", "poly\n"}, {"estimand", "value "}, {"claim", "C10"}, {"stopped_by", "never"}, {"backend", "gpu"}}) {
    INFO(field);
    write_results_folder(results, {FixtureSeries{}});
    std::string points;
    for (json point : point_jsons(FixtureSeries{})) {
      point[field] = value;
      points += point.dump() + "\n";
    }
    write_text(results / "points.jsonl", points);
    CHECK_THROWS_WITH(write_report(options_for(dir, results, false)),
                      Contains((results / "points.jsonl").string() + " line 1") &&
                          Contains("\"" + field + "\" must be"));
  }
  for (const std::string scale : {"1/k:8", "N^-0.5", "1/sqrt(N)"}) {
    FixtureSeries fine;
    fine.scale = scale;
    write_results_folder(results, {fine});
    CHECK_NOTHROW(read_results_folder(results));
  }
}

TEST_CASE("a probe log's activation must be one the watcher writes", "[probes][hostile]") {
  const std::string line = json{{"checkpoint", "a"},
                                {"step", 1},
                                {"layer", 0},
                                {"head", 0},
                                {"N", 4},
                                {"softmax_fro", 1.0},
                                {"grad_fro", 0.5},
                                {"dWq_fro", 1.0},
                                {"dWk_fro", 1.0},
                                {"activation", "softmax\nsystem('id')"}}
                               .dump();
  CHECK_THROWS_WITH(parse_probe_log("\n" + line + "\n", "log.jsonl"),
                    Contains("log.jsonl line 2") && Contains("\"activation\" must be one of"));
}

TEST_CASE("free text from the input is escaped in report.md and index.html", "[report][hostile]") {
  TempDir dir;
  const fs::path results = dir.path() / "results";
  FixtureSeries series;
  series.formula = kMarkup;
  write_results_folder(results, {series});
  json fits = json::parse(read_text(results / "fits.json"));
  fits["provenance"]["command"] = kMarkup + " ``` `` ` ";
  fits["provenance"]["machine"] = kMarkup;
  write_text(results / "fits.json", fits.dump());
  // A probe log beside the results, with the same markup as checkpoint names.
  std::string log;
  for (int step : {1, 2}) {
    log += json{{"checkpoint", kMarkup + std::to_string(step)},
                {"step", step},
                {"layer", 0},
                {"head", 0},
                {"N", 4},
                {"softmax_fro", 1.0},
                {"grad_fro", 0.5},
                {"dWq_fro", 1.0},
                {"dWk_fro", 1.0},
                {"activation", "softmax"}}
               .dump() +
           "\n";
  }
  write_text(results / kProbeLogName, log);
  write_report(options_for(dir, results, false));
  const std::string markdown = read_text(dir.path() / "report" / "report.md");
  const std::string html = read_text(dir.path() / "report" / "index.html");

  CHECK_THAT(html, !Contains("<script>") && !Contains("href=\"javascript") && !Contains("<img"));
  CHECK_THAT(html, Contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
  // In Markdown text the markup characters are escaped (a table cell here), and no line of the input starts a
  // block of its own.
  CHECK_THAT(markdown,
             Contains("\\<script\\>alert(1)\\</script\\> [click\\](javascript:alert(2)) \\![img\\](http://x/y.png) "
                      "\\`code\\` \\*em\\* \\_\\_b\\_\\_  # heading \\| a \\|"));
  std::istringstream lines(markdown);
  std::string line;
  while (std::getline(lines, line)) {
    INFO(line);
    CHECK(line.rfind("# heading", 0) == std::string::npos);
    CHECK(line.rfind("| a |", 0) == std::string::npos);
    // Raw markup is left only inside the code spans of "- name: `value`" lines, where Markdown shows it verbatim.
    const auto link = line.find("](javascript");
    if (line.find("<script>") != std::string::npos || (link != std::string::npos && line[link - 1] != '\\')) {
      const auto fence = line.find(": `");
      REQUIRE(fence != std::string::npos);
      CHECK(line.find_first_not_of(' ') == line.find("- "));
      CHECK(line.find("<script>") > fence);
    }
  }
  // The command is shown verbatim in a code span whose fence is longer than any backtick run in it.
  CHECK_THAT(markdown, Contains("- command: ````<script>alert(1)</script>"));
  CHECK_THAT(markdown, Contains("| a | ``` `` ` ````"));
}

TEST_CASE("a results folder or probe log named with markup is text in report.md's title and headings",
          "[report][hostile]") {
  TempDir dir;
  // Every '<' in report.md is escaped but in the anchors the report writes itself and in the code spans of
  // "- name: `value`" lines, which Markdown shows verbatim.
  const auto raw_markup = [](const std::string& markdown) {
    std::istringstream lines(markdown);
    for (std::string line; std::getline(lines, line);) {
      if (line.rfind("- ", 0) == 0 && line.find(": `") != std::string::npos) line.resize(line.find(": `"));
      for (auto at = line.find('<'); at != std::string::npos; at = line.find('<', at + 1)) {
        const bool anchor = line.compare(at, 7, "<a id=\"") == 0 || line.compare(at, 4, "</a>") == 0;
        if ((at == 0 || line[at - 1] != '\\') && !anchor) return true;
      }
    }
    return false;
  };
  for (const std::string name : {"<img src=x onerror=alert(1)>", "run\n<script>alert(1)</script>"}) {
    INFO(name);
    const fs::path results = dir.path() / name;
    write_results_folder(results, {FixtureSeries{}});
    write_report(options_for(dir, results, false));
    const std::string markdown = read_text(dir.path() / "report" / "report.md");
    CHECK_FALSE(raw_markup(markdown));
    CHECK(markdown.rfind("# attncheck report: ", 0) == 0);
    CHECK(markdown.find("\n<script") == std::string::npos);
    CHECK_THAT(read_text(dir.path() / "report" / "index.html"), !Contains("<img") && !Contains("<script"));

    // A probe log of that name, alone and compared with another.
    const fs::path log = dir.path() / (name + ".jsonl");
    write_text(log, read_text(ATTNCHECK_REPORTS_DATA "/probe-small/attncheck-probe.jsonl"));
    write_report(options_for(dir, log, false));
    CHECK_FALSE(raw_markup(read_text(dir.path() / "report" / "report.md")));
    ReportOptions compared = options_for(dir, log, false);
    compared.compare_with = {ATTNCHECK_REPORTS_DATA "/probe-small/attncheck-probe.jsonl"};
    write_report(compared);
    CHECK_FALSE(raw_markup(read_text(dir.path() / "report" / "report.md")));
  }
}

TEST_CASE("values at the ends of double's range are drawn or left out, and the report is written",
          "[report][hostile]") {
  TempDir dir;
  // Once: a margin of 8% around 1e308, or decades padded around 5e-324, became "inf" in the script, gnuplot
  // refused it and no report was written.
  const std::vector<std::vector<double>> extremes = {{96.1, 1e308, 383.2},
                                                     {96.1, 5e-324, 383.2},
                                                     {1e308, 1e308, 1e308},
                                                     {5e-324, 1e-310, 4e-320}};
  for (const std::vector<double>& mean : extremes) {
    INFO(mean[0] << ", " << mean[1] << ", " << mean[2]);
    FixtureSeries series;
    series.mean = mean;
    series.se = {0, 0, 0};
    series.intercept = 1e308;
    const fs::path results = dir.path() / "results";
    write_results_folder(results, {series});
    ReportOptions options = options_for(dir, results, true);
    const ReportSummary summary = write_report(options);
    CHECK(summary.plots > 0);
    const std::string script = read_text(dir.path() / "report" / "plots" / "plots.gp");
    std::istringstream lines(script);
    for (std::string line; std::getline(lines, line);) {
      if (line.rfind("set ", 0) != 0) continue;
      INFO(line);
      CHECK(line.find("inf") == std::string::npos);
      CHECK(line.find("nan") == std::string::npos);
    }
  }
}
