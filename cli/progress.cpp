#include "progress.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace attncheck::cli {

ProgressLine::ProgressLine() : enabled_(::isatty(STDERR_FILENO) == 1) {}

void ProgressLine::update(std::string_view text) {
  if (!enabled_) return;
  fmt::print(stderr, "\r\x1b[K{}", text);
  std::fflush(stderr);
  dirty_ = true;
}

void ProgressLine::finish() {
  if (!enabled_ || !dirty_) return;
  fmt::print(stderr, "\r\x1b[K");
  std::fflush(stderr);
  dirty_ = false;
}

std::string progress_bar(double fraction, int width) {
  const int filled = static_cast<int>(std::clamp(fraction, 0.0, 1.0) * width);
  return "[" + std::string(static_cast<std::size_t>(filled), '#') +
         std::string(static_cast<std::size_t>(width - filled), ' ') + "]";
}

}  // namespace attncheck::cli
