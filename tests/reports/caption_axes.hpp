#pragma once
// Every figure of a written report whose caption names its axes' scale ("log y axis", "log-log axes", "linear")
// is drawn on that scale: the caption in report.md against the gnuplot commands of the figure in plots/plots.gp.
// Figures of several panels (multiplot) describe their panels one by one and are left to their own tests.

#include "records/fixtures.hpp"

#include <catch2/catch.hpp>

#include <filesystem>
#include <regex>
#include <string>

namespace attncheck::reports::testing {

// Returns the number of captions checked.
inline int check_captions_match_axes(const std::filesystem::path& report) {
  const std::string markdown = records::testing::read_text(report / "report.md");
  const std::string script = records::testing::read_text(report / "plots" / "plots.gp");
  const std::regex figure(R"(!\[([^\n]*)\]\(plots/([a-z0-9-]+)\.svg\))");
  int checked = 0;
  for (auto it = std::sregex_iterator(markdown.begin(), markdown.end(), figure); it != std::sregex_iterator(); ++it) {
    const std::string caption = (*it)[1], name = (*it)[2];
    const auto start = script.find("set output '" + name + ".svg");  // then the temporary suffix
    REQUIRE(start != std::string::npos);
    const std::string commands = script.substr(start, script.find("\nreset\n", start) - start);
    if (commands.find("set multiplot") != std::string::npos) continue;
    const bool log_y = commands.find("set logscale y") != std::string::npos;
    INFO("figure " << name << ": " << caption);
    if (caption.find("log y axis") != std::string::npos || caption.find("log-log axes") != std::string::npos) {
      CHECK(log_y);
      ++checked;
    } else if (caption.find("linear y axis") != std::string::npos) {
      CHECK_FALSE(log_y);
      ++checked;
    }
  }
  return checked;
}

}  // namespace attncheck::reports::testing
