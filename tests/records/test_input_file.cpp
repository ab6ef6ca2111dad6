#include <catch2/catch.hpp>

#include "attncheck/records/input_file.hpp"
#include "attncheck/theory/common.hpp"

#include "records/fixtures.hpp"
#include "records/memory_limit.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <vector>

using namespace attncheck::records;
using attncheck::records::testing::TempDir;
using attncheck::records::testing::write_text;
using attncheck::theory::InputError;
namespace fs = std::filesystem;

TEST_CASE("a regular file is read whole, by offset and by line", "[input-file]") {
  TempDir dir;
  // One line longer than the 64 KiB read chunk, so that a line is assembled across chunks.
  const std::string long_line(70000, 'x');
  const std::string text = "first\n" + long_line + "\n\nlast without newline";
  write_text(dir.path() / "a.txt", text);
  const InputFile file(dir.path() / "a.txt");
  CHECK(file.size() == text.size());
  CHECK(file.read_all() == text);
  std::string middle(5, '\0');
  file.read_at(1, std::as_writable_bytes(std::span(middle)));
  CHECK(middle == "irst\n");
  std::vector<std::pair<std::string, std::size_t>> lines;
  file.for_each_line([&](std::string_view line, std::size_t number) { lines.emplace_back(line, number); });
  REQUIRE(lines.size() == 4);
  CHECK(lines[0] == std::make_pair(std::string("first"), std::size_t{1}));
  CHECK(lines[1].first == long_line);
  CHECK(lines[2].first.empty());
  CHECK(lines[3] == std::make_pair(std::string("last without newline"), std::size_t{4}));
  CHECK(read_text_file(dir.path() / "a.txt") == text);
}

TEST_CASE("a folder, a device or a missing file is refused naming the path", "[input-file][errors]") {
  TempDir dir;
  fs::create_directories(dir.path() / "config.json");
  CHECK_THROWS_WITH(InputFile(dir.path() / "config.json"),
                    Catch::Contains((dir.path() / "config.json").string() + ": is a folder"));
  CHECK_THROWS_WITH(InputFile("/dev/zero"), Catch::Contains("/dev/zero: is a character device"));
  CHECK_THROWS_WITH(read_text_file(dir.path() / "absent.txt"), Catch::Contains("absent.txt: no such file"));
  CHECK_THROWS_AS(append_to_file(dir.path() / "config.json", "x\n"), InputError);
  CHECK_THROWS_WITH(require_appendable_file("/dev/null"), Catch::Contains("/dev/null: is a character device"));
}

TEST_CASE("a FIFO is refused at once, not waited on for a writer", "[input-file][errors]") {
  TempDir dir;
  const fs::path fifo = dir.path() / "points.jsonl";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  for (const bool appending : {false, true}) {
    // A blocking open would wait for the other end forever; run it aside and give it ample time.
    auto attempt = std::async(std::launch::async, [&] {
      try {
        if (appending)
          append_to_file(fifo, "line\n");
        else
          InputFile{fifo};
        return std::string("accepted");
      } catch (const InputError& e) {
        return std::string(e.what());
      }
    });
    if (attempt.wait_for(std::chrono::seconds(20)) != std::future_status::ready) {
      // Release the blocked open (it waits for the other end), then fail.
      const int other = ::open(fifo.c_str(), (appending ? O_RDONLY : O_WRONLY) | O_NONBLOCK);
      attempt.wait();
      if (other >= 0) ::close(other);
      FAIL("opening a FIFO blocked");
    }
    const std::string message = attempt.get();
    INFO(message);
    CHECK(message.find(fifo.string() + ": is a FIFO") != std::string::npos);
  }
}

TEST_CASE("a file truncated after it was opened reads as an error naming it, not a crash", "[input-file][errors]") {
  TempDir dir;
  const fs::path path = dir.path() / "weights.bin";
  write_text(path, std::string(4096, 'w'));
  const InputFile file(path);
  REQUIRE(::truncate(path.c_str(), 100) == 0);
  std::vector<std::byte> buffer(64);
  file.read_at(0, buffer);  // still there
  CHECK_THROWS_WITH(file.read_at(2000, buffer), Catch::Contains(path.string()) && Catch::Contains("truncated") &&
                                                    Catch::Contains("ends at byte 100"));
}

TEST_CASE("a file replaced under its name has a new identity: appends add whole lines", "[input-file]") {
  TempDir dir;
  const fs::path path = dir.path() / "step-1.safetensors";
  write_text(path, "abc");
  const auto before = file_identity(path);
  REQUIRE(before);
  CHECK(before->size == 3);
  write_text(dir.path() / "replacement", "abc");
  fs::rename(dir.path() / "replacement", path);
  const auto after = file_identity(path);
  REQUIRE(after);
  CHECK(after->size == before->size);
  CHECK(after->inode != before->inode);
  CHECK_FALSE(file_identity(dir.path() / "absent"));
  CHECK_FALSE(file_identity(dir.path()));

  append_to_file(dir.path() / "log.jsonl", "one\n");
  append_to_file(dir.path() / "log.jsonl", "two\n");
  CHECK(read_text_file(dir.path() / "log.jsonl") == "one\ntwo\n");
}

TEST_CASE("an append never glues onto a last line a killed writer left without its newline") {
  const TempDir dir;
  const fs::path log = dir.path() / "log.jsonl";
  // Cut short mid-record: removed, so that the next record starts its own line.
  write_text(log, "{\"a\": 1}\n{\"b\": [1, 2");
  append_to_file(log, "{\"c\": 3}\n");
  CHECK(read_text_file(log) == "{\"a\": 1}\n{\"c\": 3}\n");
  // Whole JSON without a newline (written by hand): kept, and ended.
  write_text(log, "{\"a\": 1}\n{\"b\": 2}");
  append_to_file(log, "{\"c\": 3}\n");
  CHECK(read_text_file(log) == "{\"a\": 1}\n{\"b\": 2}\n{\"c\": 3}\n");
  // Text longer than any record without a newline is not attncheck's: kept, and ended.
  const std::string foreign(std::size_t{3} << 20, 'x');
  write_text(log, foreign);
  append_to_file(log, "{\"c\": 3}\n");
  CHECK(read_text_file(log) == foreign + "\n{\"c\": 3}\n");
}

TEST_CASE("what a file's content sizes is checked against the memory budget before it is allocated",
          "[records][hostile]") {
  if (!attncheck::testing::kAddressLimitsWork) {
    WARN("skipped under AddressSanitizer, which cannot run under an address-space limit");
    return;
  }
  const TempDir dir;
  const fs::path big = dir.path() / "big.json";
  write_text(big, std::string(std::size_t{48} << 20, ' '));
  // With 32 MiB of room, a 48 MiB file is refused by name, not read into a bad_alloc.
  const std::string outcome =
      attncheck::testing::outcome_with_memory_room(32 << 20, [&] { (void)read_text_file(big); });
  CHECK_THAT(outcome, Catch::StartsWith("InputError: reading " + big.string() + " whole needs"));
  CHECK(attncheck::testing::outcome_with_memory_room(256 << 20, [&] { (void)read_text_file(big); }) == "ok");
}
