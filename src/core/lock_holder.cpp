#include "core/lock_holder.h"

#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/params.h"

namespace sluice {

namespace {

constexpr unsigned long kPfExiting = 0x4;      // PF_EXITING in /proc/PID/stat's flags field
constexpr unsigned long long kSigkillBit = 1ull << (9 - 1);

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The command name in /proc/PID/stat, "" when the process is gone.
std::string command_of(int64_t pid) {
  const std::string stat = read_file(str("/proc/", pid, "/stat"));
  const std::size_t open = stat.find('('), close = stat.rfind(')');
  if (open == std::string::npos || close == std::string::npos || close < open) return "";
  return stat.substr(open + 1, close - open - 1);
}

bool sigkill_pending(const std::string& status) {
  std::istringstream in(status);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("SigPnd:", 0) != 0 && line.rfind("ShdPnd:", 0) != 0) continue;
    const unsigned long long mask = std::strtoull(line.c_str() + 7, nullptr, 16);
    if (mask & kSigkillBit) return true;
  }
  return false;
}

}  // namespace

std::string LockHolder::describe() const {
  if (!found) return "no process on this host";
  if (pid < 0) return "a process of another host or container";
  const std::string cmd = command_of(pid);
  return str("pid ", pid, cmd.empty() ? "" : " (" + cmd + ")", exiting ? ", exiting" : shared ? ", reading" : "");
}

bool process_exiting(int64_t pid) {
  if (pid <= 0) return false;
  const std::string stat = read_file(str("/proc/", pid, "/stat"));
  const std::size_t close = stat.rfind(')');
  if (close == std::string::npos) return true;  // gone
  std::istringstream fields(stat.substr(close + 1));
  std::string state, skip;
  unsigned long flags = 0;
  fields >> state;
  for (int i = 0; i < 5; ++i) fields >> skip;  // ppid pgrp session tty_nr tpgid
  fields >> flags;
  if (state == "Z" || state == "X" || state == "x" || (flags & kPfExiting)) return true;
  return sigkill_pending(read_file(str("/proc/", pid, "/status")));
}

LockHolder lock_holder(const std::string& path) {
  LockHolder h;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return h;
  std::ostringstream want;
  want << std::hex;
  want.width(2);
  want.fill('0');
  want << major(st.st_dev) << ':';
  want.width(2);
  want << minor(st.st_dev) << ':' << std::dec << st.st_ino;
  std::ifstream in("/proc/locks");
  std::string line;
  while (std::getline(in, line)) {
    // "1: FLOCK  ADVISORY  WRITE 1234 08:01:131234 0 EOF"; "1: -> FLOCK ..." lines are waiters.
    std::istringstream f(line);
    std::string id, kind, mode, access, pid, file;
    f >> id >> kind;
    if (kind == "->") continue;
    f >> mode >> access >> pid >> file;
    if (file != want.str()) continue;
    h.found = true;
    h.pid = std::strtoll(pid.c_str(), nullptr, 10);
    h.shared = access == "READ";
    if (h.pid <= 0) h.pid = -1;
    h.exiting = h.pid > 0 && process_exiting(h.pid);
    return h;
  }
  return h;
}

double lock_wait_seconds() {
  return param_double("SLUICE_LOCK_WAIT_S");   // 120 when unset; a bad value is a usage error
}

}  // namespace sluice
