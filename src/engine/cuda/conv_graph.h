#pragma once
// A channels-last convolution with its epilogue, y = act(conv(x, w) + bias + z), as one cuDNN graph
// (the graph API through the header-only cudnn-frontend; docs/engine.md, the FusedConv row).
// On Hopper the runtime-fused engines behind it run conv + bias + residual + ReLU in one kernel,
// which the legacy cudnnConvolutionBiasActivationForward does not reach.  ops_conv.cpp builds one
// per convolution at start-up, times its plans against the legacy call on the real buffers, and
// keeps the faster (the choice goes to the algorithm cache).
//
// Built only when CMake found the frontend's headers (SLUICE_HAVE_CUDNN_FRONTEND), and used only with
// SLUICE_CUDA_CONV_GRAPH=1 (the faster of the two per convolution) or =force (the graph wherever cuDNN
// builds one: for tests) until its start-up cost (NVRTC compiles) and its gains are measured on the
// H200; otherwise graph_conv_enabled() is false and create() returns nothing.
#include <cudnn.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/algo_cache.h"
#include "engine/cuda/kernels.h"
#include "engine/engine.h"

namespace sluice::cuda {

struct GraphConvSpec {
  DType t = DType::BF16;           // input, weights, bias, residual and output type
  Precision precision = Precision::BF16;
  std::vector<int64_t> x, w, y;    // logical NCHW / KCRS dims; memory is channels-last (K R S C for w)
  std::vector<int64_t> pad, stride, dilation;   // 2 each (symmetric padding)
  bool bias = false, residual = false;
  ActParams act;                   // Identity, Relu, or Clip with a lower bound of 0
  bool deterministic = false;
};

struct GraphConvBuffers {
  void *x = nullptr, *w = nullptr, *bias = nullptr, *z = nullptr, *y = nullptr;
};

bool graph_conv_enabled();
// Whether the spec is one the graph path takes at all (2-D, ungrouped, activation supported).
bool graph_conv_supports(const GraphConvSpec& s);

class GraphConv {
 public:
  virtual ~GraphConv() = default;
  // The graph and its execution plans; nullptr (with the reason in *why) when cuDNN has no engine
  // for it or the frontend is not built in.  Never throws for an unsupported graph.
  static std::unique_ptr<GraphConv> create(cudnnHandle_t h, const GraphConvSpec& s, std::string* why);

  virtual int64_t plans() const = 0;
  virtual std::size_t workspace_bytes(int64_t plan) const = 0;   // SIZE_MAX for a plan that failed to build
  // Runs plan `plan` on `stream`-bound handle h; false when cuDNN refuses (never throws).
  virtual bool run(cudnnHandle_t h, const GraphConvBuffers& b, void* workspace, int64_t plan) = 0;
  virtual std::string plan_name(int64_t plan) const = 0;
};

struct Context;

// The start-up choice between the graph and the legacy call for one convolution: the plans of the
// (shared) graph for `spec` timed against legacy(stream) on the real buffers, the faster kept and
// recorded in the algorithm cache under `key` ("legacy", or "graph PLAN NAME", after the level's word), so that a later
// start with the same GPU, cuDNN, precision and shapes builds only what it uses.  A null graph
// means: keep the legacy call.
struct GraphChoice {
  std::shared_ptr<GraphConv> graph;
  int64_t plan = -1;
};
// `level` (autotune.h): how many plans are timed, and which cached choices count.
GraphChoice choose_graph_conv(Context& ctx, const GraphConvSpec& spec, const std::string& key, TuneLevel level,
                              const GraphConvBuffers& b, const std::function<void(cudaStream_t)>& legacy);

}  // namespace sluice::cuda
