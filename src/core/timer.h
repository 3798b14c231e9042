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

// Seconds since the Unix epoch, for file attributes, ledger records and the report: the one place
// Sluice reads the wall clock.  In a job of several ranks it is rank 0's clock: MpiContext measures
// how far this node's clock is from rank 0's when the job starts and sets that offset here, so
// times that different nodes wrote (commits, series, rank starts) compare and subtract correctly
// even when the nodes' clocks disagree.  SLUICE_CLOCK_SKEW_S (seconds, for tests) shifts this
// process's clock, standing in for a node whose clock is off.
double unix_time_now();
// This node's clock minus rank 0's (seconds), subtracted by unix_time_now() from then on.
void set_clock_offset(double seconds);
double clock_offset();
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
