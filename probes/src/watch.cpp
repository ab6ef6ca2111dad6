#include "attncheck/probes/watch.hpp"

#include "attncheck/records/errors.hpp"
#include "attncheck/records/input_file.hpp"
#include "attncheck/records/json_input.hpp"
#include "attncheck/records/probe_record.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <map>
#include <thread>

namespace attncheck::probes {

namespace fs = std::filesystem;

std::optional<std::int64_t> step_from_name(const std::string& name) {
  std::string stem = name;
  if (stem.size() > 12 && stem.ends_with(".safetensors")) stem.resize(stem.size() - 12);
  const auto last_digit = stem.find_last_of("0123456789");
  if (last_digit == std::string::npos) return std::nullopt;
  auto first_digit = last_digit;
  while (first_digit > 0 && std::isdigit(static_cast<unsigned char>(stem[first_digit - 1]))) --first_digit;
  const std::string digits = stem.substr(first_digit, last_digit - first_digit + 1);
  if (digits.size() > 18) return std::nullopt;  // not a step count; would overflow
  return std::stoll(digits);
}

std::vector<fs::path> list_checkpoints(const fs::path& folder) {
  std::vector<fs::path> out;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(folder, error)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name[0] == '.') continue;
    if (entry.is_regular_file(error) && name.ends_with(".safetensors")) {
      out.push_back(entry.path());
    } else if (entry.is_directory(error) && (fs::exists(entry.path() / "model.safetensors") ||
                                             fs::exists(entry.path() / "model.safetensors.index.json"))) {
      out.push_back(entry.path());
    }
  }
  if (error) throw records::IoError(fmt::format("{}: cannot list the folder: {}", folder.string(), error.message()));
  std::sort(out.begin(), out.end(), [](const fs::path& a, const fs::path& b) {
    const auto sa = step_from_name(a.filename().string()), sb = step_from_name(b.filename().string());
    const std::int64_t ka = sa.value_or(-1), kb = sb.value_or(-1);
    return ka != kb ? ka < kb : a.filename() < b.filename();
  });
  return out;
}

records::ProbeRecord probe_record(const HeadMetrics& metrics, const std::string& checkpoint,
                                  std::optional<std::int64_t> step, const std::string& activation) {
  records::ProbeRecord record;
  record.checkpoint = checkpoint;
  record.step = step;
  record.activation = activation;
  record.metrics = head_record(metrics);
  return record;
}

std::string probe_log_line(const HeadMetrics& metrics, const std::string& checkpoint, std::optional<std::int64_t> step,
                           const std::string& activation) {
  return records::probe_log_line(probe_record(metrics, checkpoint, step, activation));
}

std::string checkpoint_lines(const std::string& checkpoint_name, const ProbeResult& result,
                             const std::string& fingerprint) {
  std::string lines;
  const auto step = step_from_name(checkpoint_name);
  for (const auto& metrics : result.heads) {
    records::ProbeRecord record = probe_record(metrics, checkpoint_name, step, result.config.attention_activation);
    if (!fingerprint.empty()) record.fingerprint = fingerprint;
    lines += records::probe_log_line(record);
  }
  return lines;
}

std::string checkpoint_fingerprint(const fs::path& path) {
  std::uint64_t size = 0, inodes = 0xcbf29ce484222325ULL;
  std::int64_t mtime = 0;
  const auto add = [&](const fs::path& file) {
    const auto identity = records::file_identity(file);
    if (!identity) return;
    size += identity->size;
    mtime = std::max(mtime, identity->mtime_ns);
    // FNV-1a over the inodes (in directory order, which is stable for an unchanged folder).
    for (std::uint64_t part : {identity->device, identity->inode}) {
      inodes = (inodes ^ part) * 0x100000001b3ULL;
    }
  };
  std::error_code error;
  if (fs::is_directory(path, error)) {
    std::vector<fs::path> files;
    for (const auto& entry : fs::directory_iterator(path, error)) files.push_back(entry.path());
    std::sort(files.begin(), files.end());
    for (const auto& file : files) add(file);
  } else {
    add(path);
  }
  return fmt::format("{}:{}:{:016x}", size, mtime, inodes);
}

namespace {

// Checkpoint name -> fingerprint of its last lines in the log ("" for lines written without one).
std::map<std::string, std::string> measured_in_log(const fs::path& log) {
  std::map<std::string, std::string> names;
  records::InputFile(log).for_each_line([&](std::string_view line, std::size_t number) {
    // A line this watcher cannot read (cut short by a crash, or edited) only means that checkpoint is probed again.
    try {
      const std::string where = fmt::format("{} line {}", log.string(), number);
      const auto json = records::parse_json(line, where, records::JsonPlacement::column);
      if (!json.is_object()) return;
      const records::ProbeRecord record = records::probe_record_from_json(json, where);
      names[record.checkpoint] = record.fingerprint.value_or("");
    } catch (const theory::InputError&) {
    }
  });
  return names;
}

}  // namespace

WatchSummary watch_folder(const WatchOptions& options, const std::atomic<bool>& stop,
                          const std::function<void(const std::string&)>& log) {
  std::error_code error;
  if (!fs::is_directory(options.folder, error)) {
    throw InputError(fmt::format("{}: not a folder to watch", options.folder.string()));
  }
  WatchSummary summary;
  records::require_appendable_file(options.output);
  // Logged with a fingerprint: measured again when it changes; logged without one (older logs): done.
  std::map<std::string, std::string> done = measured_in_log(options.output);
  std::map<std::string, std::string> seen;     // fingerprint at the previous scan
  std::map<std::string, std::string> refused;  // unusable, until they change
  using Clock = std::chrono::steady_clock;
  auto last_activity = Clock::now();
  const auto interval = std::chrono::duration<double>(options.interval_seconds);
  std::string listing_problem;
  while (!stop) {
    std::vector<fs::path> checkpoints;
    try {
      checkpoints = list_checkpoints(options.folder);
      listing_problem.clear();
    } catch (const std::exception& e) {
      // The folder may come back (a remount, a sync); say so once and keep scanning.
      if (listing_problem != e.what()) log(fmt::format("cannot list {}: {}", options.folder.string(), e.what()));
      listing_problem = e.what();
    }
    for (const auto& path : checkpoints) {
      if (stop) break;
      const std::string name = path.filename().string();
      const std::string now = checkpoint_fingerprint(path);
      const auto logged = done.find(name);
      if (logged != done.end() && (logged->second.empty() || logged->second == now)) continue;
      const auto previous = seen.find(name);
      const bool stable = previous != seen.end() && previous->second == now;
      seen[name] = now;
      if (!stable) {
        last_activity = Clock::now();
        continue;
      }
      const auto bad = refused.find(name);
      if (bad != refused.end() && bad->second == now) continue;
      last_activity = Clock::now();
      std::string lines;
      bool within = true;
      try {
        const ProbeResult result = probe_model(path, options.input, options.layers, options.heads, false, false,
                                               options.progress, options.threads);
        for (const HeadMetrics& m : result.heads) within = within && within_theorem_bounds(m);
        lines = checkpoint_lines(name, result, now);
        log(fmt::format("{} {} ({} heads){}", logged != done.end() ? "probed again (replaced)" : "probed", name,
                        result.heads.size(), within ? "" : ": a softmax bound of Theorem 4.1 is EXCEEDED"));
      } catch (const std::exception& e) {
        // One bad checkpoint must not end a watch that runs for a whole training: report it, go on.
        refused[name] = now;
        ++summary.refused;
        log(fmt::format("skipped {}: {}", name, e.what()));
        continue;
      }
      // One O_APPEND write of whole lines: a reader never sees half a checkpoint. A log that cannot be
      // written ends the watch (exit 2): measuring on without recording would lose every result.
      records::append_to_file(options.output, lines);
      done[name] = now;
      ++summary.measured;
      if (!within) ++summary.exceeded;
    }
    if (options.until_idle_seconds >= 0 &&
        Clock::now() - last_activity >= std::chrono::duration<double>(options.until_idle_seconds)) {
      break;
    }
    // Sleep in short slices so that Ctrl-C is answered promptly.
    const auto wake = Clock::now() + std::chrono::duration_cast<Clock::duration>(interval);
    while (!stop && Clock::now() < wake) {
      std::this_thread::sleep_for(std::min<Clock::duration>(wake - Clock::now(), std::chrono::milliseconds(50)));
    }
  }
  return summary;
}

}  // namespace attncheck::probes
