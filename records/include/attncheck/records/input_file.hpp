#pragma once
// Every file attncheck reads (checkpoints, config.json, vocab.txt, token files, matrices, results folders,
// probe logs) is opened here, and every log it appends to. Opening never blocks and never reads what is not a
// regular file: a FIFO, a device or a folder where a file is expected is refused at once, naming the path.
// Reads go through pread into the caller's buffer with the byte count checked, not through a memory mapping:
// a mapped page that truncation cuts off raises SIGBUS, and surviving that takes a process-wide signal handler
// and a siglongjmp out of whatever was reading (destructors skipped, OpenMP threads, Eigen kernels), while a
// short pread is an ordinary return value that becomes an InputError naming the file. The price is one copy
// of the bytes through a bounded buffer; checkpoint weights are converted to doubles anyway.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace attncheck::records {

// What identifies a file's content on disk for a watcher: size, modification time and inode (a file replaced
// under the same name gets a new inode even when size and time agree).
struct FileIdentity {
  std::uint64_t size = 0;
  std::int64_t mtime_ns = 0;
  std::uint64_t inode = 0;
  std::uint64_t device = 0;
  bool operator==(const FileIdentity&) const = default;
};

// An open regular file. Throws theory::InputError naming the path when it is missing, unreadable or not a
// regular file.
class InputFile {
 public:
  explicit InputFile(const std::filesystem::path& path);
  ~InputFile();
  InputFile(InputFile&& other) noexcept;
  InputFile& operator=(InputFile&& other) noexcept;
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  const std::filesystem::path& path() const { return path_; }
  // Size and identity when it was opened.
  std::uint64_t size() const { return identity_.size; }
  const FileIdentity& identity() const { return identity_; }

  // Fills `buffer` with the bytes at `offset`. A file now shorter than offset + buffer.size() (truncated since
  // it was opened) is an InputError naming it and the sizes.
  void read_at(std::uint64_t offset, std::span<std::byte> buffer) const;
  // Everything from the start to the end of the file as it is now; a file larger than the memory budget
  // (records/memory_budget.hpp) is an InputError naming it, before anything is allocated.
  std::string read_all() const;
  // Calls visit(line, number) for every line (1-based numbers, without the '\n'), reading in chunks so that
  // a large file is never held whole. A line longer than kMaxLineBytes is an InputError naming the file and line.
  static constexpr std::size_t kMaxLineBytes = std::size_t{64} << 20;
  void for_each_line(const std::function<void(std::string_view line, std::size_t number)>& visit) const;
  // Calls visit(bytes) for the file's content from the start to its end now, 64 KiB at a time.
  void for_each_chunk(const std::function<void(std::string_view)>& visit) const;

 private:
  std::filesystem::path path_;
  int fd_ = -1;
  FileIdentity identity_;
};

// The whole file as text; InputError naming it when it cannot be read or is not a regular file.
std::string read_text_file(const std::filesystem::path& path);

// The identity of the regular file at `path` now; none when it is absent or not a regular file.
std::optional<FileIdentity> file_identity(const std::filesystem::path& path);

// Appends `text` (whole lines) to `path` (created when absent) under an exclusive lock, with O_APPEND writes, so
// that concurrent readers see whole lines. The append is whole or absent: a write the file system refuses part way
// (a full disk) is cut back and is an IoError saying nothing was appended. A last line left without its newline
// by a killed writer is cut off first (it is ended with a newline instead when it is whole JSON). A folder, FIFO
// or device at `path` is an InputError naming it.
void append_to_file(const std::filesystem::path& path, std::string_view text);

// Refuses (InputError naming it) a `path` that exists and is not a regular file: a writer that replaces its
// target by rename would otherwise put a file in place of a device, a FIFO or, as root, /dev/null itself.
void require_regular_or_absent(const std::filesystem::path& path);

// Creates `path` when absent and refuses anything but a writable regular file, so that a long-running writer
// fails at its start rather than after hours of work.
void require_appendable_file(const std::filesystem::path& path);

}  // namespace attncheck::records
