#pragma once
// Watching a training run's output folder: every checkpoint already there and each new one, once complete,
// is probed and appended as JSON lines (one per layer and head) to a log that reports plot over steps.

#include "attncheck/probes/live_metrics.hpp"

#include <atomic>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace attncheck::probes {

struct WatchOptions {
  std::filesystem::path folder;
  std::filesystem::path output;        // the JSON-lines log
  double interval_seconds = 5;
  double until_idle_seconds = -1;      // < 0: until stopped
  ProbeInput input;
  std::vector<int> layers, heads;
};

struct WatchSummary {
  int measured = 0;
  int refused = 0;  // complete but unreadable checkpoints (reported once each, retried if they change)
};

// The training step in a checkpoint's name: the last run of digits ("step-000300.safetensors" -> 300,
// "checkpoint-1500" -> 1500), none when the name has no digits.
std::optional<std::int64_t> step_from_name(const std::string& name);

// The checkpoints in `folder`: *.safetensors files and sub-folders holding model.safetensors or a sharded
// index, ordered by step, then name.
std::vector<std::filesystem::path> list_checkpoints(const std::filesystem::path& folder);

// One line of the log, ending in '\n': a head's metrics with the checkpoint's name, its training step (null
// when unknown) and the activation the model was trained with.
std::string probe_log_line(const HeadMetrics& metrics, const std::string& checkpoint,
                           std::optional<std::int64_t> step, const std::string& activation);

// The JSON lines of one probed checkpoint, each a whole line ending in '\n'.
std::string checkpoint_lines(const std::string& checkpoint_name, const ProbeResult& result);

// Appends whole lines to the log in one write with O_APPEND, so a reader never sees half of them; creates it.
void append_log_lines(const std::filesystem::path& log, const std::string& lines);

// Scans until `stop` becomes true or the folder has been idle for until_idle_seconds. A checkpoint is
// measured once its size and modification time are unchanged across two scans and it reads without error;
// names already in the log are skipped, so a restarted watcher resumes. `log` receives progress messages.
WatchSummary watch_folder(const WatchOptions& options, const std::atomic<bool>& stop,
                          const std::function<void(const std::string&)>& log);

}  // namespace attncheck::probes
