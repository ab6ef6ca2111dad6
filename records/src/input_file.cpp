#include "attncheck/records/input_file.hpp"

#include "attncheck/records/errors.hpp"
#include "attncheck/records/memory_budget.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

namespace attncheck::records {

namespace fs = std::filesystem;
using theory::InputError;

namespace {

const char* kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a folder";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

[[noreturn]] void refuse_kind(const fs::path& path, mode_t mode) {
  throw InputError(fmt::format("{}: is {}, where a regular file is expected", path.string(), kind_of(mode)));
}

[[noreturn]] void refuse_errno(const fs::path& path, int error) {
  if (error == ENOENT) throw InputError(fmt::format("{}: no such file", path.string()));
  if (error == EISDIR)
    throw InputError(fmt::format("{}: is a folder, where a regular file is expected", path.string()));
  throw InputError(fmt::format("{}: cannot open: {}", path.string(), std::strerror(error)));
}

FileIdentity identity_of(const struct stat& status) {
  return {static_cast<std::uint64_t>(status.st_size),
          static_cast<std::int64_t>(status.st_mtim.tv_sec) * 1'000'000'000 + status.st_mtim.tv_nsec,
          static_cast<std::uint64_t>(status.st_ino), static_cast<std::uint64_t>(status.st_dev)};
}

// stat first, so that a FIFO or device is not even opened; O_NONBLOCK so that one swapped in between cannot
// block the open; fstat after, so that what was opened is what was checked.
int open_regular(const fs::path& path, int flags, FileIdentity* identity) {
  struct stat before {};
  if (::stat(path.c_str(), &before) == 0) {
    if (!S_ISREG(before.st_mode)) refuse_kind(path, before.st_mode);
  } else if (errno != ENOENT || (flags & O_CREAT) == 0) {
    refuse_errno(path, errno);
  }
  int fd = -1;
  do {
    fd = ::open(path.c_str(), flags | O_NONBLOCK | O_CLOEXEC | O_NOCTTY, 0644);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) refuse_errno(path, errno);
  struct stat status {};
  if (::fstat(fd, &status) != 0 || !S_ISREG(status.st_mode)) {
    const mode_t mode = status.st_mode;
    ::close(fd);
    refuse_kind(path, mode);
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  if (identity) *identity = identity_of(status);
  return fd;
}

}  // namespace

InputFile::InputFile(const fs::path& path) : path_(path) { fd_ = open_regular(path, O_RDONLY, &identity_); }

InputFile::~InputFile() {
  if (fd_ >= 0) ::close(fd_);
}

InputFile::InputFile(InputFile&& other) noexcept
    : path_(std::move(other.path_)), fd_(std::exchange(other.fd_, -1)), identity_(other.identity_) {}

InputFile& InputFile::operator=(InputFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
    identity_ = other.identity_;
  }
  return *this;
}

void InputFile::read_at(std::uint64_t offset, std::span<std::byte> buffer) const {
  std::size_t done = 0;
  while (done < buffer.size()) {
    const ssize_t n = ::pread(fd_, buffer.data() + done, buffer.size() - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      throw IoError(fmt::format("{}: cannot read {} bytes at offset {}: {}", path_.string(), buffer.size(), offset,
                                std::strerror(errno)));
    }
    if (n == 0) {
      struct stat status {};
      const long long now = ::fstat(fd_, &status) == 0 ? static_cast<long long>(status.st_size) : -1;
      throw InputError(
          fmt::format("{}: the file ends at byte {} but bytes {} to {} were to be read (it had {} bytes "
                      "when opened: it was truncated while being read)",
                      path_.string(), now, offset, offset + buffer.size(), identity_.size));
    }
    done += static_cast<std::size_t>(n);
  }
}

void InputFile::for_each_chunk(const std::function<void(std::string_view)>& visit) const {
  char chunk[1 << 16];
  std::uint64_t offset = 0;
  for (;;) {
    const ssize_t n = ::pread(fd_, chunk, sizeof chunk, static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      throw IoError(fmt::format("{}: cannot read: {}", path_.string(), std::strerror(errno)));
    }
    if (n == 0) return;
    offset += static_cast<std::uint64_t>(n);
    visit(std::string_view(chunk, static_cast<std::size_t>(n)));
  }
}

std::string InputFile::read_all() const {
  require_memory(identity_.size, fmt::format("reading {} whole", path_.string()));
  std::string text;
  text.reserve(identity_.size);
  for_each_chunk([&](std::string_view chunk) { text.append(chunk); });
  return text;
}

void InputFile::for_each_line(const std::function<void(std::string_view, std::size_t)>& visit) const {
  std::string pending;
  std::size_t number = 0;
  for_each_chunk([&](std::string_view rest) {
    for (auto end = rest.find('\n'); end != std::string_view::npos; end = rest.find('\n')) {
      pending.append(rest.substr(0, end));
      visit(pending, ++number);
      pending.clear();
      rest.remove_prefix(end + 1);
    }
    if (pending.size() + rest.size() > kMaxLineBytes) {
      throw InputError(fmt::format("{}: line {} runs on for more than {} MiB without a newline", path_.string(),
                                   number + 1, kMaxLineBytes >> 20));
    }
    pending.append(rest);
  });
  if (!pending.empty()) visit(pending, ++number);
}

std::string read_text_file(const fs::path& path) { return InputFile(path).read_all(); }

std::optional<FileIdentity> file_identity(const fs::path& path) {
  struct stat status {};
  if (::stat(path.c_str(), &status) != 0 || !S_ISREG(status.st_mode)) return std::nullopt;
  return identity_of(status);
}

namespace {

// Closes `fd` when the append ends, however it ends (the lock goes with it).
struct Descriptor {
  int fd;
  ~Descriptor() { ::close(fd); }
};

// The bytes after the last newline of a file of `size` bytes: "" when it ends in one. A longer tail than any
// record is reported as such (its text is not needed: only a record's tail is ever cut).
std::optional<std::string> unfinished_tail(int fd, std::uint64_t size, const fs::path& path) {
  constexpr std::uint64_t kLongestRecord = std::uint64_t{1} << 20;
  const std::uint64_t length = std::min(size, kLongestRecord + 1);
  std::string tail(length, '\0');
  std::size_t done = 0;
  while (done < length) {
    const ssize_t n = ::pread(fd, tail.data() + done, length - done, static_cast<off_t>(size - length + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw IoError(fmt::format("{}: cannot read its end: {}", path.string(), std::strerror(errno)));
    done += static_cast<std::size_t>(n);
  }
  const auto newline = tail.rfind('\n');
  if (newline == std::string::npos && size > kLongestRecord) return std::nullopt;
  return newline == std::string::npos ? tail : tail.substr(newline + 1);
}

}  // namespace

void append_to_file(const fs::path& path, std::string_view text) {
  // Read and write: the end of the file is read to find a record cut short.
  const Descriptor file{open_regular(path, O_RDWR | O_APPEND | O_CREAT, nullptr)};
  const auto refuse = [&](const char* what) {
    throw IoError(fmt::format("{}: cannot append: {}: {}", path.string(), what, std::strerror(errno)));
  };
  // Appenders take turns, so that the size read here is where this append starts, and cutting a failed append
  // back never cuts another's.
  while (::flock(file.fd, LOCK_EX) != 0) {
    if (errno != EINTR) refuse("cannot lock it");
  }
  struct stat status {};
  if (::fstat(file.fd, &status) != 0) refuse("cannot read its size");
  auto start = static_cast<std::uint64_t>(status.st_size);
  // A last line without its newline is a record whose writer was killed mid-append: cut off when it is not whole
  // JSON, so that this append does not glue onto it; ended with a newline when it is (a line written by hand).
  std::string whole(text);
  if (start > 0) {
    const std::optional<std::string> tail = unfinished_tail(file.fd, start, path);
    if (!tail || (!tail->empty() && nlohmann::json::accept(*tail))) {
      whole.insert(0, "\n");
    } else if (!tail->empty()) {
      start -= tail->size();
      if (::ftruncate(file.fd, static_cast<off_t>(start)) != 0) refuse("cannot cut off an unfinished last line");
    }
  }
  // Whole or absent: a write the disk refuses part way (full, quota) is cut back to where it began, so the log
  // never holds half a record for the next append to glue onto.
  std::size_t written = 0;
  while (written < whole.size()) {
    const ssize_t n = ::write(file.fd, whole.data() + written, whole.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int saved = n < 0 ? errno : ENOSPC;
      const bool cut = ::ftruncate(file.fd, static_cast<off_t>(start)) == 0;
      throw IoError(fmt::format("{}: cannot append {} bytes: {}; {}", path.string(), whole.size(), std::strerror(saved),
                                cut ? "nothing was appended" : "the part written could not be removed"));
    }
    written += static_cast<std::size_t>(n);
  }
}

void require_regular_or_absent(const fs::path& path) {
  struct stat status {};
  if (::stat(path.c_str(), &status) == 0 && !S_ISREG(status.st_mode)) refuse_kind(path, status.st_mode);
}

void require_appendable_file(const fs::path& path) {
  ::close(open_regular(path, O_WRONLY | O_APPEND | O_CREAT, nullptr));
}

}  // namespace attncheck::records
