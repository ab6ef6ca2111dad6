#include "attncheck/records/folder_lock.hpp"

#include "attncheck/records/errors.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <system_error>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

namespace attncheck::records {

namespace fs = std::filesystem;

FolderLock::FolderLock(const fs::path& folder) {
  fd_ = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd_ < 0)
    throw IoError(fmt::format("{}: cannot open the folder to lock it: {}", folder.string(), std::strerror(errno)));
  while (::flock(fd_, LOCK_EX) != 0) {
    if (errno == EINTR) continue;
    const int saved = errno;
    ::close(fd_);
    throw IoError(fmt::format("{}: cannot lock the folder: {}", folder.string(), std::strerror(saved)));
  }
}

FolderLock::~FolderLock() { ::close(fd_); }  // closing the only descriptor releases the lock

}  // namespace attncheck::records
