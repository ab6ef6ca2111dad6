#pragma once
// Plots rendered by gnuplot as SVG. One gnuplot run draws every plot of a report from one script, which is
// kept next to the plots (plots.gp) so that a reader can re-render or restyle them.

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace attncheck::reports {

enum class CurveStyle {
  points_with_error_bars,  // needs y_lo and y_hi
  points,
  line,         // straight segments between the points (a power law is straight on log-log axes)
  dashed_line,
  line_with_points,  // measured values joined in order
  band,              // the area between y_lo and y_hi, translucent (an uncertainty band under a line)
};

struct Curve {
  std::string title;
  CurveStyle style = CurveStyle::points;
  std::vector<double> x, y;
  std::vector<double> y_lo, y_hi;  // error bar or band ends, for points_with_error_bars and band
  int colour = -1;                 // index into the palette; -1: the curve's place in the plot
};

// A matrix drawn cell by cell instead of curves (an attention map: row i is query i, column j key j; row 0 at
// the top).
struct HeatMap {
  long long rows = 0, columns = 0;
  std::vector<double> values;  // row-major
  // A diverging palette centred at 0 (red negative, white 0, blue positive), symmetric about 0, for signed
  // maps; otherwise white (0) to dark blue (the largest value).
  bool signed_scale = false;
};

struct PlotSpec {
  std::string name;  // file stem: <plot folder>/<name>.svg
  std::string title;
  std::string x_label, y_label;
  bool log_x = true, log_y = true;
  std::vector<Curve> curves;
  std::optional<HeatMap> heat_map;  // when set, drawn instead of the curves (log_x and log_y are ignored)
};

// The gnuplot script that draws every plot into `<folder>/<name>.svg<suffix>`.
std::string gnuplot_script(const std::vector<PlotSpec>& plots, const std::string& output_suffix);

// Writes <plot_folder>/plots.gp and runs `gnuplot_program` on it, then moves each SVG into place; returns
// the SVG texts in the order of `plots`. Throws theory::InputError when gnuplot cannot be started (naming
// the program) or fails (with its messages).
std::vector<std::string> render_plots(const std::vector<PlotSpec>& plots, const std::filesystem::path& plot_folder,
                                      const std::string& gnuplot_program);

// The SVG made fit to sit inside an HTML page: no XML prolog, no namespace URIs (HTML knows SVG), and its ids
// prefixed with `id_prefix` so that several plots on one page do not share ids.
std::string inline_svg(const std::string& svg, const std::string& id_prefix);

}  // namespace attncheck::reports
