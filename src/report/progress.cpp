#include "report/progress.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>

namespace sluice {

std::string format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  const long t = static_cast<long>(s + 0.5);
  char buf[32];
  if (t >= 3600)
    std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", t / 3600, (t / 60) % 60, t % 60);
  else
    std::snprintf(buf, sizeof buf, "%ld:%02ld", t / 60, t % 60);
  return buf;
}

Progress::Progress(const WorkDistributor& work, int64_t committed_before, int64_t total, double interval_s)
    : work_(work), before_(committed_before), total_(total), interval_(interval_s),
      tty_(isatty(STDERR_FILENO) != 0), t0_(Clock::now()) {
  thread_ = WorkerThread("progress", [this] { loop(); });
}

Progress::~Progress() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    done_ = true;
  }
  cv_.notify_all();
  thread_.join_noexcept();
  print(true);
}

void Progress::loop() {
  const double period = tty_ ? 0.5 : interval_;
  std::unique_lock<std::mutex> lock(mutex_);
  while (!cv_.wait_for(lock, std::chrono::duration<double>(period), [this] { return done_; })) print(false);
}

void Progress::print(bool final_line) {
  const int64_t now = work_.job_committed();
  const int64_t done = before_ + now;
  const double t = seconds_since(t0_);
  const double rate = t > 0 ? static_cast<double>(now) / t : 0;
  const int64_t left = work_.job_pending() - now;
  const double eta = rate > 0 ? static_cast<double>(left) / rate : NAN;
  char line[200];
  std::snprintf(line, sizeof line, "progress: %lld/%lld samples (%.1f%%), %.1f images/s, elapsed %s, ETA %s",
                static_cast<long long>(done), static_cast<long long>(total_),
                total_ > 0 ? 100.0 * static_cast<double>(done) / static_cast<double>(total_) : 100.0, rate,
                format_duration(t).c_str(), final_line ? "0:00" : format_duration(eta).c_str());
  if (tty_)
    std::fprintf(stderr, "\r\033[Ksluice: %s%s", line, final_line ? "\n" : "");
  else
    std::fprintf(stderr, "sluice: %s\n", line);
  std::fflush(stderr);
}

}  // namespace sluice
