#pragma once
// The progress line of every long command (mc's sweep, probe's heads): rewritten in place on a terminal's
// stderr, nothing when stderr is a file or a pipe, so that logs and captured output stay clean.

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

}  // namespace attncheck::cli
