#pragma once
// The CPU engine's kernel interface.  A kernel is built once per node from the node's attributes and
// the final shapes and dtypes of its tensors (all static after prepare_graph), precomputes whatever
// it can, and then runs many times on raw host pointers the engine hands it.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "engine/cpu/thread_pool.h"
#include "model/graph.h"

namespace sluice::cpu {

// What a kernel factory sees of its node.
struct KernelInit {
  const Node& node;
  int64_t opset = 0;                   // default-domain opset of the model
  std::vector<const ValueInfo*> in;    // nullptr: absent optional input
  std::vector<const Tensor*> cin;      // the value of a constant input, else nullptr
  std::vector<const ValueInfo*> out;   // nullptr: output not wanted by the graph (still written)

  std::size_t num_inputs() const { return in.size(); }
  bool has_input(std::size_t i) const { return i < in.size() && in[i] != nullptr; }
  const ValueInfo& input(std::size_t i) const;
  const ValueInfo& output(std::size_t i) const;
  // The constant value of input i; InputError when it is not a constant (the engine needs it to
  // plan the op, e.g. Reshape's shape or Slice's starts).
  const Tensor& const_input(std::size_t i, const char* what) const;
  std::vector<int64_t> const_ints(std::size_t i, const char* what) const;

  // An InputError naming the node: "Conv 'layer1.0.conv1': <message>".
  template <typename... Args>
  [[noreturn]] void fail(const Args&... args) const {
    throw InputError(str("cpu engine: ", node.describe(), ": ", args...));
  }
  void require_dtype(const ValueInfo& v, DType t) const;
  void require_float(std::size_t i) const { require_dtype(input(i), DType::F32); }
  // Axis in [-rank, rank) to [0, rank); InputError otherwise.
  int64_t axis(int64_t a, int64_t rank) const;
};

// What a kernel sees at run time.
struct KernelArgs {
  const void* const* in;   // one pointer per node input (nullptr: absent)
  void* const* out;        // one pointer per node output
  void* scratch;           // scratch_bytes() bytes, 64-byte aligned, shared by all threads
  ThreadPool& pool;
};

class Kernel {
 public:
  virtual ~Kernel() = default;
  // Scratch the kernel needs during run(), for a pool of `threads` threads.
  virtual std::size_t scratch_bytes(int threads) const { return 0; }
  virtual void run(const KernelArgs& a) = 0;
};

using KernelFactory = std::unique_ptr<Kernel> (*)(const KernelInit&);
using KernelTable = std::unordered_map<std::string, KernelFactory>;  // "Conv", "sluice.FusedConv"

// Each kernel file adds its ops to the table (called explicitly: a static library would drop
// self-registering objects that nothing references).
void add_conv_kernels(KernelTable& t);
void add_conv_transpose_kernels(KernelTable& t);
void add_pool_kernels(KernelTable& t);
void add_elementwise_kernels(KernelTable& t);
void add_binary_kernels(KernelTable& t);
void add_matmul_kernels(KernelTable& t);
void add_resize_kernels(KernelTable& t);
void add_shape_kernels(KernelTable& t);
void add_data_kernels(KernelTable& t);
void add_reduce_kernels(KernelTable& t);
void add_logic_kernels(KernelTable& t);
void add_norm_kernels(KernelTable& t);
void add_index_kernels(KernelTable& t);
void add_einsum_kernels(KernelTable& t);
void add_attention_kernels(KernelTable& t);
void add_detect_kernels(KernelTable& t);
void add_sample_kernels(KernelTable& t);   // sample_ops.cpp: DepthToSpace, GatherElements, GridSample, ...

// Builds the kernel of a node; InputError for an op the CPU engine does not implement.
std::unique_ptr<Kernel> make_kernel(const KernelInit& init);
// "Conv", ..., "sluice.FusedConv", ... sorted.
std::vector<std::string> cpu_kernel_ops();

// ---- small helpers shared by the kernel files ----------------------------------------------------

// Row-major strides of a shape, in elements.
std::vector<int64_t> strides_of(const Shape& s);

// Rounds up to a multiple of 64 bytes (every buffer the engine hands out is 64-byte aligned).
inline std::size_t align64(std::size_t n) { return (n + 63) & ~static_cast<std::size_t>(63); }

// Splits [0, n) into chunks of about `target` items whose count depends only on n and target.
inline int64_t chunk_count(int64_t n, int64_t target) { return n <= 0 ? 0 : (n + target - 1) / target; }

// Runs f(begin, end) over [0, n) in chunks of a fixed size, on the pool.
template <typename F>
void for_chunks(ThreadPool& pool, int64_t n, F&& f, int64_t chunk = 32768) {
  pool.parallel_for(chunk_count(n, chunk), [&](int64_t t, int) { f(t * chunk, std::min(n, (t + 1) * chunk)); });
}

// A kernel made of a lambda, for the many ops that need no scratch.
template <typename F>
class LambdaKernel final : public Kernel {
 public:
  explicit LambdaKernel(F f) : f_(std::move(f)) {}
  void run(const KernelArgs& a) override { f_(a); }

 private:
  F f_;
};
template <typename F>
std::unique_ptr<Kernel> lambda_kernel(F f) {
  return std::make_unique<LambdaKernel<F>>(std::move(f));
}

}  // namespace sluice::cpu
