#pragma once
// What the CUDA engine is made of, shared by its files: tensor slots, steps and the builder that
// lowers graph nodes into steps.
//
// Building happens once: every node becomes one or more Steps (a cuDNN call, a cuBLAS call, an own
// kernel, a memcpy) that read and write tensor slots.  Slots live in the activation arena (offsets
// from the memory plan), in an io set's input or output buffer, in the weights buffer, or alias
// another slot (Reshape & co).  A Bindings table turns slot ids into pointers for one io set, so
// the same steps serve every set and a CUDA graph captured per set has its pointers fixed.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "engine/cuda/cuda_engine.h"
#include "engine/cuda/kernels.h"
#include "engine/engine.h"
#include "model/graph.h"

namespace sluice::cuda {

class AlgoCache;
class GraphConv;

enum class Where { Arena, Input, Output, Constant, Alias };

struct TensorSlot {
  std::string name;
  DType dtype = DType::Undefined;   // in device memory (F32 graph values become the compute type)
  Shape shape;
  std::size_t bytes = 0;
  Where where = Where::Arena;
  int index = 0;            // Output: graph output number; Constant: index in Builder::weights; Alias: the root slot
  std::size_t offset = 0;   // Arena: offset in the arena; Alias: byte offset in the root
  // A 4-D tensor [N, C, H, W] stored channels-last ([N, H, W, C] in memory): what cuDNN's
  // tensor-core kernels for fp16/bf16 read and write natively.  `shape` stays the logical NCHW one.
  bool nhwc = false;
  int64_t numel() const { return shape_numel(shape); }
  // The dims in memory order.
  Shape physical() const { return nhwc ? Shape{shape[0], shape[2], shape[3], shape[1]} : shape; }
};

// Pointers of every slot for one io set.
struct Bindings {
  std::vector<void*> ptr;
  template <typename T = void> T* at(int slot) const { return static_cast<T*>(ptr[static_cast<std::size_t>(slot)]); }
};

// Everything a step may use while it is prepared or run.
struct Context {
  cudnnHandle_t cudnn = nullptr;
  cublasHandle_t cublas = nullptr;
  cublasLtHandle_t cublaslt = nullptr;   // the products with an epilogue (gemm_lt.h)
  void* workspace = nullptr;
  std::size_t workspace_bytes = 0;
  Precision precision = Precision::FP32;
  DType compute = DType::F32;
  bool deterministic = false;
  // How uncached choices are made (engine/cuda/autotune.h); under quick, layers of at most
  // negligible_flops FLOPs take cuDNN's first choice untimed (-1: none).
  Autotune autotune = Autotune::Quick;
  Autotune product_autotune = Autotune::Quick;   // the cuBLASLt products' (EngineOptions)
  double negligible_flops = -1;
  AlgoCache* cache = nullptr;
  std::string cache_prefix;   // GPU, cuDNN version and precision: the part of every cache key they share
  EngineStats* stats = nullptr;
  // cuDNN graphs of fused convolutions, shared by the steps of identical convolutions (conv_graph.h).
  std::map<std::string, std::shared_ptr<GraphConv>> graph_convs;
};

class Step {
 public:
  explicit Step(std::string label) : label_(std::move(label)) {}
  virtual ~Step() = default;
  const std::string& label() const { return label_; }
  // For the profile (engine/profile.h): what the step is, the bytes of the tensors it touches and
  // its FLOPs.  The builder fills them in.
  std::string kind;
  double bytes = 0, flops = 0;
  // Workspace this step needs at most (before prepare: an upper bound it will not exceed).
  virtual std::size_t workspace_bytes() const { return 0; }
  // Called once after memory exists and before any capture: measure algorithms, check that the
  // library accepts the call.  Buffers hold no meaningful data yet.
  virtual void prepare(Context& ctx, const Bindings& b) {}
  // Enqueues the step's work on `s`; never synchronizes or allocates.
  virtual void run(Context& ctx, const Bindings& b, cudaStream_t s) = 0;

 private:
  std::string label_;
};

// A step made of a lambda (most own-kernel steps).
using StepFn = std::function<void(Context&, const Bindings&, cudaStream_t)>;
std::unique_ptr<Step> make_step(std::string label, StepFn fn);

class Builder {
 public:
  Builder(const sluice::Graph& g, Precision p);

  const sluice::Graph& graph;
  const Precision precision;
  const DType compute;   // the element type of float activations and weights

  std::vector<TensorSlot> slots;
  std::vector<std::unique_ptr<Step>> steps;
  std::vector<std::vector<int>> step_slots;   // the slots each step reads or writes
  std::vector<std::vector<uint8_t>> weights;  // host bytes of each Constant slot (same order as their offsets)

  // The slot of node input i, in NCHW order: constants become weights (F32 ones in the compute
  // type), graph inputs are converted to the compute type on first use, channels-last tensors are
  // transposed (once per tensor).  InputError when absent.
  int input(const Node& n, std::size_t i);
  // Input i as it is stored (either layout): for ops that handle both.  A value of the fp32
  // residual stream comes converted to the compute type (once per value).
  int input_any(const Node& n, std::size_t i);
  // Input i exactly as stored, a residual-stream value in fp32 included: for the ops that read
  // either type (the residual Add and LayerNormalization, ops_residual.cpp).
  int input_stored(const Node& n, std::size_t i);
  // Whether graph value `name` is kept in fp32 under fp16/bf16 (engine/residual_stream.h; empty at
  // fp32/tf32 and with SLUICE_CUDA_RESIDUAL_FP32=0).
  bool is_wide(const std::string& name) const { return wide_.count(name) != 0; }
  // Input i in the asked layout (4-D tensors only; others come as they are).
  int input_as(const Node& n, std::size_t i, bool nhwc);
  // Whether channels-last activations are used (fp16/bf16/tf32 by default; SLUICE_CUDA_LAYOUT=nchw|nhwc
  // overrides, for measurements).
  bool nhwc_enabled() const { return nhwc_; }
  bool is_nhwc(int slot) const { return slots[static_cast<std::size_t>(slot)].nhwc; }
  // Whether every reader of tensor `name` is a channels-last convolution (and it is no graph
  // output): then its producer may as well write it channels-last.
  bool consumers_want_nhwc(const std::string& name) const;
  // The channel count a channels-last image tensor (a graph input, or Normalize's output) is
  // written with: its own, or rounded up to a multiple of SLUICE_CUDA_STEM_PAD (default 4, 0: off)
  // with zero channels when only ungrouped convolutions read it, so that the stem convolution's
  // 3 input channels meet cuDNN's tensor-core kernels in a shape they like.  The convolution pads
  // its weights to match (ops_conv.cpp).
  int64_t stem_channels(const std::string& name) const;
  // Whether convolution node n runs channels-last: 2-D, constant weights, ungrouped (cuDNN's
  // tensor-core kernels work in NHWC natively) or depthwise (the engine's own kernel), and the
  // engine's layout is channels-last.
  bool conv_runs_nhwc(const Node& n) const;
  // An NCHW slot viewed channels-last, or the other way round: an alias when the bytes are already
  // in that order (C == 1, or H == W == 1), else a transposed copy (cached).
  int relayout(int slot, bool nhwc);
  // Like input() but a graph input keeps its own type (Normalize reads uint8/float32 directly).
  int input_raw(const Node& n, std::size_t i);
  bool has_input(const Node& n, std::size_t i) const { return !n.input(i).empty(); }
  // The slot node output i is written to, channels-last when asked (4-D only); -1 for an absent
  // optional output.  Graph outputs are always delivered NCHW in the graph's dtype.
  int output(const Node& n, std::size_t i, bool nhwc = false);
  bool has_output(const Node& n, std::size_t i) const { return i < n.outputs.size() && !n.outputs[i].empty(); }
  // Scratch for one node's steps (planned like any activation).
  int temp(DType t, const Shape& s, const std::string& label);
  // A device constant that is not a graph tensor (folded parameters, mean/std tables).
  int constant(const std::string& label, const Tensor& t);
  // A host tensor in the engine's type (F32 values become the compute type).
  Tensor to_compute(const Tensor& t) const;
  // Output i shares src's bytes when it can (Reshape, Flatten, ...), else it is copied.
  void alias_or_copy(const Node& n, std::size_t out_index, int src);
  // Appends a step that reads/writes `uses`.  `kind` names it in the profile; "" means the op of
  // the node being lowered.
  void add(std::unique_ptr<Step> step, std::vector<int> uses, const std::string& kind = "");
  void add(const std::string& label, std::vector<int> uses, StepFn fn, const std::string& kind = "") {
    add(make_step(label, std::move(fn)), std::move(uses), kind);
  }

  const TensorSlot& slot(int id) const { return slots[static_cast<std::size_t>(id)]; }
  const ValueInfo& value(const std::string& name) const;
  // Host value of a constant input (nullptr when the input is absent or not a constant).
  const Tensor* const_input(const Node& n, std::size_t i) const;
  const Tensor& require_const(const Node& n, std::size_t i, const char* what) const;
  std::vector<int64_t> const_ints(const Node& n, std::size_t i, const char* what) const;
  std::vector<float> const_floats(const Node& n, std::size_t i, const char* what) const;
  DType internal(DType graph_dtype) const { return graph_dtype == DType::F32 ? compute : graph_dtype; }
  // The element type value `name` of graph type `graph_dtype` is stored in.
  DType stored(const std::string& name, DType graph_dtype) const {
    return is_wide(name) && graph_dtype == DType::F32 ? DType::F32 : internal(graph_dtype);
  }
  int64_t axis(const Node& n, int64_t a, int64_t rank) const;

  template <typename... Args>
  [[noreturn]] void fail(const Node& n, const Args&... args) const {
    throw InputError(str("cuda engine: ", n.describe(), ": ", args...));
  }

  // Lowers every node, then makes sure each graph output is written.
  void lower_all();

  // For fusions that lower several nodes at once (the output tails): the slot of graph output
  // `name` in its final type and layout, registered as that tensor (-1 when `name` is no graph
  // output, or its slot exists already); and nodes whose work an earlier step does, skipped later.
  int graph_output(const std::string& name);
  void skip(const Node& n) { skipped_.insert(&n); }
  // The nodes reading tensor `name`, and whether it is a graph output.
  std::vector<const Node*> consumers(const std::string& name) const;
  bool is_graph_output(const std::string& name) const;
  // Whether graph value `name` has its slot already (a node before the one being lowered wrote it,
  // or it is a graph input or constant).
  bool lowered(const std::string& name) const { return ids_.count(name) || raw_inputs_.count(name) || graph.constant(name); }

 private:
  int new_slot(TensorSlot s);
  int graph_output_slot(std::size_t k);
  void lower_node(const Node& n);
  void copy_or_cast(const std::string& label, int src, int dst);
  int transposed(int src, bool nhwc);

  bool nhwc_ = false;
  const Node* current_ = nullptr;                     // the node being lowered
  std::set<const Node*> skipped_;                     // lowered with an earlier node
  std::map<std::pair<int, bool>, int> relayouts_;     // (slot, layout) -> converted slot
  std::set<std::string> wide_;                        // values kept in fp32 (the residual stream)
  std::map<int, int> narrowed_;                       // fp32 residual slot -> its compute-type copy

  std::unordered_map<std::string, int> ids_;          // graph value -> slot
  std::unordered_map<std::string, int> raw_inputs_;   // graph input -> its slot in the input buffer
  std::vector<int> output_slots_;                     // graph output k -> slot (or -1)
  std::vector<std::pair<int, int>> pending_casts_;    // (internal slot, output slot) after a node
};

// Lowering by op family; each returns false when the op is not theirs.
bool lower_conv(Builder& b, const Node& n);
bool lower_gemm(Builder& b, const Node& n);
bool lower_elementwise(Builder& b, const Node& n);
// Whether bias Add node `add` goes into the Swish step after it (SLUICE_CUDA_SWISH_BIAS=1,
// ops_elementwise.cpp): then the product before it keeps no bias epilogue (ops_gemm.cpp).
bool swish_takes_bias(const Builder& b, const Node& add);
bool lower_layout(Builder& b, const Node& n);
bool lower_reduce(Builder& b, const Node& n);
bool lower_index(Builder& b, const Node& n);   // masks and indices (ops_index.cpp)
bool lower_attention(Builder& b, const Node& n);   // sluice.Attention (ops_attention.cpp)
bool lower_sample(Builder& b, const Node& n);   // DepthToSpace, GatherElements, GridSample, ... (ops_sample.cpp)
// Whether n is arithmetic on integer tensors (lowered by lower_index, not lower_elementwise).
bool is_int_arith(const Builder& b, const Node& n);
void lower_resize(Builder& b, const Node& n);   // Resize and Upsample (ops_resize.cpp)
// The residual stream (ops_residual.cpp): an Add whose sum is kept in fp32 (Builder::is_wide), fused
// with the LayerNormalization that reads it where it can; LayerNormalization of either storage type.
void lower_residual_add(Builder& b, const Node& n);
void lower_layernorm(Builder& b, const Node& n);

// Spatial geometry of one convolution, every vector with one entry per spatial dim: the node's
// attributes with auto_pad resolved (ops_conv.cpp).
struct ConvGeom {
  std::vector<int64_t> kernel, stride, dilation, pad_begin, pad_end;
  int64_t groups = 1;
  bool symmetric() const { return pad_begin == pad_end; }
};
ConvGeom conv_geometry(const Builder& b, const Node& n, const Shape& x, const Shape& w, const Shape& y, bool transpose);
// The activation of a sluice.FusedConv node.
ActParams fused_activation(const Builder& b, const Node& n);
// A cuDNN convolution step (ops_conv.cpp): y = act(conv(x, w) + bias + z), bias and z optional (-1).
std::unique_ptr<Step> make_conv_step(std::string label, DType t, Precision p, const Shape& xs, const Shape& ws,
                                     const Shape& ys, const ConvGeom& g, int x, int w, int bias, int z, int y, ActParams act,
                                     bool nhwc);
// Lowers the convolution the atrous way when it qualifies (ops_atrous.cpp); false otherwise.
bool lower_atrous(Builder& b, const Node& n, const ConvGeom& g, const Shape& xs, const Shape& ws, const Shape& ys, int x,
                  int w, int bias, int z, int y, const ActParams& act, bool nhwc);
// Depthwise convolutions of channels-last tensors on the engine's own kernel (ops_depthwise.cpp);
// false when n is no such convolution.
bool lower_depthwise(Builder& b, const Node& n);
bool is_depthwise(const Builder& b, const Node& n);

// cuDNN data type of a float dtype.
cudnnDataType_t cudnn_type(DType t);

}  // namespace sluice::cuda
