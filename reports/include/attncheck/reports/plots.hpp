#pragma once
// Plots rendered by gnuplot as SVG. One gnuplot run draws every plot of a report from one script, which is
// kept next to the plots (plots.gp) so that a reader can re-render or restyle them.

#include <filesystem>
#include <optional>
#include <string_view>
#include <string>
#include <utility>
#include <vector>

namespace attncheck::reports {

enum class CurveStyle {
  points_with_error_bars,  // needs y_lo and y_hi
  points,
  line,  // straight segments between the points (a power law is straight on log-log axes)
  dashed_line,
  line_with_points,  // measured values joined in order
  band,              // the shaded region between y_lo and y_hi (a confidence band); y is not drawn
};

struct Curve {
  std::string title;  // the legend entry; empty: none
  CurveStyle style = CurveStyle::points;
  std::vector<double> x, y;
  std::vector<double> y_lo, y_hi;  // error bar ends or band edges, for points_with_error_bars and band
  int colour = -1;                 // index into the palette; -1: the curve's place in the plot
  // Curves of one colour (one activation) from different runs differ by this: point type and dash pattern.
  int variant = 0;
};

// A matrix drawn cell by cell instead of curves (an attention map: row i is query i, column j key j; row 0 at
// the top).
struct HeatMap {
  long long rows = 0, columns = 0;
  std::vector<double> values;  // row-major
  // A diverging palette centred at 0 (red negative, white 0, blue positive), symmetric about 0, for signed
  // maps; otherwise white (0) to dark blue (the largest value).
  bool signed_scale = false;
  // The colour scale drawn; absent: 0 (or -largest |value|) to the largest |value|. Maps meant to be compared
  // are given one range, so that one colour means one value in all of them.
  std::optional<std::pair<double, double>> scale_range;
  std::string scale_label;  // the colour bar's label
  // Labelled ticks added to the colour bar, e.g. a bound at 1.
  std::vector<std::pair<double, std::string>> scale_marks;
  // Each cell's value written in it (for maps small enough to read them); NaN cells (not measured) stay blank.
  bool show_values = false;
  // NaN cells are allowed (drawn blank) instead of refused.
  bool missing_allowed = false;
  // The colour bar beside the map; maps side by side on one scale need it once, beside the last.
  bool colour_box = true;
  // Tick labels of the rows and columns; empty: the indices 0, 1, 2, ...
  std::vector<std::string> row_labels, column_labels;
};

// The colour of an activation in every plot of a report, so that a reader follows one activation by its
// colour from plot to plot and run to run: an index into the plots' palette.
int activation_colour(std::string_view activation);

// One plot, or one figure of several panels (multiplot) when `panels` is not empty: then `title` heads the
// figure, `notes` are written under it, and the panels' own name, axes and curves are used.
struct PlotSpec {
  std::string name;  // file stem: <plot folder>/<name>.svg and <name>.png
  std::string title;
  std::string x_label, y_label;
  bool log_x = true, log_y = true;
  std::vector<Curve> curves;
  std::optional<HeatMap> heat_map;  // when set, drawn instead of the curves (log_x and log_y are ignored); a
                                    // figure's panels may be heat maps
  // The y range drawn; absent: gnuplot's autoscale with a margin. Tick labels on a log y axis read 10^k when
  // the range holds two powers of ten or more; otherwise they are plain numbers at 1, 2, 5 times powers of ten
  // (or finer), at least two of them.
  std::optional<std::pair<double, double>> y_range;
  std::vector<std::string> notes;  // lines written on the figure under its title (e.g. the verdict and its basis)
  std::vector<PlotSpec> panels;
  int columns = 1;  // panels per row
};

// The gnuplot script that draws every plot into `<folder>/<name>.svg<suffix>` and `<folder>/<name>.png<suffix>`.
// Every text of a plot is written noenhanced: only the script's own tick formats use gnuplot's enhanced text.
std::string gnuplot_script(const std::vector<PlotSpec>& plots, const std::string& output_suffix);

// Writes <plot_folder>/plots.gp and runs `gnuplot_program` on it, then moves each SVG and PNG into place; returns
// the SVG texts in the order of `plots`. Throws theory::InputError when gnuplot cannot be started (naming
// the program) or fails (with its messages).
std::vector<std::string> render_plots(const std::vector<PlotSpec>& plots, const std::filesystem::path& plot_folder,
                                      const std::string& gnuplot_program);

// The SVG made fit to sit inside an HTML page: no XML prolog, no namespace URIs (HTML knows SVG), and its ids
// prefixed with `id_prefix` so that several plots on one page do not share ids.
std::string inline_svg(const std::string& svg, const std::string& id_prefix);
// The SVG with its bitmaps (heat maps) drawn nearest-neighbour when scaled, in every viewer.
std::string with_crisp_images(std::string svg);

}  // namespace attncheck::reports
