#include "attncheck/reports/plots.hpp"
#include "attncheck/theory/common.hpp"

#include "records/fixtures.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

using namespace attncheck::reports;
using namespace attncheck::records::testing;
using attncheck::theory::InputError;
using Catch::Matchers::Contains;

namespace {
PlotSpec two_curve_plot() {
  PlotSpec plot;
  plot.name = "demo";
  plot.title = "it's a test";
  plot.x_label = "N";
  plot.y_label = "E||F||_F";
  plot.curves.push_back(
      Curve{"estimate", CurveStyle::points_with_error_bars, {16, 32, 64}, {10, 20, 40}, {9, -1, 39}, {11, 21, 41}});
  plot.curves.push_back(Curve{"fit", CurveStyle::line, {16, 64}, {10, 40}, {}, {}});
  plot.curves.push_back(Curve{"nothing to draw on a log axis", CurveStyle::points, {16}, {0}, {}, {}});
  return plot;
}
}  // namespace

TEST_CASE("the gnuplot script quotes titles and keeps log axes valid", "[plots]") {
  const std::string script = gnuplot_script({two_curve_plot()}, ".tmp");
  CHECK_THAT(script, Contains("set output 'demo.svg.tmp'"));
  CHECK_THAT(script, Contains("set title 'it''s a test'"));
  CHECK_THAT(script, Contains("set logscale x"));
  CHECK_THAT(script, Contains("set logscale y"));
  // The bar reaching below zero is cut at a hundredth of its estimate; the curve with only a zero is left out.
  CHECK_THAT(script, Contains("32 20 0.20000000000000001 21"));
  CHECK(count_occurrences(script, "<< EOD") == 2);
  CHECK_THAT(script, !Contains("nothing to draw"));
}

TEST_CASE("a plot with nothing to draw is drawn empty and says so, and the report goes on", "[plots][errors]") {
  PlotSpec plot = two_curve_plot();
  plot.curves.erase(plot.curves.begin(), plot.curves.begin() + 2);
  const std::string script = gnuplot_script({plot}, "");
  CHECK_THAT(script, Contains("set label 1 'no point can be drawn") && Contains("plot 1/0 notitle"));
  // Values beyond what gnuplot can take in its margins count as nothing to draw, not as "inf" in the script.
  PlotSpec extreme = two_curve_plot();
  extreme.name = "extreme";
  for (Curve& curve : extreme.curves) std::fill(curve.y.begin(), curve.y.end(), 1e300);
  CHECK_THAT(gnuplot_script({extreme}, ""), Contains("no point can be drawn") && !Contains("inf"));
  TempDir dir;
  CHECK(render_plots({plot, extreme}, dir.path() / "plots", "gnuplot").size() == 2);
}

TEST_CASE("gnuplot draws each plot as SVG, made fit to embed in HTML, and as PNG beside it", "[plots]") {
  TempDir dir;
  PlotSpec second = two_curve_plot();
  second.name = "other";
  const auto svgs = render_plots({two_curve_plot(), second}, dir.path() / "plots", "gnuplot");
  REQUIRE(svgs.size() == 2);
  CHECK(fs::exists(dir.path() / "plots" / "demo.svg"));
  CHECK(fs::exists(dir.path() / "plots" / "other.svg"));
  CHECK(fs::exists(dir.path() / "plots" / "plots.gp"));
  for (const char* png : {"demo.png", "other.png"}) {
    const std::string bytes = read_text(dir.path() / "plots" / png);
    CHECK(bytes.size() > 1000);
    CHECK(bytes.rfind("\x89PNG\r\n\x1a\n", 0) == 0);  // the PNG signature: a real image, not an error text
  }
  std::size_t files = 0;
  for ([[maybe_unused]] const auto& entry : fs::directory_iterator(dir.path() / "plots")) ++files;
  CHECK(files == 5);  // no temporary SVG or PNG and no gnuplot log left behind
  CHECK_THAT(svgs[0], Contains("<svg"));

  const std::string embedded = inline_svg(svgs[0], "demo-");
  CHECK(embedded.rfind("<svg", 0) == 0);
  CHECK_THAT(embedded, !Contains("http://") && !Contains("https://") && !Contains("xlink:"));
  CHECK_THAT(embedded, Contains("id='demo-gpPt0'") && Contains("href='#demo-gpPt"));
  CHECK_THAT(embedded, Contains("it&apos;s a test") || Contains("it's a test"));
}

TEST_CASE("a missing gnuplot is a clear error that says how to go on", "[plots][errors]") {
  TempDir dir;
  CHECK_THROWS_WITH(render_plots({two_curve_plot()}, dir.path(), "/nonexistent/gnuplot"),
                    Contains("cannot run gnuplot as \"/nonexistent/gnuplot\"") && Contains("gnuplot-nox") &&
                        Contains("--no-plots"));
  CHECK_FALSE(fs::exists(dir.path() / "demo.svg"));
}

TEST_CASE("a failing gnuplot run is reported with its messages and leaves no SVG", "[plots][errors]") {
  TempDir dir;
  // `false` starts and exits 1 without drawing anything: a stand-in for gnuplot failing on the script.
  CHECK_THROWS_WITH(render_plots({two_curve_plot()}, dir.path(), "false"), Contains("failed on"));
  CHECK_FALSE(fs::exists(dir.path() / "demo.svg"));
}

TEST_CASE("a figure of panels is one multiplot, drawn as SVG and as PNG, with bands and tight ranges", "[plots]") {
  PlotSpec compensated;
  compensated.title = "compensated";
  compensated.x_label = "N";
  compensated.y_label = "value / N^1";
  compensated.log_y = false;
  compensated.curves.push_back(
      Curve{"", CurveStyle::band, {16, 32, 64}, {2, 2.1, 2.05}, {1.9, 2.0, 1.95}, {2.1, 2.2, 2.15}});
  compensated.curves.push_back(
      Curve{"E||F||_F / N^a", CurveStyle::line_with_points, {16, 32, 64}, {2, 2.1, 2.05}, {}, {}});
  PlotSpec loglog;
  loglog.title = "log-log";
  loglog.x_label = "N";
  loglog.y_label = "E||F||_F";
  loglog.curves.push_back(Curve{"estimate", CurveStyle::line_with_points, {16, 32, 64}, {30, 300, 3000}, {}, {}});
  PlotSpec narrow = loglog;
  narrow.title = "within a decade";
  narrow.curves[0].y = {3, 4, 5};
  PlotSpec figure;
  figure.name = "claim";
  figure.title = "Series 1";
  figure.notes = {"verdict: tight (basis: exact)"};
  figure.panels = {compensated, loglog, narrow};
  figure.columns = 3;
  const std::string script = gnuplot_script({figure}, ".tmp");
  CHECK(count_occurrences(script,
                          "set multiplot layout 1,3 title 'Series 1' . \"\\n\" . 'verdict: tight (basis: exact)'") ==
        2);
  CHECK(count_occurrences(script, "unset multiplot") == 2);
  CHECK_THAT(script, Contains("set terminal svg") && Contains("set output 'claim.svg.tmp'"));
  CHECK_THAT(script, Contains("set terminal pngcairo") && Contains("set output 'claim.png.tmp'"));
  // Each panel's data is written once and drawn by both terminals.
  CHECK(count_occurrences(script, "<< EOD") == 4);
  CHECK(count_occurrences(script, "set title 'compensated' noenhanced") == 2);
  CHECK_THAT(script, Contains("using 1:3:4 with filledcurves"));
  // The band has no legend entry; the line has one.
  CHECK_THAT(script, Contains("noborder notitle"));
  // 10^k tick labels where the data spans decades, plain numbers within one.
  CHECK(count_occurrences(script, "set format y '10^{%L}'") == 2);
  // Within a decade (3 to 5, padded to 2.91 to 5.16) gnuplot would label no tick: every digit is labelled.
  CHECK(count_occurrences(script, "set ytics (3, 4, 5)") == 2);
  // Tight ranges: the linear panel ends 8% of its data's span (band 1.9 to 2.2) beyond it, the log panel a
  // factor (3000/30)^0.06 = 1.318 beyond its data: 30 / 1.318 = 22.76.
  CHECK_THAT(script, Contains("set yrange [1.8759999999999999:2.2240000000000002]"));
  const auto log_range = script.find("set yrange [22.");
  CHECK(log_range != std::string::npos);
}

TEST_CASE("a heat map's cells stay sharp squares when a viewer scales it up, in the file and inline", "[plots]") {
  TempDir dir;
  PlotSpec plot;
  plot.name = "heads";
  plot.title = "layer x head";
  HeatMap map;
  map.rows = 4;
  map.columns = 2;
  map.values = {0.1, 0.9, 0.5, 0.2, 0.7, 0.3, 0.4, 0.8};
  plot.heat_map = map;
  const auto svgs = render_plots({plot}, dir.path() / "plots", "gnuplot");
  REQUIRE(svgs.size() == 1);
  // gnuplot draws the map as one bitmap of a pixel per cell.
  CHECK_THAT(svgs[0], Contains("<image style=\"image-rendering:pixelated\" "));
  CHECK_THAT(svgs[0], !Contains("<image  ") && !Contains("<image x"));
  CHECK(read_text(dir.path() / "plots" / "heads.svg") == svgs[0]);
  CHECK_THAT(inline_svg(svgs[0], "heads-"), Contains("image-rendering:pixelated"));
  CHECK(with_crisp_images("<svg><image x='0'/><image y='1'/></svg>") ==
        "<svg><image style=\"image-rendering:pixelated\" x='0'/><image style=\"image-rendering:pixelated\" "
        "y='1'/></svg>");
}

namespace {

// The y tick labels of a plot's script: gnuplot's 10^k labels (the powers of ten in the y range) or the listed
// ticks inside it.
std::vector<double> labelled_y_ticks(const std::string& script) {
  const auto range = script.find("set yrange [");
  REQUIRE(range != std::string::npos);
  const double lo = std::stod(script.substr(range + 12));
  const double hi = std::stod(script.substr(script.find(':', range) + 1));
  std::vector<double> ticks;
  if (script.find("set format y '10^{%L}'") != std::string::npos) {
    for (int k = -30; k <= 30; ++k) {
      if (std::pow(10.0, k) >= lo && std::pow(10.0, k) <= hi) ticks.push_back(std::pow(10.0, k));
    }
    return ticks;
  }
  const auto list = script.find("set ytics (");
  REQUIRE(list != std::string::npos);
  std::istringstream in(script.substr(list + 11, script.find(')', list) - list - 11));
  for (std::string item; std::getline(in, item, ',');) {
    const double tick = std::stod(item);
    if (tick >= lo && tick <= hi) ticks.push_back(tick);
  }
  return ticks;
}

}  // namespace

TEST_CASE("every log y axis has at least two labelled ticks, whatever span its data has", "[plots]") {
  // Spans from a few percent to three decades, placed across a power of ten and between two.
  for (const double lo : {0.013, 0.3, 0.45, 0.9, 1.0, 1.7, 3.0, 8.5}) {
    for (const double factor : {1.04, 1.5, 3.0, 9.0, 11.0, 14.0, 60.0, 99.0, 150.0, 2000.0}) {
      PlotSpec plot;
      plot.name = "span";
      plot.title = "span";
      plot.x_label = "N";
      plot.y_label = "y";
      plot.curves.push_back(Curve{"data", CurveStyle::line_with_points, {16, 32}, {lo, lo * factor}, {}, {}});
      const std::vector<double> ticks = labelled_y_ticks(gnuplot_script({plot}, ""));
      INFO("data from " << lo << " to " << lo * factor);
      CHECK(ticks.size() >= 2);
    }
  }
}

TEST_CASE("a log axis holding one power of ten is drawn with more than its one label", "[plots]") {
  // 0.4 to 6 spans more than a decade with only 1 inside: gnuplot's 10^k labels would leave "1" alone.
  PlotSpec plot;
  plot.name = "one-power";
  plot.title = "one power of ten";
  plot.x_label = "N";
  plot.y_label = "y";
  plot.curves.push_back(Curve{"data", CurveStyle::line_with_points, {16, 32, 64}, {0.4, 1.5, 6}, {}, {}});
  TempDir dir;
  const auto svgs = render_plots({plot}, dir.path() / "plots", "gnuplot");
  REQUIRE(svgs.size() == 1);
  // gnuplot's SVG writes each y tick label right-aligned, and nothing else so.
  CHECK(count_occurrences(svgs[0], "text-anchor=\"end\">") >= 3);
  CHECK_THAT(svgs[0], Contains(">0.5</tspan>") && Contains(">1</tspan>") && Contains(">5</tspan>"));
}
