#pragma once
// Helpers for the CPU engine tests: graphs built by hand (every value's type and shape filled in, as
// prepare_graph leaves them), a one-call runner, and deterministic pseudo-random data.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/engine.h"
#include "model/graph.h"

namespace sluice::cputest {

struct GraphBuilder {
  Graph g;

  explicit GraphBuilder(Shape input, DType t = DType::F32) {
    g.opset = 18;
    g.source = "test";
    g.inputs.push_back({"x", t, input});
    g.values["x"] = g.inputs.back();
  }
  GraphBuilder& constant(const std::string& name, Tensor t) {
    g.values[name] = ValueInfo{name, t.dtype, t.shape};
    g.constants[name] = std::move(t);
    return *this;
  }
  GraphBuilder& constant_f(const std::string& name, Shape s, const std::vector<float>& v) {
    return constant(name, Tensor::from(DType::F32, std::move(s), v));
  }
  GraphBuilder& constant_i(const std::string& name, Shape s, const std::vector<int64_t>& v) {
    return constant(name, Tensor::from(DType::I64, std::move(s), v));
  }
  // Adds a node; `outs` pairs each output name with its type and shape.
  Node& node(const std::string& op, std::vector<std::string> inputs, const std::vector<ValueInfo>& outs,
             const std::string& domain = "") {
    Node n;
    n.op = op;
    n.domain = domain;
    n.name = op + std::to_string(g.nodes.size());
    n.inputs = std::move(inputs);
    for (const auto& o : outs) {
      n.outputs.push_back(o.name);
      if (!o.name.empty()) g.values[o.name] = o;
    }
    g.nodes.push_back(std::move(n));
    return g.nodes.back();
  }
  GraphBuilder& output(const std::string& name) {
    g.outputs.push_back(g.values.at(name));
    return *this;
  }
};

inline ValueInfo f32(const std::string& name, Shape s) { return ValueInfo{name, DType::F32, std::move(s)}; }
inline ValueInfo typed(const std::string& name, DType t, Shape s) { return ValueInfo{name, t, std::move(s)}; }

// Deterministic values in [-1, 1).
inline std::vector<float> random_values(std::size_t n, uint32_t seed) {
  std::vector<float> v(n);
  uint32_t s = seed * 2654435761u + 12345u;
  for (auto& x : v) {
    s = s * 1664525u + 1013904223u;
    x = static_cast<float>(s >> 8) / static_cast<float>(1u << 24) * 2.f - 1.f;
  }
  return v;
}

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
