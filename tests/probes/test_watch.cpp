#include <catch2/catch.hpp>

#include "attncheck/probes/watch.hpp"
#include "attncheck/records/errors.hpp"
#include "attncheck/records/input_file.hpp"
#include "attncheck/records/probe_record.hpp"
#include "tiny_models.hpp"

#include <atomic>
#include <fstream>
#include <thread>

#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>

using namespace attncheck::probes;
using namespace attncheck::probes::testing;

namespace {
std::vector<nlohmann::json> read_lines(const fs::path& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) out.push_back(nlohmann::json::parse(line));
  return out;
}
}  // namespace

TEST_CASE("steps come from the last number in a checkpoint's name", "[watch]") {
  CHECK(step_from_name("step-000300.safetensors") == 300);
  CHECK(step_from_name("checkpoint-1500") == 1500);
  CHECK(step_from_name("run2-step-40.safetensors") == 40);
  CHECK_FALSE(step_from_name("final.safetensors"));
  CHECK_FALSE(step_from_name("model-99999999999999999999"));
}

TEST_CASE("the watcher measures every complete checkpoint once, in step order, and resumes", "[watch]") {
  TempDir dir;
  const TinyShape shape;  // 2 layers x 2 heads
  write_tiny_gpt2(dir.path / "step-20.safetensors", shape, 7);
  write_tiny_gpt2(dir.path / "step-3.safetensors", shape, 8);
  fs::create_directories(dir.path / "checkpoint-100");
  write_tiny_gpt2(dir.path / "checkpoint-100" / "model.safetensors", shape, 9);
  std::ofstream(dir.path / "step-7.safetensors") << "not a checkpoint";
  std::ofstream(dir.path / "notes.txt") << "ignored";
  const auto listed = list_checkpoints(dir.path);
  REQUIRE(listed.size() == 4);
  CHECK(listed[0].filename() == "step-3.safetensors");
  CHECK(listed[3].filename() == "checkpoint-100");

  WatchOptions options;
  options.folder = dir.path;
  options.output = dir.path / "attncheck-probe.jsonl";
  options.interval_seconds = 0.05;
  options.until_idle_seconds = 0.3;
  options.input.random_length = 5;
  std::atomic<bool> stop{false};
  std::vector<std::string> messages;
  const auto summary = watch_folder(options, stop, [&](const std::string& m) { messages.push_back(m); });
  CHECK(summary.measured == 3);
  CHECK(summary.refused == 1);
  const auto lines = read_lines(options.output);
  REQUIRE(lines.size() == 3 * 4);
  CHECK(lines[0]["checkpoint"] == "step-3.safetensors");
  CHECK(lines[0]["step"] == 3);
  CHECK(lines[11]["checkpoint"] == "checkpoint-100");
  CHECK(lines[11]["step"] == 100);
  for (const auto& line : lines) {
    for (const char* key : {"layer", "head", "N", "softmax_fro", "grad_fro", "dWq_fro", "dWk_fro", "poly3_scaled_fro",
                            "poly3_fro", "relu_n_fro", "activation"}) {
      CHECK(line.contains(key));
    }
    CHECK(line["activation"] == "softmax");
  }
  bool named_bad = false;
  for (const auto& m : messages) named_bad |= m.find("step-7.safetensors") != std::string::npos;
  CHECK(named_bad);

  // A restarted watcher skips what the log already holds.
  const auto again = watch_folder(options, stop, [](const std::string&) {});
  CHECK(again.measured == 0);
  CHECK(read_lines(options.output).size() == 12);
}

TEST_CASE("a checkpoint still being written is measured only once it is complete", "[watch]") {
  TempDir dir;
  write_tiny_gpt2(dir.path / "full.safetensors", {}, 10);
  std::ifstream in(dir.path / "full.safetensors", std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  fs::remove(dir.path / "full.safetensors");
  const fs::path growing = dir.path / "step-1.safetensors";
  std::ofstream(growing, std::ios::binary) << bytes.substr(0, bytes.size() / 2);

  WatchOptions options;
  options.folder = dir.path;
  options.output = dir.path / "log.jsonl";
  options.interval_seconds = 0.05;
  options.until_idle_seconds = 1.5;
  options.input.random_length = 4;
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
    std::ofstream(growing, std::ios::binary | std::ios::app) << bytes.substr(bytes.size() / 2);
  });
  const auto summary = watch_folder(options, stop, [](const std::string&) {});
  writer.join();
  CHECK(summary.measured == 1);
  CHECK(read_lines(options.output).size() == 4);
}

TEST_CASE("stop ends the watch promptly", "[watch]") {
  TempDir dir;
  WatchOptions options;
  options.folder = dir.path;
  options.output = dir.path / "log.jsonl";
  options.interval_seconds = 60;
  std::atomic<bool> stop{false};
  std::thread stopper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    stop = true;
  });
  const auto start = std::chrono::steady_clock::now();
  watch_folder(options, stop, [](const std::string&) {});
  stopper.join();
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
  CHECK_THROWS_WITH(watch_folder({dir.path / "absent", dir.path / "x.jsonl"}, stop, [](const std::string&) {}),
                    Catch::Contains("absent: not a folder"));
}

namespace {
WatchOptions quick_watch(const fs::path& folder, double until_idle = 0.4) {
  WatchOptions options;
  options.folder = folder;
  options.output = folder / "attncheck-probe.jsonl";
  options.interval_seconds = 0.05;
  options.until_idle_seconds = until_idle;
  options.input.random_length = 5;
  return options;
}

// Writes a fresh checkpoint beside `path` and renames it over: a replacement under the same name (new inode).
void replace_checkpoint(const fs::path& path, std::uint64_t seed) {
  const fs::path fresh = path.parent_path() / "replacement" / path.filename();
  write_tiny_gpt2(fresh, {}, seed);
  fs::rename(fresh, path);
  fs::remove_all(fresh.parent_path());
}
}  // namespace

TEST_CASE("a bad checkpoint is skipped with its reason and the watch goes on: the exit code says so", "[watch]") {
  TempDir dir;
  write_tiny_gpt2(dir.path / "step-1.safetensors", {}, 1);
  // Truncated: the header promises more bytes than the file holds.
  write_tiny_gpt2(dir.path / "scratch" / "step-2.safetensors", {}, 2);
  {
    const auto full = fs::file_size(dir.path / "scratch" / "step-2.safetensors");
    fs::copy_file(dir.path / "scratch" / "step-2.safetensors", dir.path / "step-2.safetensors");
    fs::resize_file(dir.path / "step-2.safetensors", full / 2);
  }
  // Non-finite weights: the layer norms' gains in front of attention NaN.
  write_tiny_gpt2(dir.path / "step-3.safetensors", {}, 3, "softmax", std::nan(""));
  // A checkpoint folder whose config.json is a folder.
  write_tiny_gpt2(dir.path / "checkpoint-4" / "model.safetensors", {}, 4);
  fs::remove(dir.path / "checkpoint-4" / "config.json");
  fs::create_directories(dir.path / "checkpoint-4" / "config.json");
  write_tiny_gpt2(dir.path / "step-5.safetensors", {}, 5);

  std::atomic<bool> stop{false};
  std::vector<std::string> messages;
  const auto summary = watch_folder(quick_watch(dir.path), stop, [&](const std::string& m) { messages.push_back(m); });
  CHECK(summary.measured == 2);
  CHECK(summary.refused == 3);
  CHECK(summary.exit_code() == 2);
  const auto said = [&](const std::string& a, const std::string& b) {
    return std::any_of(messages.begin(), messages.end(), [&](const std::string& m) {
      return m.find(a) != std::string::npos && m.find(b) != std::string::npos;
    });
  };
  CHECK(said("skipped step-2.safetensors", "data_offsets"));
  CHECK(said("skipped step-3.safetensors", "is nan"));
  CHECK(said("skipped checkpoint-4", "config.json: is a folder"));
  CHECK(said("probed step-5.safetensors", "heads"));
  const auto lines = read_lines(dir.path / "attncheck-probe.jsonl");
  CHECK(lines.size() == 2 * 4);
  CHECK(lines.back()["checkpoint"] == "step-5.safetensors");
}

TEST_CASE("a checkpoint replaced under its name is measured again, also by a restarted watcher", "[watch]") {
  TempDir dir;
  const fs::path checkpoint = dir.path / "step-10.safetensors";
  write_tiny_gpt2(checkpoint, {}, 21);
  std::atomic<bool> stop{false};
  int probed = 0;
  // The replacement happens inside the watcher's own report of the first measurement: no timing involved.
  const auto summary = watch_folder(quick_watch(dir.path), stop, [&](const std::string& m) {
    if (m.rfind("probed", 0) == 0 && ++probed == 1) replace_checkpoint(checkpoint, 22);
  });
  CHECK(summary.measured == 2);
  auto lines = read_lines(dir.path / "attncheck-probe.jsonl");
  REQUIRE(lines.size() == 2 * 4);
  CHECK(lines[0]["checkpoint_fingerprint"] != lines[4]["checkpoint_fingerprint"]);
  CHECK(lines[0]["softmax_fro"] != lines[4]["softmax_fro"]);  // other weights, other norms

  // Restarted: nothing new while the checkpoint is unchanged ...
  CHECK(watch_folder(quick_watch(dir.path, 0.2), stop, [](const std::string&) {}).measured == 0);
  // ... and a measurement when it was replaced while no watcher ran.
  replace_checkpoint(checkpoint, 23);
  CHECK(watch_folder(quick_watch(dir.path, 0.2), stop, [](const std::string&) {}).measured == 1);
  CHECK(read_lines(dir.path / "attncheck-probe.jsonl").size() == 3 * 4);
}

TEST_CASE("the watch's exit code is the worst that happened", "[watch]") {
  CHECK(WatchSummary{3, 0, 0}.exit_code() == 0);
  CHECK(WatchSummary{3, 0, 1}.exit_code() == 1);
  CHECK(WatchSummary{3, 1, 1}.exit_code() == 2);
  CHECK(WatchSummary{0, 1, 0}.exit_code() == 2);
}

TEST_CASE("an output that is a folder or a FIFO is refused before watching", "[watch]") {
  TempDir dir;
  std::atomic<bool> stop{false};
  WatchOptions options = quick_watch(dir.path, 0);
  options.output = dir.path / "log-folder";
  fs::create_directories(options.output);
  CHECK_THROWS_WITH(watch_folder(options, stop, [](const std::string&) {}), Catch::Contains("log-folder: is a folder"));
  options.output = dir.path / "log.fifo";
  REQUIRE(::mkfifo(options.output.c_str(), 0600) == 0);
  CHECK_THROWS_WITH(watch_folder(options, stop, [](const std::string&) {}), Catch::Contains("log.fifo: is a FIFO"));
}

namespace {
// A 64 KiB tmpfs mounted for one test, so that the disk fills at a known point; none when this process may not
// mount (not root, or a container without the capability).
class SmallDisk {
 public:
  explicit SmallDisk(const fs::path& at) : path_(at) {
    fs::create_directories(at);
    mounted_ = ::geteuid() == 0 && ::mount("tmpfs", at.c_str(), "tmpfs", 0, "size=64k") == 0;
  }
  ~SmallDisk() {
    if (mounted_) ::umount2(path_.c_str(), MNT_DETACH);
  }
  bool mounted() const { return mounted_; }
  // Takes every free byte with a file of its own; removing that file frees them again.
  void fill() const {
    std::ofstream filler(path_ / "filler", std::ios::binary);
    const std::string block(4096, 'x');
    while (filler.write(block.data(), static_cast<std::streamsize>(block.size()))) filler.flush();
  }
  void free() const { fs::remove(path_ / "filler"); }

 private:
  fs::path path_;
  bool mounted_ = false;
};
}  // namespace

TEST_CASE("on a full disk the watch log keeps whole records, and the checkpoint is probed again later", "[watch]") {
  TempDir dir;
  const SmallDisk disk(dir.path / "disk");
  if (!disk.mounted()) {
    WARN("skipped: mounting a 64 KiB tmpfs needs root (and a container that allows it)");
    return;
  }
  const fs::path run = dir.path / "run", log = dir.path / "disk" / "attncheck-probe.jsonl";
  write_tiny_gpt2(run / "step-1.safetensors", {}, 31);
  WatchOptions options = quick_watch(run, 0.2);
  options.output = log;
  std::atomic<bool> stop{false};
  const auto quiet = [](const std::string&) {};
  REQUIRE(watch_folder(options, stop, quiet).measured == 1);
  const std::string before = attncheck::records::read_text_file(log);
  // The next record has room for its start only: the rest of the log's last page (a file system refuses part way).
  REQUIRE(before.size() % 4096 != 0);
  write_tiny_gpt2(run / "step-2.safetensors", {}, 32);
  disk.fill();
  CHECK_THROWS_AS(watch_folder(options, stop, quiet), attncheck::records::IoError);
  CHECK(attncheck::records::read_text_file(log) == before);  // nothing of step 2, no half line to glue onto

  disk.free();
  const auto summary = watch_folder(options, stop, quiet);
  CHECK(summary.measured == 1);
  const auto read = attncheck::records::read_probe_log(log);
  REQUIRE(read.size() == 2 * 4);
  CHECK(read.back().checkpoint == "step-2.safetensors");
}
