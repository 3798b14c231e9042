#pragma once
// Rank 0's live progress line on stderr: samples done of the job's total, images/s, ETA.  On a
// terminal it rewrites one line with carriage returns; otherwise (Slurm logs, pipes) it prints a
// plain line every `interval` seconds.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>

#include "cluster/work.h"
#include "core/thread.h"
#include "core/timer.h"

namespace sluice {

class Progress {
 public:
  // `computed_on_root`: the samples rank 0's pipeline has computed so far, committed or not; with
  // `ranks`, the pace of the work in flight before a commit shows it (a short run commits once,
  // at its end).
  Progress(const WorkDistributor& work, int64_t committed_before, int64_t total, double interval_s,
           std::function<int64_t()> computed_on_root = {}, int ranks = 1);
  ~Progress();  // prints the final line and stops the thread

 private:
  void loop();
  void print(bool final_line);

  const WorkDistributor& work_;
  int64_t before_, total_;
  std::function<int64_t()> computed_;
  int ranks_;
  double interval_;
  bool tty_;
  Clock::time_point t0_;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  WorkerThread thread_;
};

// "1:02:03" or "4:05"
std::string format_duration(double seconds);

}  // namespace sluice
