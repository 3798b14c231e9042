#include "app/folder_lock.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "core/lock_holder.h"
#include "core/log.h"
#include "core/timer.h"

namespace sluice {

namespace fs = std::filesystem;

namespace {

std::string read_all(int fd) {
  std::string s;
  char buf[512];
  if (lseek(fd, 0, SEEK_SET) < 0) return s;
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0 && s.size() < 4096) s.append(buf, static_cast<std::size_t>(n));
  while (!s.empty() && (s.back() == '\n' || s.back() == '\0')) s.pop_back();
  return s;
}

std::string host_name() {
  char name[256] = {0};
  gethostname(name, sizeof name - 1);
  return name;
}

}  // namespace

std::unique_ptr<FolderLock> FolderLock::acquire(const std::string& dir) {
  std::string holder;
  std::unique_ptr<FolderLock> lock = try_acquire(dir, "", &holder);
  if (!lock)
    throw InputError(str("the output folder ", dir, " is in use by another sluice job (", holder,
                         "); wait for it to end, or choose another --output"));
  return lock;
}

std::unique_ptr<FolderLock> FolderLock::try_acquire(const std::string& dir, const std::string& role,
                                                    std::string* holder) {
  const std::string path = dir + "/" + kLockFile;
  bool writable = true;
  int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0 && (errno == EACCES || errno == EROFS) && !role.empty()) {
    // A reader (export) of a folder it may not write: flock needs no write access.
    writable = false;
    fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT) {
      // No lock file and no way to create one: no job could have run here since the folder
      // became read-only, so there is nobody to be guarded against.
      return std::unique_ptr<FolderLock>(new FolderLock(-1));
    }
  }
  if (fd < 0) throw InputError(str("cannot open the lock file ", path, ": ", std::strerror(errno)));
  // The rank 0 of a job killed a moment ago may still hold the lock while the kernel tears it down:
  // wait for such a holder (core/lock_holder.h), not for a live one.
  const auto start = Clock::now();
  bool said = false;
  while (flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK) {
    const LockHolder h = lock_holder(path);
    if (h.found && !h.exiting) break;
    if (seconds_since(start) >= lock_wait_seconds()) break;
    if (!said) log_info("the output folder's lock is still held by ", h.describe(),
                        " (a job stopped a moment ago, on its way out): waiting for it");
    said = true;
    usleep(50000);
  }
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    std::string who = read_all(fd);
    close(fd);  // (also when the file system has no locks: the lock file is then only informative)
    if (err == ENOSYS || err == EOPNOTSUPP || err == ENOLCK) {
      // Some cluster file systems (Lustre mounted without flock) have no locks: run unguarded
      // rather than not at all, and say so.
      log_warn("the file system of ", dir, " offers no file locks (", std::strerror(err),
               "): nothing stops a second job from using this folder at the same time");
      return std::unique_ptr<FolderLock>(new FolderLock(-1));
    }
    if (err != EWOULDBLOCK) throw InputError(str("cannot lock ", path, ": ", std::strerror(err)));
    if (who.empty()) who = "a process that has not written its name yet";
    if (holder) *holder = who;
    return nullptr;
  }
  if (writable) {
    const std::string me = str(role.empty() ? "" : role + ", ", "host ", host_name(), ", pid ", getpid(), ", started ",
                               iso8601(unix_time_now()));
    if (ftruncate(fd, 0) == 0) (void)!pwrite(fd, (me + "\n").data(), me.size() + 1, 0);
  }
  return std::unique_ptr<FolderLock>(new FolderLock(fd));
}

FolderLock::~FolderLock() {
  if (fd_ >= 0) close(fd_);  // releases the lock; the file stays (its content is only informative)
}

std::string set_aside(const std::string& dir, const std::vector<std::string>& names) {
  std::string stamp = iso8601(unix_time_now());
  for (char& c : stamp)
    if (c == ':') c = '-';
  const std::string aside = str(dir, "/", kSetAsidePrefix, stamp, "-", getpid());
  std::error_code ec;
  fs::create_directory(aside, ec);
  if (ec) throw InputError(str("--overwrite: cannot create ", aside, " to move the earlier run into: ", ec.message()));
  for (const std::string& n : names) {
    fs::rename(fs::path(dir) / n, fs::path(aside) / n, ec);
    if (ec) {
      const std::string why = ec.message();
      restore_set_aside(dir, aside);
      throw InputError(str("--overwrite: cannot move ", dir, "/", n, " aside: ", why));
    }
  }
  return aside;
}

void restore_set_aside(const std::string& dir, const std::string& aside) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(aside, ec)) {
    std::error_code ec2;
    const fs::path to = fs::path(dir) / e.path().filename();
    if (fs::exists(to, ec2)) {
      log_warn("the earlier run's ", e.path().filename().string(), " stays in ", aside, ": ", to.string(), " exists");
      continue;
    }
    fs::rename(e.path(), to, ec2);
    if (ec2) log_warn("cannot move ", e.path().string(), " back: ", ec2.message());
  }
  fs::remove(aside, ec);  // only when it is empty
}

std::vector<std::string> list_set_asides(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string n = e.path().filename().string();
    if (n.rfind(kSetAsidePrefix, 0) == 0 && e.is_directory(ec)) out.push_back(e.path().string());
  }
  return out;
}

void remove_set_aside(const std::string& aside) {
  std::error_code ec;
  fs::remove_all(aside, ec);
  if (ec) log_warn("cannot delete the earlier run in ", aside, ": ", ec.message(), " (delete it by hand)");
  else log_info("deleted the earlier run set aside in ", aside);
}

}  // namespace sluice
