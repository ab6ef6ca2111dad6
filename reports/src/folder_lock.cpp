#include "attncheck/reports/folder_lock.hpp"

#include "attncheck/theory/common.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <system_error>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

namespace attncheck::reports {

namespace fs = std::filesystem;
using theory::InputError;

FolderLock::FolderLock(const fs::path& folder) {
  fd_ = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd_ < 0) throw InputError(fmt::format("{}: cannot open the folder to lock it: {}", folder.string(), std::strerror(errno)));
  while (::flock(fd_, LOCK_EX) != 0) {
    if (errno == EINTR) continue;
    const int saved = errno;
    ::close(fd_);
    throw InputError(fmt::format("{}: cannot lock the folder: {}", folder.string(), std::strerror(saved)));
  }
}

FolderLock::~FolderLock() { ::close(fd_); }  // closing the only descriptor releases the lock

}  // namespace attncheck::reports
