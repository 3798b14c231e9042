#pragma once
// The tap tables of one batch for the preprocessing kernel (gpu_preprocess.h), written by a reader
// thread into the pinned slot: image.h's axis_taps() restricted to the output coordinates that the
// crop or letterbox keeps.  Tables are shared by the rows with the same geometry (a folder of
// equal-sized photos needs two per batch); when the room runs out, plan_row() says no and the
// sample takes the CPU path.
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <utility>
#include <vector>

#include "image/cuda/gpu_preprocess.h"
#include "image/image.h"

namespace sluice {

// axis_taps() results by (input size, resized size, filter), shared by the reader threads.
class TapCache {
 public:
  std::shared_ptr<const AxisTaps> get(int in, int out, Interpolation filter);

 private:
  std::mutex mutex_;
  std::map<std::tuple<int, int, Interpolation>, std::shared_ptr<const AxisTaps>> taps_;
};

class TapTables {
 public:
  // Starts a batch: tables go to spans[0, span_capacity) and weights[0, weight_capacity).
  void reset(TapSpan* spans, std::size_t span_capacity, float* weights, std::size_t weight_capacity, TapCache* cache);

  // Sets plan's tap-table fields and decoded size for an in_h x in_w image; false (plan untouched)
  // when its tables do not fit.
  bool plan_row(int in_h, int in_w, const PreprocessSpec& spec, GpuRowPlan* plan);

  int32_t spans_used() const { return spans_used_; }
  int32_t weights_used() const { return weights_used_; }

 private:
  struct Key {
    int in, resized, offset, out;
    Interpolation filter;
    bool operator==(const Key& o) const {
      return in == o.in && resized == o.resized && offset == o.offset && out == o.out && filter == o.filter;
    }
  };
  struct Table {
    Key key;
    int32_t span;
  };
  bool axis(const Key& key, Table* found);

  TapSpan* spans_ = nullptr;
  float* weights_ = nullptr;
  std::size_t span_capacity_ = 0, weight_capacity_ = 0;
  int32_t spans_used_ = 0, weights_used_ = 0;
  TapCache* cache_ = nullptr;
  std::vector<Table> tables_;   // kept across batches: no allocation once grown
};

}  // namespace sluice
