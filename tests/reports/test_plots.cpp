#include "attncheck/reports/plots.hpp"
#include "attncheck/theory/common.hpp"

#include "fixtures.hpp"

#include <catch2/catch.hpp>

using namespace attncheck::reports;
using namespace attncheck::reports::testing;
using attncheck::theory::InputError;
using Catch::Matchers::Contains;

namespace {
PlotSpec two_curve_plot() {
  PlotSpec plot;
  plot.name = "demo";
  plot.title = "it's a test";
  plot.x_label = "N";
  plot.y_label = "E||F||_F";
  plot.curves.push_back(Curve{"estimate", CurveStyle::points_with_error_bars, {16, 32, 64}, {10, 20, 40}, {9, -1, 39}, {11, 21, 41}});
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

TEST_CASE("a plot with nothing to draw is refused by name", "[plots][errors]") {
  PlotSpec plot = two_curve_plot();
  plot.curves.erase(plot.curves.begin(), plot.curves.begin() + 2);
  CHECK_THROWS_WITH(gnuplot_script({plot}, ""), Contains("it's a test") && Contains("no point"));
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
