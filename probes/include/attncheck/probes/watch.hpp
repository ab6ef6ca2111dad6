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
  std::filesystem::path output;  // the JSON-lines log
  double interval_seconds = 5;
  double until_idle_seconds = -1;  // < 0: until stopped
  ProbeInput input;
  std::vector<int> layers, heads;
  ProbeProgress progress;  // passed to probe_model for each checkpoint
  int threads = 1;         // the threads probe_model measures each checkpoint's heads on (0: every core)
};

struct WatchSummary {
  int measured = 0;  // measurements logged (a checkpoint replaced under its name counts again)
  int refused = 0;   // complete but unusable checkpoints (reported once each, retried if they change)
  int exceeded = 0;  // measured checkpoints with a head above Theorem 4.1's bounds
  // How the watch ends: 2 when a checkpoint was refused, else 1 when a bound was exceeded, else 0.
  int exit_code() const { return refused > 0 ? 2 : exceeded > 0 ? 1 : 0; }
};

// The training step in a checkpoint's name: the last run of digits ("step-000300.safetensors" -> 300,
// "checkpoint-1500" -> 1500), none when the name has no digits.
std::optional<std::int64_t> step_from_name(const std::string& name);

// The checkpoints in `folder`: *.safetensors files and sub-folders holding model.safetensors or a sharded
// index, ordered by step, then name.
std::vector<std::filesystem::path> list_checkpoints(const std::filesystem::path& folder);

// The log's record of a head's metrics with the checkpoint's name, its training step (none when unknown) and
// the activation the model was trained with; probe_log_line is its line, ending in '\n'.
records::ProbeRecord probe_record(const HeadMetrics& metrics, const std::string& checkpoint,
                                  std::optional<std::int64_t> step, const std::string& activation);
std::string probe_log_line(const HeadMetrics& metrics, const std::string& checkpoint, std::optional<std::int64_t> step,
                           const std::string& activation);

// The JSON lines of one probed checkpoint, each a whole line ending in '\n'. `fingerprint` (size, modification
// time and inodes of its files) lets a restarted watcher see that a checkpoint was replaced under its name.
std::string checkpoint_lines(const std::string& checkpoint_name, const ProbeResult& result,
                             const std::string& fingerprint = "");

// That fingerprint of a checkpoint file or folder now.
std::string checkpoint_fingerprint(const std::filesystem::path& checkpoint);

// Scans until `stop` becomes true or the folder has been idle for until_idle_seconds. A checkpoint is
// measured once its fingerprint is unchanged across two scans, and measured again when it is replaced under
// the same name; checkpoints already in the log with their current fingerprint are skipped, so a restarted
// watcher resumes. A checkpoint that cannot be measured (truncated, unreadable, a folder where config.json
// should be, non-finite weights, too large) is skipped with its reason and the watch goes on. `log` receives
// progress messages. An output that is not a writable regular file is an InputError before anything is done.
WatchSummary watch_folder(const WatchOptions& options, const std::atomic<bool>& stop,
                          const std::function<void(const std::string&)>& log);

}  // namespace attncheck::probes
