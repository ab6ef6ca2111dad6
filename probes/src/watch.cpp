#include "attncheck/probes/watch.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
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
  if (error) throw InputError(fmt::format("{}: cannot list the folder: {}", folder.string(), error.message()));
  std::sort(out.begin(), out.end(), [](const fs::path& a, const fs::path& b) {
    const auto sa = step_from_name(a.filename().string()), sb = step_from_name(b.filename().string());
    const std::int64_t ka = sa.value_or(-1), kb = sb.value_or(-1);
    return ka != kb ? ka < kb : a.filename() < b.filename();
  });
  return out;
}

std::string probe_log_line(const HeadMetrics& metrics, const std::string& checkpoint,
                           std::optional<std::int64_t> step, const std::string& activation) {
  nlohmann::json line = to_json(metrics);
  line["checkpoint"] = checkpoint;
  line["step"] = step ? nlohmann::json(*step) : nlohmann::json(nullptr);
  line["activation"] = activation;
  return line.dump() + '\n';
}

std::string checkpoint_lines(const std::string& checkpoint_name, const ProbeResult& result) {
  std::string lines;
  const auto step = step_from_name(checkpoint_name);
  for (const auto& metrics : result.heads) {
    lines += probe_log_line(metrics, checkpoint_name, step, result.config.attention_activation);
  }
  return lines;
}

namespace {

// Size and modification time of a checkpoint (all files of a folder), to tell a finished file from one
// still being written.
struct Fingerprint {
  std::uintmax_t size = 0;
  std::int64_t mtime = 0;
  bool operator==(const Fingerprint&) const = default;
};

Fingerprint fingerprint(const fs::path& path) {
  Fingerprint f;
  std::error_code error;
  const auto add = [&](const fs::path& file) {
    f.size += fs::file_size(file, error);
    f.mtime = std::max<std::int64_t>(f.mtime, fs::last_write_time(file, error).time_since_epoch().count());
  };
  if (fs::is_directory(path, error)) {
    for (const auto& entry : fs::directory_iterator(path, error)) {
      if (entry.is_regular_file(error)) add(entry.path());
    }
  } else {
    add(path);
  }
  return f;
}

std::set<std::string> names_in_log(const fs::path& log) {
  std::set<std::string> names;
  std::ifstream in(log);
  std::string line;
  while (std::getline(in, line)) {
    const auto json = nlohmann::json::parse(line, nullptr, false);
    if (json.is_object() && json.contains("checkpoint") && json["checkpoint"].is_string()) {
      names.insert(json["checkpoint"].get<std::string>());
    }
  }
  return names;
}

}  // namespace

void append_log_lines(const fs::path& log, const std::string& lines) {
  const int fd = ::open(log.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) throw InputError(fmt::format("{}: cannot open for appending: {}", log.string(), std::strerror(errno)));
  std::size_t written = 0;
  while (written < lines.size()) {
    const ssize_t n = ::write(fd, lines.data() + written, lines.size() - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int saved = errno;
      ::close(fd);
      throw InputError(fmt::format("{}: write failed: {}", log.string(), std::strerror(saved)));
    }
    written += static_cast<std::size_t>(n);
  }
  ::close(fd);
}

WatchSummary watch_folder(const WatchOptions& options, const std::atomic<bool>& stop,
                          const std::function<void(const std::string&)>& log) {
  if (!fs::is_directory(options.folder)) {
    throw InputError(fmt::format("{}: not a folder to watch", options.folder.string()));
  }
  WatchSummary summary;
  std::set<std::string> done = names_in_log(options.output);
  std::map<std::string, Fingerprint> seen;      // fingerprint at the previous scan
  std::map<std::string, Fingerprint> refused;   // unreadable, until they change
  using Clock = std::chrono::steady_clock;
  auto last_activity = Clock::now();
  const auto interval = std::chrono::duration<double>(options.interval_seconds);
  while (!stop) {
    for (const auto& path : list_checkpoints(options.folder)) {
      if (stop) break;
      const std::string name = path.filename().string();
      if (done.count(name)) continue;
      const Fingerprint now = fingerprint(path);
      const auto previous = seen.find(name);
      const bool stable = previous != seen.end() && previous->second == now;
      seen[name] = now;
      if (!stable) {
        last_activity = Clock::now();
        continue;
      }
      const auto bad = refused.find(name);
      if (bad != refused.end() && bad->second == now) continue;
      try {
        const ProbeResult result = probe_model(path, options.input, options.layers, options.heads);
        append_log_lines(options.output, checkpoint_lines(name, result));
        done.insert(name);
        ++summary.measured;
        log(fmt::format("probed {} ({} heads)", name, result.heads.size()));
      } catch (const InputError& e) {
        refused[name] = now;
        ++summary.refused;
        log(fmt::format("skipped {}: {}", name, e.what()));
      }
      last_activity = Clock::now();
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
