#pragma once
// Helpers for the CPU engine tests: graphs built by hand (tests/support/graph_builder.h, shared with
// the GPU tests), a one-call runner, and deterministic pseudo-random data.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/engine.h"
#include "model/graph.h"
#include "support/graph_builder.h"

namespace sluice::cputest {

// The graph builder and the random data are shared with the GPU tests.
using testsupport::f32;
using testsupport::GraphBuilder;
using testsupport::random_values;
using testsupport::typed;

// Runs the graph once on `input` (raw bytes of the input tensor) and returns each output's bytes.
inline std::vector<std::vector<uint8_t>> run_bytes(const Graph& g, const void* input, int threads = 2) {
  EngineOptions opt;
  opt.threads = threads;
  opt.io_sets = 1;
  auto e = create_cpu_engine(g, opt);
  std::memcpy(e->input_buffer(0), input, e->input().bytes());
  e->forward(0, nullptr);
  std::vector<std::vector<uint8_t>> outs;
  for (std::size_t i = 0; i < e->outputs().size(); ++i) {
    const auto* p = static_cast<const uint8_t*>(e->output_buffer(0, static_cast<int>(i)));
    outs.emplace_back(p, p + e->outputs()[i].bytes());
  }
  return outs;
}

template <typename T>
std::vector<T> as(const std::vector<uint8_t>& b) {
  std::vector<T> v(b.size() / sizeof(T));
  std::memcpy(v.data(), b.data(), v.size() * sizeof(T));
  return v;
}

// Runs a graph with one float input and returns output `k` as floats.
inline std::vector<float> run_f32(const Graph& g, const std::vector<float>& x, std::size_t k = 0, int threads = 2) {
  return as<float>(run_bytes(g, x.data(), threads).at(k));
}

// Max |a - b| / max |b|, the relative error the tests bound.
inline double rel_error(const std::vector<float>& got, const std::vector<double>& ref) {
  EXPECT_EQ(got.size(), ref.size());
  double mx = 0, md = 0;
  for (std::size_t i = 0; i < std::min(got.size(), ref.size()); ++i) {
    mx = std::max(mx, std::fabs(ref[i]));
    md = std::max(md, std::fabs(got[i] - ref[i]));
  }
  return mx == 0 ? md : md / mx;
}

}  // namespace sluice::cputest
