#include "attncheck/reports/report.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace attncheck::reports {

void PendingFigures::add(PlotSpec plot, std::string caption, std::vector<Block>& blocks) {
  plots.push_back(std::move(plot));
  block_of_plot.push_back(blocks.size());
  blocks.push_back(Figure{"", "", std::move(caption)});
}

void PendingFigures::add_drawable(PlotSpec plot, std::string caption, std::vector<Block>& blocks) {
  if (!plot.heat_map) {
    std::erase_if(plot.curves,
                  [](const Curve& c) { return std::none_of(c.y.begin(), c.y.end(), [](double y) { return y > 0; }); });
    if (plot.curves.empty()) {
      blocks.push_back(Notice{fmt::format("nothing to plot for \"{}\": no positive values.", plot.title)});
      return;
    }
  }
  add(std::move(plot), std::move(caption), blocks);
}

}  // namespace attncheck::reports
