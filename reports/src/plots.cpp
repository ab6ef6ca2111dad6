#include "attncheck/reports/plots.hpp"

#include "attncheck/records/atomic_file.hpp"
#include "attncheck/records/errors.hpp"
#include "attncheck/records/results_folder.hpp"
#include "attncheck/theory/common.hpp"

#include <fstream>
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <iterator>
#include <stdexcept>
#include <tuple>
#include <algorithm>
#include <system_error>

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace attncheck::reports {

namespace fs = std::filesystem;
using theory::InputError;

namespace {

// Text that stays on its script line: a control character (above all a newline) would end the quoted string
// or the comment it sits in, and gnuplot would run what follows as a command - system() included. Titles and
// labels carry text read from results folders and probe logs, so every one passes through here.
std::string one_line(const std::string& text) {
  std::string out = text;
  for (char& c : out) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
  }
  return out;
}

// Gnuplot single-quoted strings take everything literally (no backquote substitution, no escapes) except the
// quote itself, written twice.
std::string quoted(const std::string& text) {
  std::string out = "'";
  for (char c : one_line(text)) {
    if (c == '\'')
      out += "''";
    else
      out += c;
  }
  return out + "'";
}

// Values gnuplot draws: finite, and far enough inside double's range that the script's margins, spans and
// logarithms of them stay finite (a value of 1e308 padded by 8% was written as "inf", 5e-324 on a log axis padded a
// range of 1e326 decades, and gnuplot refused the script). Values beyond are left out of the plots; the tables
// show every number.
constexpr double kLargestDrawn = 1e290, kSmallestDrawn = 1e-290;

bool drawable(double v, bool log_axis) {
  return std::isfinite(v) && std::fabs(v) <= kLargestDrawn && (!log_axis || v >= kSmallestDrawn);
}

// Every number of the script is written here: the ranges computed from drawable values are finite, and one
// that is not would be a bug in this file, never text for gnuplot.
std::string number(double x) {
  if (!std::isfinite(x)) throw std::logic_error(fmt::format("a plot script number is {}", x));
  return fmt::format("{:.17g}", x);
}

bool plottable(double x, double y, const PlotSpec& plot) { return drawable(x, plot.log_x) && drawable(y, plot.log_y); }

// Colours from a palette that stays distinguishable in grey and for colour-blind readers.
constexpr const char* kPalette[] = {"#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9", "#000000"};
constexpr int kPaletteSize = static_cast<int>(std::size(kPalette));

std::string style_clause(CurveStyle style, int index, int variant) {
  const char* colour = kPalette[index % kPaletteSize];
  static constexpr int kPointTypes[] = {7, 5, 9, 11, 13};
  switch (style) {
    case CurveStyle::points_with_error_bars:
      // Variants alternate filled and larger hollow circles: points of two curves at one place both show.
      return fmt::format("using 1:2:3:4 with yerrorbars pointtype {} linecolor rgb '{}'",
                         variant % 2 ? "6 pointsize 1.3" : "7 pointsize 0.8", colour);
    case CurveStyle::points:
      return fmt::format("using 1:2 with points pointtype 6 pointsize 1 linecolor rgb '{}'", colour);
    case CurveStyle::line: return fmt::format("using 1:2 with lines linewidth 1.5 linecolor rgb '{}'", colour);
    case CurveStyle::line_with_points:
      return fmt::format(
          "using 1:2 with linespoints pointtype {} pointsize 0.6 linewidth 1.5 dashtype {} linecolor rgb '{}'",
          kPointTypes[variant % 5], variant % 5 + 1, colour);
    case CurveStyle::dashed_line:
      return fmt::format("using 1:2 with lines dashtype 2 linewidth 1.5 linecolor rgb '{}'", colour);
    case CurveStyle::band:
      return fmt::format("using 1:3:4 with filledcurves fillcolor rgb '{}' fillstyle transparent solid 0.22 noborder",
                         colour);
  }
  return "";
}

// The matrix as a data block: row i of the map on line i (NaN where a cell was not measured).
std::string heat_map_block(const HeatMap& map, const std::string& block) {
  if (map.rows < 1 || map.columns < 1 || map.values.size() != static_cast<std::size_t>(map.rows * map.columns)) {
    throw InputError(
        fmt::format("a heat map of {} x {} cells has {} values", map.rows, map.columns, map.values.size()));
  }
  std::string data;
  for (long long i = 0; i < map.rows; ++i) {
    for (long long j = 0; j < map.columns; ++j) {
      const double v = map.values[i * map.columns + j];
      if (!std::isfinite(v) && !(std::isnan(v) && map.missing_allowed)) {
        throw InputError("a heat map holds a value that is not finite");
      }
      // A value too large to draw is a cell left blank, as a missing one is.
      data += (j ? " " : "") + (drawable(v, false) ? number(v) : std::string("NaN"));
    }
    data += "\n";
  }
  return fmt::format("{} << EOD\n{}EOD\n", block, data);
}

std::string heat_map_commands(const HeatMap& map, const std::string& block, bool in_figure) {
  double largest = 0;
  for (double v : map.values) {
    if (drawable(v, false)) largest = std::max(largest, std::fabs(v));
  }
  if (largest == 0) largest = 1;  // an all-zero map still gets a colour scale
  // Square cells: a lone map keeps them by its aspect ratio; a figure of maps by its panel areas' shape, which
  // lines the maps up whether or not they carry the colour bar.
  std::string script = fmt::format("set offsets 0, 0, 0, 0\nunset grid\nunset key\nunset logscale\n{}\nset tics out\n",
                                   in_figure ? "set size noratio" : "set size ratio -1");
  // A tick on every cell, or on every k-th of a large map, at the cells' centres.
  const auto tick_step = [](long long cells) { return std::max(1LL, (cells + 15) / 16); };
  script += fmt::format(
      "set format x '%g'\nset format y '%g'\nset format cb '%g'\nset xtics {} nomirror\n"
      "set ytics {} nomirror\nset mxtics 1\nset mytics 1\n",
      tick_step(map.columns), tick_step(map.rows));
  // A figure of maps places its panels itself (see maps_layout); a lone map needs room on the right for
  // the colour bar's marks ("1 = bound" is long).
  script += map.colour_box ? "set colorbox\n" : "unset colorbox\n";
  if (!in_figure && !map.scale_marks.empty()) script += "set rmargin 16\n";
  script +=
      fmt::format("set xrange [-0.5:{}]\nset yrange [{}:-0.5]\n", number(map.columns - 0.5), number(map.rows - 0.5));
  const auto tick_labels = [](const char* axis, const std::vector<std::string>& labels) {
    if (labels.empty()) return std::string();
    std::string out = fmt::format("set {}tics (", axis);
    for (std::size_t i = 0; i < labels.size(); ++i) out += fmt::format("{}{} {}", i ? ", " : "", quoted(labels[i]), i);
    return out + ")\n";
  };
  script += tick_labels("y", map.row_labels) + tick_labels("x", map.column_labels);
  auto [lo, hi] = map.scale_range.value_or(map.signed_scale ? std::pair{-largest, largest} : std::pair{0.0, largest});
  lo = std::clamp(lo, -kLargestDrawn, kLargestDrawn);
  hi = std::clamp(hi, -kLargestDrawn, kLargestDrawn);
  script += map.signed_scale
                ? "set palette defined (-1 '#b2182b', -0.5 '#ef8a62', 0 '#f7f7f7', 0.5 '#67a9cf', 1 '#2166ac')\n"
                : "set palette defined (0 '#f7fbff', 0.5 '#6baed6', 1 '#08306b')\n";
  script += fmt::format("set cbrange [{}:{}]\nset cbtics autofreq\n", number(lo), number(hi));
  for (const auto& [value, label] : map.scale_marks) {
    script += fmt::format("set cbtics add ({} {})\n", quoted(label), number(value));
  }
  script += fmt::format("set cblabel {} noenhanced\n", quoted(map.scale_label));
  std::string clause = fmt::format("{} matrix with image notitle", block);
  if (map.show_values) {
    // Dark cells get white text: the upper half of the unsigned palette is dark.
    clause += fmt::format(
        ", {0} matrix using 1:2:($3 != $3 ? '' : sprintf('%.2f', $3)):($3 > {1} ? 0xffffff : 0x000000) "
        "with labels textcolor rgb variable font ',9' notitle",
        block, number(0.45 * lo + 0.55 * hi));  // never hi - lo: it overflows for ends of +-1e308
  }
  return script + "plot " + clause + "\n";
}

bool has_ends(CurveStyle style) { return style == CurveStyle::points_with_error_bars || style == CurveStyle::band; }

// The powers of ten in [lo, hi]: the ticks gnuplot labels on a log axis.
int powers_of_ten_within(double lo, double hi) {
  return static_cast<int>(std::floor(std::log10(hi)) - std::ceil(std::log10(lo))) + 1;
}

// Tick marks for a log axis holding fewer than two powers of ten (less than a decade, or up to two decades placed
// across one power), where gnuplot's labels would leave one tick labelled or none: 1, 2, 5 times a power of ten,
// or every digit, or evenly spaced ticks, whichever first gives three.
std::string log_ticks_of_few_powers(double lo, double hi) {
  for (const std::vector<double>& mantissas :
       {std::vector<double>{1, 2, 5}, std::vector<double>{1, 2, 3, 4, 5, 6, 7, 8, 9}}) {
    std::vector<double> ticks;
    for (int k = static_cast<int>(std::floor(std::log10(lo))); k <= static_cast<int>(std::ceil(std::log10(hi))); ++k) {
      for (const double m : mantissas) {
        const double tick = m * std::pow(10.0, k);
        if (tick >= lo && tick <= hi) ticks.push_back(tick);
      }
    }
    if (ticks.size() >= 3) {
      std::string out = "set ytics (";
      for (std::size_t i = 0; i < ticks.size(); ++i) out += (i ? ", " : "") + fmt::format("{:g}", ticks[i]);
      return out + ")\n";
    }
  }
  // Narrower still: evenly spaced ticks, 1, 2 or 5 times a power of ten apart.
  const double rough = (hi - lo) / 4;
  const double power = std::pow(10.0, std::floor(std::log10(rough)));
  const double step = power * (rough / power < 2 ? 1 : rough / power < 5 ? 2 : 5);
  std::string out = "set ytics (";
  int count = 0;
  for (double tick = std::ceil(lo / step) * step; tick <= hi && count < 12; tick += step, ++count) {
    out += (count ? ", " : "") + fmt::format("{:g}", tick);
  }
  return count ? out + ")\n" : "set ytics autofreq\n";
}

struct PanelData {
  std::string blocks;                // the data blocks, defined once for both terminals
  std::vector<std::string> clauses;  // the plot command's clauses
  double y_min = INFINITY, y_max = -INFINITY;
  bool nothing_drawn = false;  // every value lies beyond what a plot shows: an empty panel that says so
};

PanelData panel_data(const PlotSpec& plot, const std::string& block_prefix) {
  PanelData out;
  if (plot.heat_map) {
    out.blocks = heat_map_block(*plot.heat_map, block_prefix + "_matrix");
    out.clauses.push_back(block_prefix + "_matrix");  // the block heat_map_commands draws
    return out;
  }
  for (std::size_t c = 0; c < plot.curves.size(); ++c) {
    const Curve& curve = plot.curves[c];
    const bool ends = has_ends(curve.style);
    const std::string block = fmt::format("{}_curve{}", block_prefix, c);
    std::string data;
    for (std::size_t i = 0; i < curve.x.size(); ++i) {
      if (!plottable(curve.x[i], curve.y[i], plot)) continue;
      data += number(curve.x[i]) + " " + number(curve.y[i]);
      double lo = curve.y[i], hi = curve.y[i];
      if (ends) {
        // An end reaching zero or below has no place on a log axis; it is cut at a hundredth of the estimate.
        lo = plot.log_y && curve.y_lo[i] <= 0 ? curve.y[i] / 100 : curve.y_lo[i];
        hi = curve.y_hi[i];
        // An end beyond what is drawn is drawn at its edge: the bar runs off the plot, as it does.
        const double edge = plot.log_y ? kSmallestDrawn : -kLargestDrawn;
        lo = std::isnan(lo) ? curve.y[i] : std::clamp(lo, edge, kLargestDrawn);
        hi = std::isnan(hi) ? curve.y[i] : std::clamp(hi, edge, kLargestDrawn);
        data += " " + number(lo) + " " + number(hi);
      }
      for (const double y : {lo, hi}) {
        if (drawable(y, plot.log_y)) {
          out.y_min = std::min(out.y_min, y);
          out.y_max = std::max(out.y_max, y);
        }
      }
      data += "\n";
    }
    if (data.empty()) continue;  // gnuplot refuses a plot whose every curve is empty; skip empty ones
    out.blocks += fmt::format("{} << EOD\n{}EOD\n", block, data);
    const std::string title = curve.title.empty() ? "notitle" : "title " + quoted(curve.title) + " noenhanced";
    out.clauses.push_back(
        fmt::format("{} {} {}", block,
                    style_clause(curve.style, curve.colour >= 0 ? curve.colour : static_cast<int>(c), curve.variant),
                    title));
  }
  if (out.clauses.empty() && !plot.heat_map) {
    out.nothing_drawn = true;
    out.clauses.push_back("1/0 notitle");  // gnuplot refuses a plot command without a curve
  }
  return out;
}

// The commands that draw one plot (or one panel of a multiplot) from its data blocks.
std::string panel_commands(const PlotSpec& plot, const PanelData& data, bool in_multiplot) {
  std::string script;
  script += "set grid xtics ytics mxtics mytics linecolor rgb '#dddddd'\n";
  // Below the panel, where it hides no data; one entry a line, so that long entries stay whole.
  script += in_multiplot ? "set key below left Left reverse vertical maxrows 6 samplen 2 spacing 1.1\n"
                         : "set key below left Left reverse\n";
  // Room around the points so that the first and last are not drawn on the frame; a linear step axis stays
  // where the data is (no negative steps). The y range is the data's, with a margin: a padded range would
  // squeeze the points into a thin band.
  script += plot.log_x ? "set offsets graph 0.04, graph 0.04, 0, 0\n" : "set offsets 0, 0, 0, 0\n";
  script += fmt::format("set title {} noenhanced\n", quoted(plot.title));
  script += fmt::format("set xlabel {} noenhanced offset 0,{}\nset ylabel {} noenhanced\n", quoted(plot.x_label),
                        in_multiplot ? "0.4" : "0", quoted(plot.y_label));
  script += plot.log_x ? "set logscale x 2\nset format x '%g'\n" : "unset logscale x\nset format x '%g'\n";
  double lo = data.y_min, hi = data.y_max;
  if (plot.y_range) std::tie(lo, hi) = *plot.y_range;
  const bool has_range = drawable(lo, plot.log_y) && drawable(hi, plot.log_y);
  if (plot.log_y) {
    script += "set logscale y 10\n";
    // 10^k labels where the axis holds two powers of ten or more; otherwise plain numbers at chosen ticks, so that
    // every log axis has at least two labels (10^0.3 would read badly). Margins in decades, so that no ratio of
    // the ends is formed.
    if (has_range && !plot.y_range) {
      const double pad = std::max(0.06 * (std::log10(hi) - std::log10(lo)), std::log10(1.03));
      lo = std::pow(10.0, std::log10(lo) - pad);
      hi = std::pow(10.0, std::log10(hi) + pad);
    }
    if (has_range && powers_of_ten_within(lo, hi) >= 2) {
      script += "set format y '10^{%L}'\nset ytics autofreq\nset mytics 10\n";
    } else {
      script += "set format y '%g'\nset mytics default\n";
      if (has_range) script += log_ticks_of_few_powers(lo, hi);
    }
  } else {
    script += "unset logscale y\nset format y '%g'\nset ytics autofreq\nset mytics default\n";
    if (has_range && !plot.y_range) {
      const double pad = hi > lo ? 0.08 * (hi - lo) : std::max(0.05 * std::fabs(hi), 1e-12);
      lo -= pad;
      hi += pad;
    }
  }
  script += has_range ? fmt::format("set yrange [{}:{}]\n", number(lo), number(hi)) : "set autoscale y\n";
  if (data.nothing_drawn) {
    script +=
        "set label 1 'no point can be drawn: every value lies beyond what a plot shows (the tables give them)' at "
        "graph 0.5, graph 0.5 center noenhanced\nset xrange [1:2]\nset yrange [1:10]\n";
  }
  // (With drawable ends, padding by 8% of the span or 6% of its decades stays within double's range.)
  script += "plot ";
  for (std::size_t i = 0; i < data.clauses.size(); ++i) script += (i ? ", \\\n     " : "") + data.clauses[i];
  return script + (data.nothing_drawn ? "\nunset label 1\nset autoscale xy\n" : "\n");
}

std::string heat_map_panel(const PlotSpec& plot, const PanelData& data, bool in_figure) {
  return fmt::format("set title {} noenhanced\nset xlabel {} noenhanced\nset ylabel {} noenhanced\n",
                     quoted(plot.title), quoted(plot.x_label), quoted(plot.y_label)) +
         heat_map_commands(*plot.heat_map, data.clauses.at(0), in_figure);
}

struct Canvas {
  int width, height;
};

bool all_maps(const PlotSpec& plot) {
  return !plot.panels.empty() &&
         std::all_of(plot.panels.begin(), plot.panels.end(), [](const PlotSpec& p) { return p.heat_map.has_value(); });
}

// A figure of maps in pixels: cells are square, so the height follows the maps' shape and a wide map leaves
// no empty band; the colour bar of the last column sits in a strip on the right.
constexpr int kMapWidth = 400, kMapGap = 90, kMapLeft = 70, kMapRight = 150, kMapBelow = 70, kMapTitleLine = 26;

int map_height(const PlotSpec& plot) {
  const HeatMap& map = *plot.panels.front().heat_map;
  return static_cast<int>(
      std::clamp(kMapWidth * static_cast<double>(map.rows) / static_cast<double>(map.columns), 140.0, 720.0));
}

int map_title_height(const PlotSpec& plot) { return 40 + kMapTitleLine * static_cast<int>(plot.notes.size() + 1); }

Canvas canvas_of(const PlotSpec& plot) {
  if (all_maps(plot)) {
    const int columns = std::max(1, plot.columns);
    const int rows = static_cast<int>((plot.panels.size() + columns - 1) / columns);
    return {kMapLeft + columns * kMapWidth + (columns - 1) * kMapGap + kMapRight,
            map_title_height(plot) + rows * (map_height(plot) + kMapBelow + 30)};
  }
  if (plot.panels.empty()) return {800, 560};
  const int columns = std::max(1, plot.columns);
  const int rows = static_cast<int>((plot.panels.size() + columns - 1) / columns);
  return {460 * columns, 500 * rows + 30 * static_cast<int>(plot.notes.size()) + 50};
}

// The multiplot's fixed panel areas for a figure of maps (screen fractions), so that every map has the same
// size whether or not it carries the colour bar; empty for other figures.
std::string maps_layout(const PlotSpec& plot, const Canvas& canvas) {
  if (!all_maps(plot)) return "";
  const double w = canvas.width, h = canvas.height;
  return fmt::format(" margins {:.4f},{:.4f},{:.4f},{:.4f} spacing {:.4f},{:.4f}", kMapLeft / w, 1 - kMapRight / w,
                     kMapBelow / h, 1 - map_title_height(plot) / h, kMapGap / w, (kMapBelow + 30) / h);
}

}  // namespace

int activation_colour(std::string_view activation) {
  // The activations attncheck trains and probes, each its own palette entry; any other name is black.
  static constexpr std::string_view kActivations[] = {"softmax", "poly3_scaled", "poly3",
                                                      "relu_n",  "identity",     "linear_scaled"};
  for (int i = 0; i < static_cast<int>(std::size(kActivations)); ++i) {
    if (activation == kActivations[i]) return i;
  }
  return kPaletteSize - 1;
}

std::string gnuplot_script(const std::vector<PlotSpec>& plots, const std::string& output_suffix) {
  std::string script = "# Draws the report's plots as SVG and PNG; run `gnuplot plots.gp` in this folder.\n";
  for (std::size_t k = 0; k < plots.size(); ++k) {
    const PlotSpec& plot = plots[k];
    script += fmt::format("\n# {}\n", one_line(plot.title));
    std::vector<PanelData> data;
    if (plot.panels.empty()) {
      data.push_back(panel_data(plot, fmt::format("$plot{}", k)));
    } else {
      for (std::size_t p = 0; p < plot.panels.size(); ++p)
        data.push_back(panel_data(plot.panels[p], fmt::format("$plot{}_panel{}", k, p)));
    }
    for (const PanelData& d : data) script += d.blocks;
    const Canvas canvas = canvas_of(plot);
    // The same drawing twice: SVG for the page, PNG for slides and issues. Enhanced text is on for the 10^k
    // tick labels only; every text from the report is written noenhanced.
    const std::pair<const char*, std::string> terminals[] = {
        {".svg",
         fmt::format("svg size {},{} enhanced font 'sans,14' background '#ffffff'", canvas.width, canvas.height)},
        {".png",
         fmt::format("pngcairo size {},{} enhanced font 'sans,11' background '#ffffff'", canvas.width, canvas.height)}};
    for (const auto& [extension, terminal] : terminals) {
      // `reset` keeps the terminal; it clears whatever the previous plot set.
      script += fmt::format("reset\nset terminal {}\nset output {}\n", terminal,
                            quoted(plot.name + extension + output_suffix));
      if (plot.panels.empty() && plot.heat_map) {
        script += heat_map_panel(plot, data[0], false);
      } else if (plot.panels.empty()) {
        script += panel_commands(plot, data[0], false);
      } else {
        const int columns = std::max(1, plot.columns);
        const int rows = static_cast<int>((plot.panels.size() + columns - 1) / columns);
        std::string heading = quoted(plot.title);
        for (const std::string& line : plot.notes) heading += " . \"\\n\" . " + quoted(line);
        script += fmt::format("set multiplot layout {},{} title {} noenhanced font ',15'{}\n", rows, columns, heading,
                              maps_layout(plot, canvas));
        // The panels' plot areas line up whatever their legends: the bottom margin is fixed for the longest.
        std::size_t longest_key = 0;
        for (const PlotSpec& panel : plot.panels) {
          std::size_t entries = 0;
          for (const Curve& curve : panel.curves) entries += curve.title.empty() ? 0 : 1;
          longest_key = std::max(longest_key, std::min<std::size_t>(entries, 6));
        }
        if (!all_maps(plot)) script += fmt::format("set bmargin {}\n", 3 + 1.2 * static_cast<double>(longest_key));
        for (std::size_t p = 0; p < plot.panels.size(); ++p) {
          script += plot.panels[p].heat_map ? heat_map_panel(plot.panels[p], data[p], true)
                                            : panel_commands(plot.panels[p], data[p], true);
        }
        script += "unset multiplot\n";
      }
      script += "unset output\n";
    }
  }
  return script;
}

std::vector<std::string> render_plots(const std::vector<PlotSpec>& plots, const fs::path& plot_folder,
                                      const std::string& gnuplot_program) {
  if (plots.empty()) return {};
  std::error_code error;
  fs::create_directories(plot_folder, error);
  if (error) throw records::IoError(fmt::format("cannot create {}: {}", plot_folder.string(), error.message()));
  const std::string suffix = fmt::format(".tmp.{}", static_cast<long>(::getpid()));
  records::write_file_atomically(plot_folder / "plots.gp", gnuplot_script(plots, suffix));

  // gnuplot runs in the plot folder so that the kept script works there as it stands.
  const fs::path log_path = plot_folder / ("gnuplot.log" + suffix);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  const std::string folder_text = plot_folder.string();
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 29))
  posix_spawn_file_actions_addchdir_np(&actions, folder_text.c_str());
#else
#error "posix_spawn_file_actions_addchdir_np (glibc 2.29) is needed"
#endif
  std::string program = gnuplot_program, script_arg = "plots.gp";
  char* argv[] = {program.data(), script_arg.data(), nullptr};
  pid_t pid = 0;
  const int spawn_error = ::posix_spawnp(&pid, program.c_str(), &actions, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawn_error != 0) {
    fs::remove(log_path, error);
    throw InputError(
        fmt::format("cannot run gnuplot as \"{}\": {} (install the Debian package gnuplot-nox, "
                    "name the program with --gnuplot, or write the report without plots with "
                    "--no-plots)",
                    gnuplot_program, std::strerror(spawn_error)));
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) throw InputError(fmt::format("lost track of gnuplot: {}", std::strerror(errno)));
  }
  std::string log;
  try {
    log = records::read_text_file(log_path);
  } catch (const InputError&) {
  }
  fs::remove(log_path, error);
  const auto remove_partial = [&] {
    for (const PlotSpec& plot : plots) {
      for (const char* extension : {".svg", ".png"}) fs::remove(plot_folder / (plot.name + extension + suffix), error);
    }
  };
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    remove_partial();
    throw InputError(fmt::format("gnuplot (\"{}\") failed on {}: {}", gnuplot_program,
                                 (plot_folder / "plots.gp").string(), log.empty() ? "no message" : log));
  }
  std::vector<std::string> svgs;
  for (const PlotSpec& plot : plots) {
    for (const char* extension : {".svg", ".png"}) {
      const fs::path drawn = plot_folder / (plot.name + extension + suffix);
      if (!fs::exists(drawn, error) || fs::file_size(drawn, error) == 0) {
        remove_partial();
        throw InputError(fmt::format("gnuplot (\"{}\") wrote no {}: {}", gnuplot_program, drawn.string(), log));
      }
    }
    const fs::path svg = plot_folder / (plot.name + ".svg" + suffix);
    svgs.push_back(with_crisp_images(records::read_text_file(svg)));
    std::ofstream rewritten(svg, std::ios::binary | std::ios::trunc);
    if (!(rewritten << svgs.back()) || !rewritten.flush()) {
      remove_partial();
      throw InputError(fmt::format("could not write {}: {}", svg.string(), std::strerror(errno)));
    }
  }
  // Moved into place only once every file is drawn, so a failure leaves no half set.
  for (const PlotSpec& plot : plots) {
    for (const char* extension : {".svg", ".png"}) {
      records::replace_file(plot_folder / (plot.name + extension + suffix), plot_folder / (plot.name + extension));
    }
  }
  return svgs;
}

std::string with_crisp_images(std::string svg) {
  // gnuplot draws a heat map as one bitmap of a pixel per cell; a viewer smooths it when scaling it up, so
  // that a 4 x 2 map of heads becomes a blur. Each cell stays a sharp square drawn nearest-neighbour.
  const std::string tag = "<image ", crisp = "<image style=\"image-rendering:pixelated\" ";
  for (auto at = svg.find(tag); at != std::string::npos; at = svg.find(tag, at + crisp.size())) {
    svg.replace(at, tag.size(), crisp);
  }
  return svg;
}

std::string inline_svg(const std::string& svg, const std::string& id_prefix) {
  const auto start = svg.find("<svg");
  if (start == std::string::npos) throw InputError("gnuplot's output holds no <svg> element");
  std::string out = svg.substr(start);
  const auto erase_all = [&out](const std::string& what) {
    for (auto at = out.find(what); at != std::string::npos; at = out.find(what, at)) out.erase(at, what.size());
  };
  const auto replace_all = [&out](const std::string& what, const std::string& with) {
    for (auto at = out.find(what); at != std::string::npos; at = out.find(what, at + with.size())) {
      out.replace(at, what.size(), with);
    }
  };
  erase_all(" xmlns=\"http://www.w3.org/2000/svg\"");
  erase_all(" xmlns:xlink=\"http://www.w3.org/1999/xlink\"");
  erase_all("\n xmlns=\"http://www.w3.org/2000/svg\"");
  erase_all("\n xmlns:xlink=\"http://www.w3.org/1999/xlink\"");
  replace_all("xlink:href=", "href=");
  for (const char quote : {'\'', '"'}) {
    const std::string q(1, quote);
    replace_all(" id=" + q, " id=" + q + id_prefix);
    replace_all("href=" + q + "#", "href=" + q + "#" + id_prefix);
  }
  replace_all("url(#", "url(#" + id_prefix);
  return out;
}

}  // namespace attncheck::reports
