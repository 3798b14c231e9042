#pragma once
// Who holds a file lock, and whether that process is on its way out.
//
// A rank killed with kill -9 keeps its locks (HDF5's on its rank file, rank 0's on the folder) until
// the kernel has torn the whole process down: its memory first, then its files.  On a busy machine
// that takes a moment, and a resume started right after the launcher returned can find the locks
// still held.  Such a lock is waited for; a lock held by a live process is not (it may be a job
// still writing), so the caller refuses at once and names the holder.  A shared lock is a reader's
// (h5py, h5dump, sluice inspect looking at the folder): readers come and go, so it is waited for too.
#include <cstdint>
#include <string>

namespace sluice {

struct LockHolder {
  bool found = false;      // /proc/locks names a lock on the file
  int64_t pid = -1;        // the process that took it (-1: a lock of another host or pid namespace)
  bool exiting = false;    // that process is gone, a zombie, exiting, or has SIGKILL pending
  bool shared = false;     // a read (shared) lock: a reader such as h5py or sluice inspect
  std::string describe() const;   // "pid 1234 (sluice, exiting)"
};

// The holder of a lock (flock or POSIX) on `path`, from /proc/locks on this host; found = false when
// nothing on this host holds one (a lock held on another node of a shared file system is invisible).
LockHolder lock_holder(const std::string& path);

// True when `pid` no longer runs user code: it does not exist, is a zombie, is exiting, or has
// SIGKILL pending.
bool process_exiting(int64_t pid);

// How long to wait for the lock of an exiting process before giving up: SLUICE_LOCK_WAIT_S
// (seconds, default 120).
double lock_wait_seconds();

}  // namespace sluice
