#include "attncheck/records/atomic_file.hpp"

#include "attncheck/records/errors.hpp"
#include "attncheck/records/input_file.hpp"

#include "attncheck/theory/common.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <system_error>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

namespace attncheck::records {

namespace fs = std::filesystem;
using theory::InputError;

fs::path temporary_sibling(const fs::path& path) {
  return fs::path(path).concat(fmt::format(".tmp.{}", static_cast<long>(::getpid())));
}

bool is_temporary_of(const fs::path& candidate, const fs::path& path) {
  const std::string name = candidate.filename().string(), prefix = path.filename().string() + ".tmp.";
  // Exactly what temporary_sibling makes: the prefix and a process id, so that a user's "report.md.tmp.old" is
  // never taken for one.
  return name.size() > prefix.size() && name.compare(0, prefix.size(), prefix) == 0 &&
         name.find_first_not_of("0123456789", prefix.size()) == std::string::npos;
}

void remove_stale_temporaries(const fs::path& path) {
  const fs::path folder = path.parent_path().empty() ? fs::path(".") : path.parent_path();
  std::error_code error;
  std::vector<fs::path> stale;
  for (const auto& entry : fs::directory_iterator(folder, error)) {
    if (is_temporary_of(entry.path(), path)) stale.push_back(entry.path());
  }
  for (const fs::path& file : stale) fs::remove(file, error);
}

void replace_file(const fs::path& from, const fs::path& to) {
  std::error_code error;
  try {
    require_regular_or_absent(to);
  } catch (const InputError&) {
    fs::remove(from, error);
    throw;
  }
  fs::rename(from, to, error);
  if (error) {
    const std::string reason = error.message();  // before removing `from` sets `error` again
    fs::remove(from, error);
    throw IoError(fmt::format("cannot move {} into place as {}: {}", from.string(), to.string(), reason));
  }
}

void write_file_atomically(const fs::path& path, std::string_view content) {
  require_regular_or_absent(path);
  const fs::path temporary = temporary_sibling(path);
  // POSIX I/O rather than streams: the data must reach the disk (fsync) before the rename makes it visible.
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    throw IoError(fmt::format("cannot write {}: {}", temporary.string(), std::strerror(errno)));
  }
  const auto fail = [&](const char* what) {
    const int saved = errno;
    ::close(fd);
    ::unlink(temporary.c_str());
    throw IoError(fmt::format("cannot {} {}: {}", what, temporary.string(), std::strerror(saved)));
  };
  std::size_t written = 0;
  while (written < content.size()) {
    const ssize_t n = ::write(fd, content.data() + written, content.size() - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("write");
    }
    written += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0) fail("flush");
  if (::close(fd) != 0) {
    const int saved = errno;
    ::unlink(temporary.c_str());
    throw IoError(fmt::format("cannot close {}: {}", temporary.string(), std::strerror(saved)));
  }
  replace_file(temporary, path);
}

}  // namespace attncheck::records
