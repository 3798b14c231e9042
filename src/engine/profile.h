#pragma once
// What `sluice profile` reports about an engine: the time of each step of one forward pass (mean
// over replays), the bytes it must move and the floating-point operations it must do (both counted
// from the tensor shapes, not measured), and the device's own ceilings measured in the same run, so
// each step's achieved rate reads as a fraction of what the hardware can do.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "model/graph.h"

namespace sluice {

struct StepProfile {
  std::string name;    // the step's label: the node name, plus a suffix for helper steps
  std::string kind;    // the op ("Conv", "Resize", ...) or what a helper step does ("Layout", "Convert")
  double ms = 0;       // mean time over the replays
  double bytes = 0;    // each tensor the step reads or writes counted once (the fewest bytes it can move)
  double flops = 0;    // 2 per multiply-add for products and convolutions, about 1 per element otherwise
};

// The device's ceilings, measured by the profiler in the same process.
struct DevicePeaks {
  double bytes_per_s = 0;     // a large device-to-device copy (bytes read + bytes written) / time
  double flops_per_s = 0;     // a large matrix product at the engine's precision
  std::string bytes_how, flops_how;   // what was measured, for the report
};

struct EngineProfile {
  std::string engine;         // Engine::describe()
  std::string precision;
  int replays = 0;
  double forward_ms = 0;      // one forward pass as the pipeline runs it (CUDA: graph replay), median
  double steps_ms = 0;        // sum of the steps' means (each step timed on its own: a bit above forward_ms)
  DevicePeaks peaks;
  std::vector<StepProfile> steps;   // in execution order
};

struct ProfileOptions {
  int replays = 20;           // timed passes (after one warm-up pass)
  bool peaks = true;          // measure the device ceilings
};

// FLOPs of one node from its tensors' shapes (inputs and outputs as the node names them; absent
// optional tensors as empty shapes): 2 per multiply-add for Conv, FusedConv, ConvTranspose, Gemm
// and MatMul; the window size per output for pooling; the taps per output for Resize; one per
// output element for elementwise arithmetic and reductions; 0 for ops that only move data.
double node_flops(const Node& n, const std::vector<Shape>& in, const std::vector<Shape>& out);

}  // namespace sluice
