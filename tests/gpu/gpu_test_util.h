#pragma once
// Helpers for the GPU tests: a skip when no GPU is present, graphs built in code (every value's
// type and shape filled in, as prepare_graph leaves them), deterministic random inputs, and the
// comparison of the CUDA engine with the CPU engine (the reference).
//
// With SLUICE_GPU_TESTS_CPU_CHECK=1 and no GPU, the comparison still runs the CPU engine and lowers
// the graph for the CUDA engine (no device needed for that), so the test graphs themselves are
// checked on machines without a GPU; the test is then skipped.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/cuda/cuda_engine.h"
#include "engine/cuda/engine_internal.h"
#include "engine/engine.h"
#include "model/graph.h"

namespace sluice::gputest {

inline bool have_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}
inline bool cpu_check_mode() {
  const char* v = std::getenv("SLUICE_GPU_TESTS_CPU_CHECK");
  return v && std::string(v) == "1";
}

#define SLUICE_REQUIRE_GPU()                                                                     \
  do {                                                                                           \
    if (!::sluice::gputest::have_gpu())                                                          \
      GTEST_SKIP() << "no CUDA GPU: cudaGetDeviceCount reports none, so this GPU test is skipped"; \
  } while (0)

struct GraphBuilder {
  Graph g;

  explicit GraphBuilder(Shape input, DType t = DType::F32) {
    g.opset = 18;
    g.source = "gpu test";
    g.inputs.push_back({"x", t, input});
    g.values["x"] = g.inputs.back();
  }
  GraphBuilder& constant(const std::string& name, Tensor t) {
    g.values[name] = ValueInfo{name, t.dtype, t.shape};
    g.constants[name] = std::move(t);
    return *this;
  }
  GraphBuilder& constant_i(const std::string& name, Shape s, const std::vector<int64_t>& v) {
    return constant(name, Tensor::from(DType::I64, std::move(s), v));
  }
  GraphBuilder& constant_f(const std::string& name, Shape s, const std::vector<float>& v) {
    return constant(name, Tensor::from(DType::F32, std::move(s), v));
  }
  // A float constant of random values in [lo, hi).
  GraphBuilder& random_f(const std::string& name, Shape s, uint32_t seed, float lo = -1.f, float hi = 1.f);
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

// Deterministic values in [lo, hi).
std::vector<float> random_values(std::size_t n, uint32_t seed, float lo = -1.f, float hi = 1.f);
// A random tensor for a graph input: floats in [lo, hi), uint8 over 0..255.
Tensor random_tensor(const ValueInfo& v, uint32_t seed, float lo = -1.f, float hi = 1.f);

double tolerance(Precision p);

// max |got - ref| / max |ref| over a float tensor pair (as floats); NaN where only one side is NaN.
double rel_error(const Tensor& got, const Tensor& ref);

std::vector<Tensor> run_cpu(const Graph& g, const Tensor& input);
std::vector<Tensor> run_cuda(const Graph& g, const Tensor& input, EngineOptions o);

struct CompareOptions {
  float lo = -1.f, hi = 1.f;   // input range
  uint32_t seed = 1;
  double tol = -1;             // < 0: tolerance(precision)
  bool exact_ints = true;      // integer outputs must match exactly (else 99 % agreement)
};

// Runs `g` on the CPU engine and on the CUDA engine at precision `p` on the same random input and
// checks every output.  Skips without a GPU (after the CPU-side checks in CPU-check mode).
void expect_matches_cpu(const Graph& g, Precision p, const CompareOptions& c = {});

}  // namespace sluice::gputest
