#pragma once
// One job per output folder at a time, and an earlier run kept until the new one is real.
//
// FolderLock: rank 0 holds an advisory lock (flock) on OUTDIR/.sluice.lock for the job's life and
// writes who holds it (host, pid, start time) into the file, so a second job on the same folder is
// refused with a message naming the first.  The kernel drops the lock when the holder exits, even
// by kill -9, so a stale lock file never blocks a rerun.
//
// Set-aside (--overwrite): the earlier run's files move into OUTDIR/.sluice-old-<time>-<pid>/
// (a rename: instant, and nothing is lost if the new job then fails to start); they are put back
// when set-up fails, and deleted once the new run committed its first chunk.
#include <memory>
#include <string>
#include <vector>

namespace sluice {

class FolderLock {
 public:
  // Throws InputError naming the holder when another process holds the folder.
  static std::unique_ptr<FolderLock> acquire(const std::string& dir);
  // The same without throwing when the folder is busy: nullptr, with `holder` set to what the
  // holder wrote about itself.  `role` goes first into that text ("sluice export"; "" for a job).
  // A folder the caller may only read is locked through an existing lock file opened read-only.
  static std::unique_ptr<FolderLock> try_acquire(const std::string& dir, const std::string& role, std::string* holder);
  ~FolderLock();
  FolderLock(const FolderLock&) = delete;
  FolderLock& operator=(const FolderLock&) = delete;

 private:
  explicit FolderLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

inline constexpr char kLockFile[] = ".sluice.lock";
inline constexpr char kSetAsidePrefix[] = ".sluice-old-";

// Moves `names` (files directly in `dir`) into a new set-aside folder; returns its path.
std::string set_aside(const std::string& dir, const std::vector<std::string>& names);
// Moves everything in `aside` back into `dir` and removes `aside`; logs what it cannot restore.
void restore_set_aside(const std::string& dir, const std::string& aside);
// The set-aside folders in `dir` (earlier --overwrite runs whose replacement never committed).
std::vector<std::string> list_set_asides(const std::string& dir);
// Deletes a set-aside folder and what it holds; logs a failure instead of throwing.
void remove_set_aside(const std::string& aside);

}  // namespace sluice
