#include "report/series.h"

#include <array>
#include <cmath>

namespace sluice {

namespace {

double ms(double s) { return std::round(s * 1000.0) / 1000.0; }

}  // namespace

SeriesRecorder::SeriesRecorder(std::function<PipelineStats()> snapshot, double interval_s, std::size_t max_points)
    : snapshot_(std::move(snapshot)), interval_(interval_s > 0 ? interval_s : 1.0),
      max_points_(max_points < 4 ? 4 : max_points) {
  if (snapshot_) thread_ = WorkerThread("series", [this] { loop(); });
}

SeriesRecorder::~SeriesRecorder() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    done_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join_noexcept();
}

void SeriesRecorder::loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    if (cv_.wait_for(lock, std::chrono::duration<double>(interval_), [this] { return done_; })) return;
    lock.unlock();
    const PipelineStats s = snapshot_();
    lock.lock();
    if (done_) return;
    if (s.wall_s > 0) {
      lock.unlock();
      add(s);
      lock.lock();
    }
  }
}

void SeriesRecorder::add(const PipelineStats& s) {
  std::lock_guard<std::mutex> lock(mutex_);
  points_.push_back(s);
  if (points_.size() > max_points_) {
    // Keep every other point (and always the newest), and sample half as often from now on.
    std::vector<PipelineStats> kept;
    for (std::size_t i = 1; i < points_.size(); i += 2) kept.push_back(points_[i]);
    if (kept.back().wall_s != points_.back().wall_s) kept.push_back(points_.back());
    points_.swap(kept);
    interval_ *= 2;
  }
}

void SeriesRecorder::stop(const PipelineStats& final_stats) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    done_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join_noexcept();
  std::lock_guard<std::mutex> lock(mutex_);
  if (points_.empty() || points_.back().wall_s < final_stats.wall_s) points_.push_back(final_stats);
}

nlohmann::json SeriesRecorder::to_json() const {
  std::lock_guard<std::mutex> lock(mutex_);
  nlohmann::json j;
  j["interval_s"] = interval_;
  std::vector<double> t;
  std::vector<int64_t> samples;
  std::array<std::vector<double>, kTimedFields.size()> seconds;
  for (const auto& p : points_) {
    t.push_back(ms(p.wall_s));
    samples.push_back(p.samples);
    for (std::size_t i = 0; i < kTimedFields.size(); ++i) seconds[i].push_back(ms(p.*kTimedFields[i].seconds));
  }
  j["t"] = t;
  j["samples"] = samples;
  nlohmann::json busy = nlohmann::json::object(), stall = nlohmann::json::object();
  for (std::size_t i = 0; i < kTimedFields.size(); ++i) {
    const auto& f = kTimedFields[i];
    if (f.kind == TimedField::kStage) busy[f.name] = seconds[i];
    if (f.kind == TimedField::kStall) stall[f.stall] = seconds[i];
  }
  j["busy"] = busy;
  j["stall"] = stall;
  return j;
}

}  // namespace sluice
