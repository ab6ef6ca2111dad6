#pragma once
// An exclusive advisory lock (flock) on a folder, held for one read-merge-write of the files in it: processes
// that write the same results folder take turns, so that none of them writes back a stale copy over points
// another has just added. The lock is on the folder itself (no lock file is left behind) and the kernel
// releases it when its holder dies, so a killed run never leaves the folder locked.

#include <filesystem>

namespace attncheck::records {

class FolderLock {
 public:
  // Waits until no other process holds the lock. Throws records::IoError naming the folder when it cannot
  // be opened or locked.
  explicit FolderLock(const std::filesystem::path& folder);
  ~FolderLock();
  FolderLock(const FolderLock&) = delete;
  FolderLock& operator=(const FolderLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace attncheck::records
