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

std::string duration_text(double seconds) {
  const auto whole = static_cast<long long>(std::max(0.0, seconds) + 0.5);
  if (whole < 60) return fmt::format("{} s", whole);
  if (whole < 3600) return fmt::format("{} min {} s", whole / 60, whole % 60);
  return fmt::format("{} h {} min", whole / 3600, (whole % 3600) / 60);
}

std::string TimeLeft::text(double fraction_done) const {
  return time_left_text(std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(),
                        fraction_done);
}

std::string time_left_text(double elapsed, double fraction_done) {
  // Too little done, or too soon, for a rate worth extrapolating.
  if (!(fraction_done >= 0.01) || elapsed < 2 || fraction_done >= 1) return duration_text(elapsed);
  return fmt::format("{}, about {} left", duration_text(elapsed),
                     duration_text(elapsed * (1 - fraction_done) / fraction_done));
}

std::string progress_bar(double fraction, int width) {
  const int filled = static_cast<int>(std::clamp(fraction, 0.0, 1.0) * width);
  return "[" + std::string(static_cast<std::size_t>(filled), '#') +
         std::string(static_cast<std::size_t>(width - filled), ' ') + "]";
}

}  // namespace attncheck::cli
