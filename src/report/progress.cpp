#include "report/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/error.h"

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

Progress::Progress(const WorkDistributor& work, int64_t committed_before, int64_t total, double interval_s,
                   std::function<int64_t()> computed_on_root, int ranks)
    : work_(work), before_(committed_before), total_(total), computed_(std::move(computed_on_root)), ranks_(ranks),
      interval_(interval_s), tty_(isatty(STDERR_FILENO) != 0), t0_(Clock::now()) {
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
  const int64_t pending = work_.job_pending();
  const double t = seconds_since(t0_);
  // The pace counts the work in flight: what rank 0 computed, as if every rank kept its pace,
  // until the commits show more.  Committed samples alone stay at 0 until a short run's one commit.
  int64_t pace = now;
  if (computed_ && !final_line) pace = std::max(pace, std::min(pending, computed_() * std::max(1, ranks_)));
  const double rate = t > 0 ? static_cast<double>(pace) / t : 0;
  const double eta = rate > 0 ? static_cast<double>(pending - pace) / rate : NAN;
  std::string in_flight;
  if (pace > now) in_flight = str(", ~", pace - now, " more in flight");
  // The last line: 0:00 only when the job is done; a stop leaves work for --resume.
  std::string eta_text = format_duration(eta);
  if (final_line) eta_text = done >= total_ ? "0:00" : str("- (stopped, ", total_ - done, " left to resume)");
  char line[320];
  std::snprintf(line, sizeof line, "progress: %lld/%lld samples (%.1f%%)%s, %.1f images/s, elapsed %s, ETA %s",
                static_cast<long long>(done), static_cast<long long>(total_),
                total_ > 0 ? 100.0 * static_cast<double>(done) / static_cast<double>(total_) : 100.0,
                in_flight.c_str(), rate, format_duration(t).c_str(), eta_text.c_str());
  if (tty_)
    std::fprintf(stderr, "\r\033[Ksluice: %s%s", line, final_line ? "\n" : "");
  else
    std::fprintf(stderr, "sluice: %s\n", line);
  std::fflush(stderr);
}

}  // namespace sluice
