#pragma once
// A rank's time series for the report: every few seconds, the pipeline's cumulative counters
// (samples written, each stage's busy seconds, the stalls), so the report can say what happened
// when, not only on average.  Points are cumulative, so any two of them give the rate and busy
// fractions between them, and thinning the series (when a long job has too many points) loses
// resolution, never totals.
#include <condition_variable>
#include <functional>
#include <mutex>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/thread.h"
#include "pipeline/stats.h"

namespace sluice {

class SeriesRecorder {
 public:
  // Calls `snapshot` every `interval_s` seconds on its own thread until stop().  At most
  // `max_points` points are kept: past that the series keeps every other point and the interval
  // doubles.
  SeriesRecorder(std::function<PipelineStats()> snapshot, double interval_s, std::size_t max_points = 600);
  ~SeriesRecorder();
  SeriesRecorder(const SeriesRecorder&) = delete;
  SeriesRecorder& operator=(const SeriesRecorder&) = delete;

  // Takes a last point (the final counters) and stops the thread.
  void stop(const PipelineStats& final_stats);
  // {"interval_s", "t": [...], "samples": [...], "busy": {stage: [...]}, "stall": {...}}:
  // t in seconds since the pipeline started; busy and stall in cumulative seconds.
  nlohmann::json to_json() const;

  // Adds one point (the thread does this; tests call it directly).
  void add(const PipelineStats& s);

 private:
  void loop();

  std::function<PipelineStats()> snapshot_;
  double interval_;
  std::size_t max_points_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  std::vector<PipelineStats> points_;
  WorkerThread thread_;
};

}  // namespace sluice
