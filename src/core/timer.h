#pragma once
// Wall-clock timing for stage accounting.  Stages add the time they were busy and the time they
// stalled (waiting for input, waiting for a free output slot) to atomic counters that the report
// reads at the end; nothing here allocates or locks.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

namespace sluice {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Seconds since the Unix epoch, for file attributes and the report.
double unix_time_now();
std::string iso8601(double unix_seconds);

class TimeCounter {
 public:
  void add(Clock::duration d) { ns_.fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(d).count(), std::memory_order_relaxed); }
  double seconds() const { return static_cast<double>(ns_.load(std::memory_order_relaxed)) * 1e-9; }
  void reset() { ns_ = 0; }

 private:
  std::atomic<int64_t> ns_{0};
};

// Adds the lifetime of the scope to a counter.
class ScopedTime {
 public:
  explicit ScopedTime(TimeCounter& counter) : counter_(counter), t0_(Clock::now()) {}
  ~ScopedTime() { counter_.add(Clock::now() - t0_); }
  ScopedTime(const ScopedTime&) = delete;
  ScopedTime& operator=(const ScopedTime&) = delete;

 private:
  TimeCounter& counter_;
  Clock::time_point t0_;
};

}  // namespace sluice
