#pragma once
// The progress line of every long command (mc's sweep, probe's heads): rewritten in place on a terminal's
// stderr, nothing when stderr is a file or a pipe, so that logs and captured output stay clean.

#include <chrono>
#include <string>
#include <string_view>

namespace attncheck::cli {

class ProgressLine {
 public:
  ProgressLine();  // shown only when stderr is a terminal
  bool shown() const { return enabled_; }
  // Replaces the line with `text`.
  void update(std::string_view text);
  // Clears the line, so that what is printed next starts on a clean one.
  void finish();

 private:
  bool enabled_;
  bool dirty_ = false;
};

// "[#####     ]": `fraction` (clamped to [0, 1]) of `width` cells filled.
std::string progress_bar(double fraction, int width = 30);

// The time since the work began and, once a fraction of it is done, how long the rest takes at the rate so far
// ("12 s, about 1 min 5 s left"). The rate so far is all it knows: where later parts cost more (larger N), the
// estimate grows as they run.
class TimeLeft {
 public:
  TimeLeft() : start_(std::chrono::steady_clock::now()) {}
  std::string text(double fraction_done) const;

 private:
  std::chrono::steady_clock::time_point start_;
};

// "45 s", "3 min 20 s", "2 h 5 min".
std::string duration_text(double seconds);
// TimeLeft's text after `elapsed` seconds with `fraction_done` of the work done.
std::string time_left_text(double elapsed, double fraction_done);

}  // namespace attncheck::cli
