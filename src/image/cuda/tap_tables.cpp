#include "image/cuda/tap_tables.h"

#include <algorithm>

#include "core/error.h"

namespace sluice {

std::shared_ptr<const AxisTaps> TapCache::get(int in, int out, Interpolation filter) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = taps_.find({in, out, filter});
  if (it != taps_.end()) return it->second;
  // Folders of photos have few distinct sizes; one of all different sizes must not grow this
  // without bound.
  if (taps_.size() >= 4096) taps_.clear();
  auto t = std::make_shared<const AxisTaps>(axis_taps(in, out, filter));
  taps_.emplace(std::make_tuple(in, out, filter), t);
  return t;
}

void TapTables::reset(TapSpan* spans, std::size_t span_capacity, float* weights, std::size_t weight_capacity,
                      TapCache* cache) {
  spans_ = spans;
  weights_ = weights;
  span_capacity_ = span_capacity;
  weight_capacity_ = weight_capacity;
  spans_used_ = weights_used_ = 0;
  cache_ = cache;
  tables_.clear();
}

bool TapTables::axis(const Key& key, Table* found) {
  for (const Table& t : tables_)
    if (t.key == key) {
      *found = t;
      return true;
    }
  const std::shared_ptr<const AxisTaps> tp = cache_->get(key.in, key.resized, key.filter);
  const int T = tp->max_taps;
  // Only the output coordinates inside the resized image read pixels and own weights.
  const int lo = std::clamp(-key.offset, 0, key.out), hi = std::clamp(key.resized - key.offset, lo, key.out);
  std::size_t weights_needed = 0;
  for (int o = lo; o < hi; ++o) weights_needed += static_cast<std::size_t>(tp->count[static_cast<std::size_t>(o + key.offset)]);
  if (static_cast<std::size_t>(spans_used_) + static_cast<std::size_t>(key.out) > span_capacity_ ||
      static_cast<std::size_t>(weights_used_) + weights_needed > weight_capacity_)
    return false;
  TapSpan* spans = spans_ + spans_used_;
  int32_t w = weights_used_;
  for (int o = 0; o < key.out; ++o) {
    if (o < lo || o >= hi) {
      spans[o] = TapSpan{};
      continue;
    }
    const std::size_t r = static_cast<std::size_t>(o + key.offset);
    const int first = tp->first[r], count = tp->count[r];
    // The kernel trusts these bounds: checked once per table here rather than a fault on the device.
    SLUICE_CHECK(first >= 0 && count >= 1 && count <= T && first + count <= key.in, "axis_taps(", key.in, ", ",
                 key.resized, ", ", interpolation_name(key.filter), ") output ", r, " reads [", first, ", ",
                 first + count, ")");
    spans[o] = TapSpan{first, count, w};
    std::copy_n(tp->weight.data() + r * static_cast<std::size_t>(T), count, weights_ + w);
    w += count;
  }
  const Table t{key, spans_used_};
  spans_used_ += key.out;
  weights_used_ = w;
  tables_.push_back(t);
  *found = t;
  return true;
}

bool TapTables::plan_row(int in_h, int in_w, const PreprocessSpec& spec, GpuRowPlan* plan) {
  const ResizePlan rp = plan_resize(in_h, in_w, spec);
  Table ty{}, tx{};
  if (!axis(Key{in_h, rp.resized_h, rp.offset_y, spec.out_h, spec.interpolation}, &ty) ||
      !axis(Key{in_w, rp.resized_w, rp.offset_x, spec.out_w, spec.interpolation}, &tx))
    return false;
  plan->round_rows = rounds_each_pass(spec.interpolation) ? 1 : 0;
  plan->in_h = in_h;
  plan->in_w = in_w;
  plan->y_span = ty.span;
  plan->x_span = tx.span;
  return true;
}

}  // namespace sluice
