#include "attncheck/records/input_file.hpp"

#include "attncheck/records/errors.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include <fcntl.h>
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

void append_to_file(const fs::path& path, std::string_view text) {
  const int fd = open_regular(path, O_WRONLY | O_APPEND | O_CREAT, nullptr);
  std::size_t written = 0;
  while (written < text.size()) {
    const ssize_t n = ::write(fd, text.data() + written, text.size() - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int saved = errno;
      ::close(fd);
      throw IoError(fmt::format("{}: cannot append: {}", path.string(), std::strerror(saved)));
    }
    written += static_cast<std::size_t>(n);
  }
  if (::close(fd) != 0) throw IoError(fmt::format("{}: cannot append: {}", path.string(), std::strerror(errno)));
}

void require_regular_or_absent(const fs::path& path) {
  struct stat status {};
  if (::stat(path.c_str(), &status) == 0 && !S_ISREG(status.st_mode)) refuse_kind(path, status.st_mode);
}

void require_appendable_file(const fs::path& path) {
  ::close(open_regular(path, O_WRONLY | O_APPEND | O_CREAT, nullptr));
}

}  // namespace attncheck::records
