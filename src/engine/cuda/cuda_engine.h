#pragma once
// What the CUDA engine tells beyond the Engine interface: its build figures (for logs and tests)
// and blocking helpers for one-off runs (`sluice forward --device cuda`, tests).
#include <cstddef>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "engine/engine.h"

namespace sluice::cuda {

struct EngineStats {
  int steps = 0;            // enqueued operations per forward pass
  int convolutions = 0;     // cuDNN convolution steps
  int atrous_convolutions = 0;   // dilated convolutions run by space-to-batch (ops_conv.cpp)
  int graph_convolutions = 0;    // convolutions run as a cuDNN graph (conv_graph.h)
  int gemm_convolutions = 0;     // 1x1 convolutions run as one cuBLASLt product (ops_conv.cpp)
  int algos_measured = 0;   // convolution algorithms chosen at this start (timed or by heuristics)
  int algos_cached = 0;     // ... and read from the algorithm cache
  int products_measured = 0;   // cuBLASLt products whose algorithm was timed at this start (gemm_lt.h)
  int products_cached = 0;     // ... and read from the algorithm cache (or an identical product's timing)
  int algos_untimed = 0;    // of the measured: cuDNN's first choice, nothing timed (autotune.h)
  int candidates_timed = 0; // algorithms and graph plans timed (cudnnFind's count as one per algorithm it returned)
  // The samples the timed convolutions were timed on, summed, and their batches summed: quick
  // autotuning times a part of each batch (algo_cache.h, tuning_batch).
  int64_t samples_timed = 0, samples_full = 0;
  std::size_t arena_bytes = 0;   // activation arena after the memory plan
  std::size_t naive_bytes = 0;   // what one buffer per activation would have taken
  std::size_t weight_bytes = 0, workspace_bytes = 0, io_bytes = 0;
  bool graphs_captured = false;  // forward() replays CUDA graphs
};

// The figures of a CUDA engine; nullptr for any other engine.
const EngineStats* engine_stats(const Engine& e);

// Copies `input` into set `set`'s input buffer, runs forward and returns the outputs as host
// tensors (graph dtypes).  Blocks; works for the cpu engine too.  Not for the steady state.
std::vector<Tensor> run_forward(Engine& e, const Tensor& input, int set = 0);

// The keys of the engine's op registry (builder.cpp), "Op" or "domain.Op", sorted: the ops the
// builder dispatches to a lowering, and what `sluice check` holds a model to when no GPU is visible.
// Needs no GPU.  tests/unit/test_op_registry.cpp holds them to the model layer's op table, the GPU
// tests every key to a lowering that takes it.
std::vector<std::string> implemented_ops();

}  // namespace sluice::cuda
