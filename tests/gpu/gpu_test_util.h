#pragma once
// Helpers for the GPU tests: a skip when no GPU is present, graphs built in code (the builder of
// tests/support/graph_builder.h), deterministic random inputs, and the comparison of the CUDA
// engine with the CPU engine (the reference).
//
// With SLUICE_GPU_TESTS_CPU_CHECK=1 and no GPU, the comparison still runs the CPU engine and lowers
// the graph for the CUDA engine (no device needed for that), so the test graphs themselves are
// checked on machines without a GPU; the test is then skipped.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/cuda/cuda_engine.h"
#include "engine/cuda/engine_internal.h"
#include "engine/engine.h"
#include "model/graph.h"
#include "support/graph_builder.h"

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

// The builder shared with the CPU tests (tests/support/graph_builder.h); graphs built here name
// themselves "gpu test" in errors.
struct GraphBuilder : testsupport::GraphBuilder {
  explicit GraphBuilder(Shape input, DType t = DType::F32) : testsupport::GraphBuilder(std::move(input), t, "gpu test") {}
};

using testsupport::f32;
using testsupport::random_values;
using testsupport::set_float;
using testsupport::set_floats;
using testsupport::set_int;
using testsupport::set_ints;
using testsupport::set_string;
using testsupport::typed;

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
  bool exact_ints = true;      // integer outputs must match exactly (else `int_agreement` of them)
  double int_agreement = 0.99;
};

// Sets an environment variable for one scope and restores the previous value.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) {
      had_ = true;
      old_ = old;
    }
    if (value) setenv(name, value, 1);
    else unsetenv(name);
  }
  ~ScopedEnv() {
    if (had_) setenv(name_.c_str(), old_.c_str(), 1);
    else unsetenv(name_.c_str());
  }

 private:
  std::string name_, old_;
  bool had_ = false;
};

// Runs `g` on the CPU engine and on the CUDA engine at precision `p` on the same random input and
// checks every output.  Skips without a GPU (after the CPU-side checks in CPU-check mode).
void expect_matches_cpu(const Graph& g, Precision p, const CompareOptions& c = {});

// The same comparison against a reference computed on the host: `ref` returns the expected outputs
// for the random input x (for ops the CPU engine does not run, and to state the op's definition
// independently of both engines).
using HostReference = std::function<std::vector<Tensor>(const Tensor& x)>;
void expect_matches_reference(const Graph& g, Precision p, const HostReference& ref, const CompareOptions& c = {});

// v rounded to the element type precision p computes in (bf16 or fp16; unchanged at fp32/tf32):
// what the engine does to the input and to float constants before an op reads them.
float round_to(Precision p, float v);

// The kind of each step the CUDA builder makes of g at precision p, in order (no device needed).
std::vector<std::string> step_kinds(const Graph& g, Precision p);
// The same with the environment variable `name` set to `value` while the builder runs (an engine
// switch read at each step's preparation).
std::vector<std::string> step_kinds_with(const Graph& g, Precision p, const char* name, const char* value);

}  // namespace sluice::gputest
