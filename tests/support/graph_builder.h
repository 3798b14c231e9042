#pragma once
// Graphs built in code for the CPU (tests/unit) and GPU (tests/gpu) engine tests: every value's type
// and shape filled in, as prepare_graph leaves them, so a test can hand the graph straight to an
// engine.  Also the deterministic pseudo-random data both suites feed them.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "model/graph.h"

namespace sluice::testsupport {

// Deterministic values in [lo, hi): the same seed gives the same values on every machine.
inline std::vector<float> random_values(std::size_t n, uint32_t seed, float lo = -1.f, float hi = 1.f) {
  std::vector<float> v(n);
  uint32_t s = seed * 2654435761u + 12345u;
  for (auto& x : v) {
    s = s * 1664525u + 1013904223u;
    x = lo + (hi - lo) * static_cast<float>(s >> 8) / static_cast<float>(1u << 24);
  }
  return v;
}

struct GraphBuilder {
  Graph g;

  // One graph input "x"; `source` names the graph in the errors prepare and the engines raise.
  explicit GraphBuilder(Shape input, DType t = DType::F32, std::string source = "test") {
    g.opset = 18;
    g.source = std::move(source);
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
  // A float constant of random values in [lo, hi).
  GraphBuilder& random_f(const std::string& name, Shape s, uint32_t seed, float lo = -1.f, float hi = 1.f) {
    const auto v = random_values(static_cast<std::size_t>(shape_numel(s)), seed, lo, hi);
    return constant_f(name, std::move(s), v);
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

inline void set_ints(Node& n, const std::string& k, std::vector<int64_t> v) { n.attrs[k] = Attribute::of_ints(std::move(v)); }
inline void set_int(Node& n, const std::string& k, int64_t v) { n.attrs[k] = Attribute::of_int(v); }
inline void set_float(Node& n, const std::string& k, float v) { n.attrs[k] = Attribute::of_float(v); }
inline void set_string(Node& n, const std::string& k, std::string v) { n.attrs[k] = Attribute::of_string(std::move(v)); }
inline void set_floats(Node& n, const std::string& k, std::vector<float> v) { n.attrs[k] = Attribute::of_floats(std::move(v)); }

}  // namespace sluice::testsupport
