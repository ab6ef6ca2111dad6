#include "attncheck/reports/plots.hpp"

#include "attncheck/reports/atomic_file.hpp"
#include "attncheck/reports/results_folder.hpp"
#include "attncheck/theory/common.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
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
    if (c == '\'') out += "''";
    else out += c;
  }
  return out + "'";
}

std::string number(double x) { return fmt::format("{:.17g}", x); }

bool plottable(double x, double y, const PlotSpec& plot) {
  return std::isfinite(x) && std::isfinite(y) && (!plot.log_x || x > 0) && (!plot.log_y || y > 0);
}

std::string style_clause(CurveStyle style, int index) {
  // Colours from a palette that stays distinguishable in grey and for colour-blind readers.
  static constexpr const char* palette[] = {"#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9", "#000000"};
  const char* colour = palette[index % 7];
  switch (style) {
    case CurveStyle::points_with_error_bars:
      return fmt::format("using 1:2:3:4 with yerrorbars pointtype 7 pointsize 0.8 linecolor rgb '{}'", colour);
    case CurveStyle::points: return fmt::format("using 1:2 with points pointtype 6 pointsize 1 linecolor rgb '{}'", colour);
    case CurveStyle::line: return fmt::format("using 1:2 with lines linewidth 1.5 linecolor rgb '{}'", colour);
    case CurveStyle::line_with_points:
      return fmt::format("using 1:2 with linespoints pointtype 7 pointsize 0.6 linewidth 1.5 linecolor rgb '{}'", colour);
    case CurveStyle::dashed_line:
      return fmt::format("using 1:2 with lines dashtype 2 linewidth 1.5 linecolor rgb '{}'", colour);
    case CurveStyle::band:
      return fmt::format("using 1:3:4 with filledcurves fillcolor rgb '{}' fillstyle transparent solid 0.2 noborder",
                         colour);
  }
  return "";
}

std::string heat_map_script(const HeatMap& map, const std::string& block) {
  if (map.rows < 1 || map.columns < 1 || map.values.size() != static_cast<std::size_t>(map.rows * map.columns)) {
    throw InputError(fmt::format("a heat map of {} x {} cells has {} values", map.rows, map.columns, map.values.size()));
  }
  double largest = 0;
  for (double v : map.values) {
    if (!std::isfinite(v)) throw InputError("a heat map holds a value that is not finite");
    largest = std::max(largest, std::fabs(v));
  }
  if (largest == 0) largest = 1;  // an all-zero map still gets a colour scale
  std::string script = "set offsets 0, 0, 0, 0\nunset grid\nset size ratio -1\nset tics out\n";
  script += fmt::format("set xrange [-0.5:{}]\nset yrange [{}:-0.5]\n", number(map.columns - 0.5), number(map.rows - 0.5));
  script += map.signed_scale
                ? fmt::format("set palette defined (-1 '#b2182b', -0.5 '#ef8a62', 0 '#f7f7f7', 0.5 '#67a9cf', "
                              "1 '#2166ac')\nset cbrange [{}:{}]\n", number(-largest), number(largest))
                : fmt::format("set palette defined (0 '#f7fbff', 0.5 '#6baed6', 1 '#08306b')\nset cbrange [0:{}]\n",
                              number(largest));
  std::string data;
  for (long long i = 0; i < map.rows; ++i) {
    for (long long j = 0; j < map.columns; ++j) data += (j ? " " : "") + number(map.values[i * map.columns + j]);
    data += "\n";
  }
  script += fmt::format("{} << EOD\n{}EOD\nplot {} matrix with image notitle\nunset output\n", block, data, block);
  return script;
}

}  // namespace

std::string gnuplot_script(const std::vector<PlotSpec>& plots, const std::string& output_suffix) {
  std::string script =
      "# Draws the report's plots; run `gnuplot plots.gp` in this folder.\n"
      "set terminal svg size 720,520 noenhanced font 'sans,12' background '#ffffff'\n";
  for (std::size_t k = 0; k < plots.size(); ++k) {
    const PlotSpec& plot = plots[k];
    script += fmt::format("\n# {}\n", one_line(plot.title));
    // `reset` keeps the terminal; it clears whatever the previous plot set.
    script += "reset\nset grid xtics ytics mxtics mytics linecolor rgb '#dddddd'\nset key below left Left reverse\n";
    // Room around the points so that the first and last are not drawn on the frame; a linear step axis stays
    // where the data is (no negative steps).
    script += plot.log_x ? "set offsets graph 0.04, graph 0.04, graph 0.06, graph 0.06\n"
                         : "set offsets 0, 0, graph 0.06, graph 0.06\n";
    script += fmt::format("set output {}\n", quoted(plot.name + ".svg" + output_suffix));
    script += fmt::format("set title {}\nset xlabel {} offset 0,0.6\nset ylabel {}\n", quoted(plot.title), quoted(plot.x_label),
                          quoted(plot.y_label));
    if (plot.heat_map) {
      script += heat_map_script(*plot.heat_map, fmt::format("$plot{}_matrix", k));
      continue;
    }
    script += plot.log_x ? "set logscale x 2\n" : "unset logscale x\n";
    script += plot.log_y ? "set logscale y 10\nset format y '%g'\n" : "unset logscale y\n";
    std::vector<std::string> clauses;
    for (std::size_t c = 0; c < plot.curves.size(); ++c) {
      const Curve& curve = plot.curves[c];
      const bool bars = curve.style == CurveStyle::points_with_error_bars || curve.style == CurveStyle::band;
      const std::string block = fmt::format("$plot{}_curve{}", k, c);
      std::string data;
      for (std::size_t i = 0; i < curve.x.size(); ++i) {
        if (!plottable(curve.x[i], curve.y[i], plot)) continue;
        data += number(curve.x[i]) + " " + number(curve.y[i]);
        if (bars) {
          // A bar reaching zero or below has no place on a log axis; it is cut at a hundredth of the estimate.
          const double lo = plot.log_y && curve.y_lo[i] <= 0 ? curve.y[i] / 100 : curve.y_lo[i];
          data += " " + number(lo) + " " + number(curve.y_hi[i]);
        }
        data += "\n";
      }
      if (data.empty()) continue;  // gnuplot refuses a plot whose every curve is empty; skip empty ones
      script += fmt::format("{} << EOD\n{}EOD\n", block, data);
      clauses.push_back(fmt::format("{} {} title {}", block, style_clause(curve.style, curve.colour >= 0 ? curve.colour : static_cast<int>(c)),
                                    quoted(curve.title)));
    }
    if (clauses.empty()) throw InputError(fmt::format("plot \"{}\" has no point that can be drawn", plot.title));
    script += "plot ";
    for (std::size_t i = 0; i < clauses.size(); ++i) script += (i ? ", \\\n     " : "") + clauses[i];
    script += "\nunset output\n";
  }
  return script;
}

std::vector<std::string> render_plots(const std::vector<PlotSpec>& plots, const fs::path& plot_folder,
                                      const std::string& gnuplot_program) {
  if (plots.empty()) return {};
  std::error_code error;
  fs::create_directories(plot_folder, error);
  if (error) throw InputError(fmt::format("cannot create {}: {}", plot_folder.string(), error.message()));
  const std::string suffix = fmt::format(".tmp.{}", static_cast<long>(::getpid()));
  write_file_atomically(plot_folder / "plots.gp", gnuplot_script(plots, suffix));

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
    throw InputError(fmt::format("cannot run gnuplot as \"{}\": {} (install the Debian package gnuplot-nox, "
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
    log = read_text_file(log_path);
  } catch (const InputError&) {
  }
  fs::remove(log_path, error);
  const auto remove_partial = [&] {
    for (const PlotSpec& plot : plots) fs::remove(plot_folder / (plot.name + ".svg" + suffix), error);
  };
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    remove_partial();
    throw InputError(fmt::format("gnuplot (\"{}\") failed on {}: {}", gnuplot_program,
                                 (plot_folder / "plots.gp").string(), log.empty() ? "no message" : log));
  }
  std::vector<std::string> svgs;
  for (const PlotSpec& plot : plots) {
    const fs::path drawn = plot_folder / (plot.name + ".svg" + suffix);
    if (!fs::exists(drawn, error)) {
      remove_partial();
      throw InputError(fmt::format("gnuplot (\"{}\") wrote no {}: {}", gnuplot_program, drawn.string(), log));
    }
    svgs.push_back(read_text_file(drawn));
    replace_file(drawn, plot_folder / (plot.name + ".svg"));
  }
  return svgs;
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
