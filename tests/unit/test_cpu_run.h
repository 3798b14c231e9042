#pragma once
// For the model-pass unit tests that compare a graph prepared with and without a pass: its outputs
// on the CPU engine, and the distance between two of them.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "engine/engine.h"
#include "model/graph.h"
#include "test_model_util.h"

namespace sluice::test {

// Every output of the prepared graph g on a ramp input of `seed`, two CPU threads.
inline std::vector<std::vector<float>> cpu_outputs(const Graph& g, uint32_t seed) {
  EngineOptions eo;
  eo.threads = 2;
  eo.io_sets = 1;
  auto e = create_cpu_engine(g, eo);
  const std::vector<float> x = ramp(static_cast<std::size_t>(shape_numel(e->input().shape)), seed);
  std::memcpy(e->input_buffer(0), x.data(), x.size() * sizeof(float));
  e->forward(0, nullptr);
  std::vector<std::vector<float>> out;
  for (std::size_t i = 0; i < e->outputs().size(); ++i) {
    const float* y = static_cast<const float*>(e->output_buffer(0, static_cast<int>(i)));
    out.emplace_back(y, y + shape_numel(e->outputs()[i].shape));
  }
  return out;
}

// The first output of g on the ramp of seed 5.
inline std::vector<float> cpu_first_output(const Graph& g) { return cpu_outputs(g, 5).at(0); }

// max |a - b| over max |b|.
inline double relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double scale = 1e-30, diff = 0;
  for (std::size_t j = 0; j < a.size(); ++j) {
    scale = std::max(scale, static_cast<double>(std::fabs(b[j])));
    diff = std::max(diff, static_cast<double>(std::fabs(a[j] - b[j])));
  }
  return diff / scale;
}

}  // namespace sluice::test
