#include "attncheck/reports/report.hpp"
#include "attncheck/theory/common.hpp"

#include "records/fixtures.hpp"

#include "caption_axes.hpp"

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <regex>
#include <sstream>

using namespace attncheck::reports;
using namespace attncheck::records;
using namespace attncheck::records::testing;
using attncheck::theory::InputError;
using Catch::Matchers::Contains;

namespace {

struct WrittenReport {
  std::string html, markdown;
  ReportSummary summary;
};

// The report of dir/results, written to dir/report.
WrittenReport report_of_results(const TempDir& dir, bool plots) {
  ReportOptions options;
  options.input = dir.path() / "results";
  options.out = dir.path() / "report";
  options.plots = plots;
  options.gnuplot = plots ? "gnuplot" : "/nonexistent/gnuplot";
  WrittenReport report;
  report.summary = write_report(options);
  report.html = read_text(dir.path() / "report" / "index.html");
  report.markdown = read_text(dir.path() / "report" / "report.md");
  return report;
}

WrittenReport write_standard_report(const TempDir& dir, bool plots, const std::vector<FixtureSeries>& series) {
  write_results_folder(dir.path() / "results", series);
  return report_of_results(dir, plots);
}

// A results folder written as given (fixtures edited into the shapes under test), and its report with plots.
WrittenReport write_report_of(const TempDir& dir, const json& fits, const std::string& points) {
  const fs::path results = dir.path() / "results";
  fs::create_directories(results);
  write_text(results / "fits.json", fits.dump(2));
  write_text(results / "points.jsonl", points);
  return report_of_results(dir, true);
}

}  // namespace

TEST_CASE("the HTML report stands alone: no external resource, one inline SVG per plot", "[report]") {
  TempDir dir;
  const auto series = standard_series();
  const WrittenReport report = write_standard_report(dir, true, series);
  // One plot per series, one for the pair of readings of p = 2, one for C3's elementwise p = 1 and 2 side
  // by side, C3's overlay of every series, and the value estimand's figure of every configuration.
  CHECK(report.summary.plots == series.size() + 4);
  CHECK(count_occurrences(report.html, "<svg") == series.size() + 4);
  CHECK(count_occurrences(report.html, "</svg>") == series.size() + 4);
  CHECK_THAT(report.markdown, Contains("](plots/estimand01.svg)"));
  CHECK_THAT(report.markdown, Contains("](plots/overlay01.svg)"));
  CHECK_THAT(report.markdown, Contains("](plots/readings03.svg)"));
  CHECK_THAT(report.markdown, Contains("](plots/claim01.svg)"));
  // The claim's figure: rows compensated, local slope, log-log; one column per p; the verdicts on it.
  const std::string script = read_text(dir.path() / "report" / "plots" / "plots.gp");
  CHECK_THAT(script, Contains("set multiplot layout 3,2 title 'C3 elementwise poly value, D=6 d=4: one column per p'"));
  CHECK_THAT(script, Contains("set title 'p=2: compensated by N^1 (claimed a)' noenhanced"));
  CHECK_THAT(script, Contains("set title 'p=1: local slope d log y / d log N' noenhanced"));
  CHECK_THAT(script, Contains("p=1 (series 1): "));
  // The series' own figures: the three panels side by side.
  CHECK(count_occurrences(script, "set multiplot layout 1,3") == 2 * series.size());  // SVG and PNG
  CHECK_THAT(report.html, !Contains("http://") && !Contains("https://"));
  // Nothing is loaded from elsewhere: no scripts, stylesheets, images or frames by reference.
  CHECK_THAT(report.html, !Contains("<script") && !Contains("<link") && !Contains("<img") && !Contains("<iframe"));
  CHECK_THAT(report.html, !Contains(" src="));
  CHECK_THAT(report.html, !Contains("@import") && !Contains("url(http"));
  // The only links leave to the PNG copies of the plots, beside the page.
  const std::regex outside_link(R"(href=["'](?!#|plots/[a-z0-9]+\.png["']))");
  CHECK(count_occurrences(report.html, ".png\">PNG</a>") == series.size() + 4);
  CHECK_FALSE(std::regex_search(report.html, outside_link));
  // The Markdown shows the same plots as files beside it.
  for (std::size_t i = 1; i <= series.size(); ++i) {
    const std::string name = fmt::format("plots/series{:02}.svg", i);
    CHECK_THAT(report.markdown, Contains("](" + name + ")"));
    CHECK(fs::exists(dir.path() / "report" / name));
  }
}

TEST_CASE("every configuration of the folder on one figure per estimand: the estimates themselves, and sqrt(N)",
          "[report]") {
  TempDir dir;
  const auto series = standard_series();
  const WrittenReport report = write_standard_report(dir, true, series);
  const std::string script = read_text(dir.path() / "report" / "plots" / "plots.gp");
  const auto figure = script.find("# E||F||_F: every activation of the folder");
  REQUIRE(figure != std::string::npos);
  const std::string section = script.substr(figure, script.find("\n# ", figure + 1) - figure);
  // Each series of the four (C3's three and C4, all of the value estimand) by its number and verdict, drawn as
  // its estimates at each N, not divided by anything: series 4 (C4) at N = 16 is its mean 24.0.
  for (std::size_t i = 0; i < series.size(); ++i) {
    CHECK_THAT(section, Contains(fmt::format("title '{}: {} ", i + 1, series[i].claim)));
  }
  CHECK_THAT(section, Contains("title 'sqrt(N): the softmax bound'"));
  CHECK_THAT(section, Contains("set logscale y 10") && Contains("set logscale x 2"));
  std::vector<double> drawn;
  std::istringstream lines(section);
  for (std::string line; std::getline(lines, line);) {
    double x = 0, y = 0;
    if (std::istringstream(line) >> x >> y && x == series[3].N.front()) drawn.push_back(y);
  }
  CHECK(std::find(drawn.begin(), drawn.end(), series[3].mean.front()) != drawn.end());
  CHECK_THAT(report.markdown, Contains("All activations, one figure per estimand"));
  CHECK(attncheck::reports::testing::check_captions_match_axes(dir.path() / "report") >= 1);
}

TEST_CASE("a folder of one configuration per estimand gets no figure of every activation", "[report]") {
  TempDir dir;
  const WrittenReport report = write_standard_report(dir, true, {standard_series().front()});
  CHECK_THAT(report.markdown, !Contains("one figure per estimand"));
  CHECK_FALSE(fs::exists(dir.path() / "report" / "plots" / "estimand01.svg"));
}

TEST_CASE("report.md carries every series' verdict and slope with its confidence interval", "[report]") {
  TempDir dir;
  const auto series = standard_series();
  const WrittenReport report = write_standard_report(dir, true, series);
  for (std::size_t i = 0; i < series.size(); ++i) {
    const auto& s = series[i];
    const std::string slope = fmt::format("{:.4g} [{:.4g}, {:.4g}]", s.slope, s.ci_lo, s.ci_hi);
    // The summary row: the series number links to its section, then the slope with CI and the verdict.
    const std::string row_start = fmt::format("| [{}](#series-{}) |", i + 1, i + 1);
    const auto row = report.markdown.find(row_start);
    REQUIRE(row != std::string::npos);
    const std::string line = report.markdown.substr(row, report.markdown.find('\n', row) - row);
    CHECK_THAT(line, Contains(slope) && Contains("| " + s.verdict + " |"));
    // These fixtures predate the basis: their verdict came from the global fit, and the report says so.
    CHECK_THAT(report.markdown,
               Contains(
                   fmt::format("Verdict: {} (basis: finite-N fit (older results)). fitted slope {:.4g} with 95% CI "
                               "[{:.4g}, {:.4g}]",
                               s.verdict, s.slope, s.ci_lo, s.ci_hi)));
    CHECK_THAT(report.html, Contains(fmt::format("<td class=\"verdict {0}\">{0}</td>", s.verdict)));
  }
  CHECK_THAT(report.markdown,
             Contains("4 series: 1 holds, 2 tight, 1 violated (settled); 0 consistent (not a proof), 0 inconclusive."));
  CHECK(report.summary.holds == 1);
  CHECK(report.summary.tight == 2);
  CHECK(report.summary.violated == 1);
}

TEST_CASE("each claim is stated with both numberings", "[report]") {
  TempDir dir;
  const WrittenReport report = write_standard_report(dir, false, standard_series());
  CHECK_THAT(report.markdown, Contains("## Claim C3 (v1: Thm 4.2 (4.3) / v2: Thm 4.2 (8))"));
  // The underscore after the bars could open emphasis in Markdown, so it is escaped.
  CHECK_THAT(report.markdown, Contains("E||(X Q K^T X^T / sqrt d)^p||\\_F = O(N)"));
  CHECK_THAT(report.html, Contains("E||(X Q K^T X^T / sqrt d)^p||_F = O(N)"));
  CHECK_THAT(report.markdown, Contains("## Claim C4 (v1: Cor 4.3 (4.4) / v2: Cor 4.1 (9))"));
  CHECK(report.markdown.find("## Claim C3") < report.markdown.find("## Claim C4"));
}

TEST_CASE("provenance appears for the run and for each series", "[report]") {
  TempDir dir;
  const WrittenReport report = write_standard_report(dir, false, standard_series());
  for (const std::string& document : {report.markdown, report.html}) {
    CHECK_THAT(document, Contains("attncheck version of the run"));
    CHECK_THAT(document, Contains("0.1.0"));
    CHECK_THAT(document, Contains("2025-01-15T10:20:30Z"));
    CHECK_THAT(document, Contains("testhost (Example CPU 3000)"));
    CHECK_THAT(document, Contains("attncheck mc --claim C3 --out results"));
    CHECK_THAT(document, Contains("12.5 s"));
  }
  CHECK_THAT(report.markdown, Contains("- run seed: `1234`"));
  CHECK_THAT(report.markdown, Contains("- backend: `cpu`"));
  CHECK_THAT(report.markdown, Contains("- threads: `2`"));
  // Per series: the seeds of its own points and the wall time they took.
  CHECK_THAT(report.markdown, Contains("- point seeds: `N=16: 9200, N=32: 9201, N=64: 9202`"));
  CHECK_THAT(report.markdown, Contains("- wall time of this series: `0.75 s`"));
  CHECK(count_occurrences(report.markdown, "Provenance of this series:") == 4);
}

TEST_CASE("estimates carry their SE and CI, and the Jensen ratio appears where exact values exist", "[report]") {
  TempDir dir;
  const WrittenReport report = write_standard_report(dir, false, standard_series());
  // N = 16 of C3 p = 1: 96.1 ± 0.4 against sqrt(9408) = 96.9948: ratio 0.99077 ± 0.00412.
  CHECK_THAT(report.markdown, Contains("| 16 | 96.10 ± 0.40 | 9417 ± 77 | [95.316, 96.884] | 2000 |"));
  CHECK_THAT(report.markdown, Contains("| 9408 |"));
  CHECK_THAT(report.markdown, Contains("| 96.994845 | 0.9908 ± 0.0041 |"));
  // C4 at N = 64: 47.9 ± 0.14 against sqrt(2316) = 48.1248.
  CHECK_THAT(report.markdown,
             Contains("| 48.124838 | 0.99533 ± 0.00291 |") || Contains("| 48.124838 | 0.9953 ± 0.0029 |"));
  // Series without exact values say so instead of showing empty columns.
  CHECK(count_occurrences(report.markdown, "No exact values are known for this series.") == 2);
}

TEST_CASE("the elementwise and matrix-power readings are shown side by side", "[report]") {
  TempDir dir;
  const WrittenReport report = write_standard_report(dir, false, standard_series());
  CHECK_THAT(report.markdown, Contains("### Elementwise vs matrix-power reading of (.)^p"));
  CHECK_THAT(report.markdown,
             Contains("| 2 | value | 6, 4 | 1.012 [0.951, 1.073] | tight | 2.003 [1.962, 2.044] | violated |"));
  CHECK_THAT(report.markdown, Contains("| 2 | 64 | 6500 ± 120 | 249000 ± 4200 | 38.31 |"));

  TempDir alone;
  auto without_matrix = standard_series();
  without_matrix.erase(without_matrix.begin() + 2);
  CHECK_THAT(write_standard_report(alone, false, without_matrix).markdown, !Contains("matrix-power reading"));
}

TEST_CASE("without plots the report is written without gnuplot, without gnuplot and says so", "[report]") {
  TempDir dir;
  const WrittenReport report = write_standard_report(dir, false, standard_series());
  CHECK(report.summary.plots == 0);
  CHECK(count_occurrences(report.html, "<svg") == 0);
  CHECK_THAT(report.html, Contains("<strong>Notice:</strong> this report was written with --no-plots"));
  CHECK_THAT(report.markdown, Contains("> **Notice:** this report was written with --no-plots"));
  CHECK_FALSE(fs::exists(dir.path() / "report" / "plots"));
}

TEST_CASE("a missing gnuplot stops the report before anything is written", "[report][errors]") {
  TempDir dir;
  write_results_folder(dir.path() / "results", standard_series());
  ReportOptions options;
  options.input = dir.path() / "results";
  options.out = dir.path() / "report";
  options.gnuplot = "/nonexistent/gnuplot";
  CHECK_THROWS_WITH(write_report(options), Contains("/nonexistent/gnuplot") && Contains("--no-plots"));
  CHECK_FALSE(fs::exists(dir.path() / "report" / "index.html"));
  CHECK_FALSE(fs::exists(dir.path() / "report" / "report.md"));
}

TEST_CASE("unreliable standard errors and a missing points.jsonl are pointed out", "[report]") {
  TempDir dir;
  FixtureSeries series;
  write_results_folder(dir.path() / "results", {series});
  json point = point_jsons(series)[2];
  point["se_reliable"] = false;
  write_text(dir.path() / "results" / "points.jsonl", points_text({series}) + point.dump() + "\n");
  ReportOptions options;
  options.input = dir.path() / "results";
  options.out = dir.path() / "report";
  options.plots = false;
  write_report(options);
  const std::string markdown = read_text(dir.path() / "report" / "report.md");
  CHECK_THAT(markdown, Contains("standard error of at least one point is marked unreliable"));
  CHECK_THAT(markdown, Contains("| NO |"));

  fs::remove(dir.path() / "results" / "points.jsonl");
  write_report(options);
  CHECK_THAT(read_text(dir.path() / "report" / "report.md"), Contains("points.jsonl is missing"));
}

TEST_CASE("a stored fit that misses the estimates is pointed out", "[report]") {
  TempDir dir;
  auto series = standard_series();
  const WrittenReport consistent = write_standard_report(dir, false, series);
  CHECK_THAT(consistent.markdown, !Contains("misses the estimates"));

  TempDir other;
  series[1].intercept =
      4.579 / std::log(10.0);  // the same line with a base-10 intercept: off by e^(4.579 (1 - 1/ln 10))
  const WrittenReport base10 = write_standard_report(other, false, series);
  CHECK(count_occurrences(base10.markdown, "misses the estimates") == 1);
  CHECK_THAT(base10.markdown, Contains("by a factor 13.3 at their centroid"));
}

TEST_CASE("a report written over an older one keeps no plot of the older", "[report]") {
  TempDir dir;
  write_standard_report(dir, true, standard_series());
  REQUIRE(fs::exists(dir.path() / "report" / "plots" / "series04.svg"));
  const fs::path plots = dir.path() / "report" / "plots";
  // The user's own files beside the plots, named like plots and like temporaries: none is the report's.
  const std::vector<std::string> users = {"notes.txt",          "figure1.png",           "diagram.svg",
                                          "draft.tmp.keep.txt", "series04.svg.tmp.keep", "plots.gp.tmp.",
                                          "series04.svg.tmp.1x"};
  for (const std::string& name : users) write_text(plots / name, "mine");
  write_text(plots / "series04.svg.tmp.4242", "a killed run's");  // a report's own temporary
  write_results_folder(dir.path() / "results", {FixtureSeries{}});
  ReportOptions options;
  options.input = dir.path() / "results";
  options.out = dir.path() / "report";
  CHECK(write_report(options).plots == 1);
  CHECK(fs::exists(plots / "series01.svg"));
  CHECK_FALSE(fs::exists(plots / "series04.svg"));
  CHECK_FALSE(fs::exists(plots / "readings02.svg"));
  CHECK_FALSE(fs::exists(plots / "overlay01.svg"));
  CHECK_FALSE(fs::exists(plots / "series04.svg.tmp.4242"));
  for (const std::string& name : users) CHECK(read_text(plots / name) == "mine");
  // Without plots the earlier report's are removed too, the user's kept.
  options.plots = false;
  write_report(options);
  CHECK_FALSE(fs::exists(plots / "series01.svg"));
  CHECK_FALSE(fs::exists(plots / "plots.gp"));
  for (const std::string& name : users) CHECK(read_text(plots / name) == "mine");
}

TEST_CASE("the extra shapes attncheck mc writes: C8 fitted over d, no claimed exponent, no fit, null values",
          "[report]") {
  TempDir dir;
  FixtureSeries c8;
  c8.claim = "C8";
  c8.reading = std::nullopt;
  c8.phi = "identity";
  c8.formula = "F = identity(T) (elementwise)";
  c8.estimand = "score-var";
  c8.N = {16, 16, 16};
  c8.mean = {15.7, 22.3, 30.9};
  c8.se = {0.26, 0.29, 0.38};
  c8.exact_sq = {256.0, 512.0, 1024.0};
  c8.slope = 0.979, c8.ci_lo = 0.90, c8.ci_hi = 1.058, c8.intercept = 4.2188;
  c8.first_seed = 500;
  FixtureSeries custom;
  custom.claim = "custom";
  custom.reading = std::nullopt;
  custom.phi = "relu";
  custom.formula = "F = relu(T/sqrt(4)) (elementwise)";
  custom.exact_sq = {std::nullopt, std::nullopt, std::nullopt};
  custom.first_seed = 600;
  FixtureSeries unfitted = custom;
  unfitted.estimand = "dQ";
  unfitted.first_seed = 700;

  json fits = json::parse(fits_text({c8, custom, unfitted}));
  fits["provenance"]["machine"] = {{"cpu", "Example CPU 3000"}, {"hostname", "testhost"}};
  json& s8 = fits["series"][0];
  s8["fit_variable"] = "d";
  s8["fit_of"] = "mean_sq";
  s8["d_values"] = {4, 8, 16};
  s8["mean_sq"] = {260.0, 515.0, 1020.0};
  s8["se_sq"] = {9.0, 13.0, 25.0};
  fits["series"][1]["claimed_exponent"] = nullptr;
  fits["series"][1]["verdict"] = nullptr;
  for (const char* key : {"slope", "slope_ci", "intercept", "claimed_exponent", "verdict"})
    fits["series"][2][key] = nullptr;
  fits["series"][2]["mean"][1] = nullptr;
  fits["series"][2]["se"][1] = nullptr;

  std::string points;
  auto c8_points = point_jsons(c8);
  for (std::size_t i = 0; i < c8_points.size(); ++i) {
    c8_points[i]["d"] = s8["d_values"][i];
    points += c8_points[i].dump() + "\n";
  }
  for (json point : point_jsons(custom)) points += point.dump() + "\n";
  auto unfitted_points = point_jsons(unfitted);
  unfitted_points[1]["mean"] = nullptr;
  unfitted_points[1]["ci95"] = {nullptr, nullptr};
  for (const json& point : unfitted_points) points += point.dump() + "\n";

  const WrittenReport report = write_report_of(dir, fits, points);
  CHECK(report.summary.tight == 1);
  CHECK(report.summary.plots == 3);
  const std::string& markdown = report.markdown;
  CHECK_THAT(markdown, Contains("- machine: `cpu: Example CPU 3000, hostname: testhost`"));
  // C8: fitted over d, of the second moment; its points are joined by d.
  CHECK_THAT(
      markdown,
      Contains(
          "| score-var | 6, swept | 1 + 0.05 | tight | finite-N fit (older results) | yes | 0.979 [0.9, 1.058] |"));
  CHECK_THAT(markdown, Contains("| 8 | 16 | 22.30 ± 0.29 | 515 ± 13 |"));
  CHECK_THAT(markdown, Contains("- point seeds: `d=4: 500, d=8: 501, d=16: 502`"));
  CHECK_THAT(read_text(dir.path() / "report" / "plots" / "plots.gp"), Contains("set xlabel 'd (head dimension)'"));
  // Custom maps state no exponent; a series with too few points has no fit; a missing value shows as "-".
  CHECK_THAT(markdown, Contains("| none stated | not checked | - | yes | 0.996 [0.985, 1.007] |"));
  CHECK_THAT(markdown, Contains("| none stated | not checked | - | yes | no fit |"));
  CHECK_THAT(markdown, Contains("3 series: 0 holds, 1 tight, 0 violated (settled); 0 consistent (not a proof), 0 "
                                "inconclusive, 2 not checked"));
  CHECK_THAT(markdown, Contains("No slope: fewer than two points with a usable estimate"));
  CHECK_THAT(markdown, Contains("| 32 | - |"));
}

TEST_CASE("a report removes what a killed report left half-written", "[report]") {
  TempDir dir;
  fs::create_directories(dir.path() / "report" / "plots");
  for (const char* name : {"report.md.tmp.4242", "index.html.tmp.17", "plots/series01.svg.tmp.4242",
                           "plots/gnuplot.log.tmp.99", "plots/plots.gp.tmp.5"}) {
    write_text(dir.path() / "report" / name, "half");
  }
  // The killed report had listed what it was drawing before it drew it.
  write_text(dir.path() / "report" / "plots" / ".attncheck-plots", "plots.gp\nseries01.png\nseries01.svg\n");
  write_text(dir.path() / "report" / "notes.txt", "mine");
  write_standard_report(dir, false, standard_series());
  std::vector<std::string> left;
  for (const auto& entry : fs::recursive_directory_iterator(dir.path() / "report")) {
    left.push_back(fs::relative(entry.path(), dir.path() / "report").string());
  }
  std::sort(left.begin(), left.end());
  CHECK(left == std::vector<std::string>{".attncheck-report", "index.html", "notes.txt", "plots", "report.md"});
}

TEST_CASE("a verdict names its basis in the summary, the series text and the figure: the diagnostic sits beside it",
          "[report]") {
  TempDir dir;
  FixtureSeries c4;
  c4.claim = "C4";
  c4.claimed = 0.5;
  c4.first_seed = 800;
  FixtureSeries rows = c4;
  rows.claim = "C7";
  rows.reading = std::nullopt;
  rows.phi = "identity";
  rows.estimand = "row-sum";
  rows.mean = {-0.02, 0.01, -0.005};  // E[row sum] = 0 for the identity: estimates of either sign
  rows.exact_sq = {std::nullopt, std::nullopt, std::nullopt};
  rows.first_seed = 900;
  json fits = json::parse(fits_text({c4, rows}));
  json& s = fits["series"][0];
  s["basis"] = "exact";
  s["verdict"] = "tight";
  s["verdict_rule"] =
      "the exponent e of the exact quantity as N -> infinity (computed from the closed form, not fitted) equals a";
  s["verdict_reason"] = "sqrt(E||F||^2) ~ 14400 N^0.5: e = 0.5 equals a";
  s["diagnostic"] = {{"basis", "finite-N fit (diagnostic)"},
                     {"jensen_ratio_first", 0.317},
                     {"jensen_ratio_last", 0.615},
                     {"jensen_ratio_source", "exact"}};
  json& r = fits["series"][1];
  r["basis"] = "exact";
  r["verdict"] = "holds";
  r["verdict_reason"] = "E[row sum] is 0 for every N";
  r["scores"] = "qk-layernorm";
  r["counts_for_exit"] = true;
  r["exact_mean"] = {0.0, 0.0, 0.0};
  std::string points;
  for (json point : point_jsons(c4)) points += point.dump() + "\n";
  for (json point : point_jsons(rows)) {
    point["scores"] = "qk-layernorm";
    point["exact_mean"] = 0.0;
    point["z_exact_mean"] = point["mean"].get<double>() / point["se"].get<double>();
    points += point.dump() + "\n";
  }
  const std::string markdown = write_report_of(dir, fits, points).markdown;
  CHECK_THAT(markdown, Contains("| 0.5 + 0.05 | tight | exact | yes |"));
  // Markdown escapes '>' (it would open a quote block at a line's start).
  CHECK_THAT(markdown, Contains("| 0.317 -\\> 0.615 (exact) |"));
  CHECK_THAT(markdown,
             Contains("Verdict: tight (basis: exact). Rule (exact): the exponent e of the exact quantity as N -\\> "
                      "infinity (computed from the closed form, not fitted) equals a. Evidence: sqrt(E||F||^2) ~ "
                      "14400 N^0.5: e = 0.5 equals a."));
  CHECK_THAT(markdown, Contains("Finite-N fit (diagnostic, never decides): slope"));
  CHECK_THAT(read_text(dir.path() / "report" / "plots" / "plots.gp"), Contains("verdict: tight (basis: exact)"));
  // The row sums: their own score model in the key, the exact expectation and its z per point.
  CHECK_THAT(markdown, Contains("scores qk-layernorm"));
  CHECK_THAT(markdown, Contains("exact E[row sum of F]"));
  CHECK_THAT(markdown, Contains("| -0.02"));
}

TEST_CASE("each claim has one figure of every series divided by x^a, with its band, verdict and number", "[report]") {
  TempDir dir;
  const auto series = standard_series();
  write_standard_report(dir, true, series);
  const std::string script = read_text(dir.path() / "report" / "plots" / "plots.gp");
  CHECK_THAT(script, Contains("Claim C3: every series, each divided by x^a (flat: growth like x^a)"));
  // Every C3 series in the legend, numbered as in the report, with its verdict.
  std::size_t c3 = 0;
  for (std::size_t i = 0; i < series.size(); ++i) {
    if (series[i].claim != "C3") continue;
    ++c3;
    CHECK_THAT(script, Contains(fmt::format("'{}: ", i + 1)));
  }
  REQUIRE(c3 >= 2);
}

TEST_CASE("a table of contents links every section and series, and per-point tables fold in the HTML page",
          "[report]") {
  TempDir dir;
  const auto series = standard_series();
  const WrittenReport report = write_standard_report(dir, false, series);
  // Markdown: a list of links before the first section, series nested under their claim.
  const auto contents = report.markdown.find("Contents:");
  REQUIRE(contents != std::string::npos);
  CHECK(contents < report.markdown.find("## Summary"));
  CHECK_THAT(report.markdown, Contains("- [Summary](#summary)") && Contains("- [Provenance](#provenance)"));
  CHECK_THAT(report.markdown, Contains("\n  - [Series 1: "));
  // HTML: the same links, series in a list of their own under their claim's entry.
  const auto nav = report.html.find("<nav class=\"contents\">");
  REQUIRE(nav != std::string::npos);
  const std::string toc = report.html.substr(nav, report.html.find("</nav>", nav) - nav);
  CHECK(count_occurrences(toc, "<ul>") == count_occurrences(toc, "</ul>"));
  CHECK(count_occurrences(toc, "<li>") == count_occurrences(toc, "</li>"));
  for (std::size_t i = 1; i <= series.size(); ++i) CHECK_THAT(toc, Contains(fmt::format("href=\"#series-{}\"", i)));
  CHECK_THAT(toc, Contains("</a>\n<ul>\n<li><a href=\"#series-1\">"));
  // Each series' points table folds under a line that says what it holds.
  CHECK(count_occurrences(report.html, "<details>") == series.size());
  CHECK_THAT(report.html, Contains("<summary>Points of series 1: "));
  CHECK_THAT(report.markdown, !Contains("<details>"));
}

namespace {

// The data blocks (x and y columns) of the plot whose script section starts with "# `title`".
std::vector<std::vector<std::pair<double, double>>> plot_blocks(const std::string& script, const std::string& title) {
  const auto start = script.find("\n# " + title + "\n");
  REQUIRE(start != std::string::npos);
  const std::string section = script.substr(start, script.find("unset output", start) - start);
  std::vector<std::vector<std::pair<double, double>>> blocks;
  for (auto at = section.find("<< EOD\n"); at != std::string::npos; at = section.find("<< EOD\n", at + 1)) {
    std::istringstream in(section.substr(at + 7, section.find("EOD\n", at + 7) - at - 7));
    blocks.emplace_back();
    for (std::string line; std::getline(in, line);) {
      std::istringstream fields(line);
      double x = 0, y = 0;
      fields >> x >> y;
      blocks.back().emplace_back(x, y);
    }
  }
  return blocks;
}

}  // namespace

TEST_CASE("equal readings at p = 1 are drawn apart, so that neither hides the other", "[report]") {
  TempDir dir;
  auto series = standard_series();
  FixtureSeries p1_matrix = series[0];  // the same values: at p = 1 the readings are one map
  p1_matrix.reading = "matrix";
  p1_matrix.phi = "matpow";
  p1_matrix.formula = "F = (T/sqrt(4))^1 (matrix power)";
  p1_matrix.first_seed = 9400;
  series.push_back(p1_matrix);
  const WrittenReport report = write_standard_report(dir, true, series);
  const std::string script = read_text(dir.path() / "report" / "plots" / "plots.gp");
  // Estimates, fit, estimates, fit: elementwise first.
  const auto blocks = plot_blocks(script, "C3 p=1 value, D=6 d=4: elementwise vs matrix power");
  REQUIRE(blocks.size() == 4);
  const auto& elementwise = blocks[0];
  const auto& matrix = blocks[2];
  REQUIRE(elementwise.size() == series[0].N.size());
  REQUIRE(matrix.size() == elementwise.size());
  for (std::size_t i = 0; i < matrix.size(); ++i) {
    const double n = static_cast<double>(series[0].N[i]);
    CHECK(elementwise[i].second == matrix[i].second);
    CHECK(elementwise[i].first < n);
    CHECK(matrix[i].first > n);
    CHECK(matrix[i].first / elementwise[i].first == Approx(std::exp2(0.16)));
  }
  // Filled and hollow markers, and the caption says where the points are.
  const auto section = script.find("# C3 p=1 value, D=6 d=4: elementwise vs matrix power");
  const std::string plot = script.substr(section, script.find("unset output", section) - section);
  CHECK_THAT(plot,
             Contains("yerrorbars pointtype 7 pointsize 0.8") && Contains("yerrorbars pointtype 6 pointsize 1.3"));
  CHECK_THAT(report.markdown, Contains("elementwise (filled) at N / 1.057, matrix power (hollow) at N x 1.057"));
}

TEST_CASE("the summary gives the fitted constant beside the slope, and says where softmax saturates its bound",
          "[report]") {
  TempDir dir;
  FixtureSeries softmax;
  softmax.claim = "custom";
  softmax.reading = std::nullopt;
  softmax.phi = "softmax";
  softmax.formula = "F = softmax(T/sqrt(4)) (row-wise)";
  softmax.mean = {3.99, 5.65, 7.99};
  softmax.exact_sq = {std::nullopt, std::nullopt, std::nullopt};
  softmax.slope = 0.5, softmax.intercept = std::log(1.0), softmax.claimed = 0.5;
  json fits = json::parse(fits_text({softmax}));
  fits["series"][0]["exact"] = {{"bound_checked_points", 3},
                                {"max_sample_over_bound", 0.9996},
                                {"judged_points", 0},
                                {"unjudged_points", 0},
                                {"disagrees_at", json::array()},
                                {"bound_exceeded_at", json::array()},
                                {"lower_bound_undercut_at", json::array()},
                                {"confirmed", true}};
  std::string points;
  for (const json& point : point_jsons(softmax)) points += point.dump() + "\n";
  const std::string markdown = write_report_of(dir, fits, points).markdown;
  CHECK_THAT(markdown, Contains("| fitted constant C (C x^slope) |"));
  CHECK_THAT(markdown, Contains("| 0.5 [0.985, 1.007] | 1 |"));  // exp(intercept 0) = 1
  CHECK_THAT(markdown, Contains("Softmax saturates in series 1 (sigma_x = 1, largest sample 0.9996 of sqrt(N))"));

  // Below 0.999 of the bound, no such note.
  fits["series"][0]["exact"]["max_sample_over_bound"] = 0.97;
  TempDir other;
  CHECK_FALSE(Catch::Contains("Softmax saturates").match(write_report_of(other, fits, points).markdown));
}
