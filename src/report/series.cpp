#include "report/series.h"

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
  std::vector<double> t, read, decode, h2d, compute, d2h, encode, write, st_in, st_out;
  std::vector<int64_t> samples;
  for (const auto& p : points_) {
    t.push_back(ms(p.wall_s));
    samples.push_back(p.samples);
    read.push_back(ms(p.read_s));
    decode.push_back(ms(p.decode_s));
    h2d.push_back(ms(p.h2d_s));
    compute.push_back(ms(p.compute_s));
    d2h.push_back(ms(p.d2h_s));
    encode.push_back(ms(p.encode_s));
    write.push_back(ms(p.write_s));
    st_in.push_back(ms(p.stall_input_s));
    st_out.push_back(ms(p.stall_output_s));
  }
  j["t"] = t;
  j["samples"] = samples;
  j["busy"] = {{"read", read}, {"decode", decode}, {"h2d", h2d}, {"compute", compute},
               {"d2h", d2h}, {"encode", encode}, {"write", write}};
  j["stall"] = {{"input", st_in}, {"output", st_out}};
  return j;
}

}  // namespace sluice
