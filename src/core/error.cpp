#include "core/error.h"

#include <atomic>

namespace sluice {

namespace {
std::atomic<int> g_rank{-1};
thread_local int t_device = -1;
}  // namespace

void set_error_rank(int rank) { g_rank = rank; }
void set_thread_device(int device) { t_device = device; }
int thread_device() { return t_device; }

std::string format_failure(const char* call, const char* file, int line, const std::string& detail) {
  std::ostringstream os;
  os << call << " failed at " << file << ":" << line;
  const int rank = g_rank.load();
  if (rank >= 0 || t_device >= 0) {
    os << " [";
    if (rank >= 0) os << "rank " << rank;
    if (rank >= 0 && t_device >= 0) os << ", ";
    if (t_device >= 0) os << "device " << t_device;
    os << "]";
  }
  if (!detail.empty()) os << ": " << detail;
  return os.str();
}

}  // namespace sluice
