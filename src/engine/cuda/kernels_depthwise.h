#pragma once
// Which depthwise kernel a step runs, chosen at the step's preparation (ops_depthwise.cpp) from
// the environment switches, so that a switch set between two engine builds takes effect:
//   SLUICE_CUDA_DEPTHWISE_TILE=0  no shared-memory tile kernel (the row kernel, as before it)
//   SLUICE_CUDA_DEPTHWISE_ROWS=0  no row kernel either (the one-pixel kernel)
#include <cuda_runtime.h>

#include "engine/cuda/kernels.h"

namespace sluice::cuda {

struct DepthwiseChoice {
  bool tile = true;   // stride-1 3/5/7-wide layers on the shared-memory tile kernel
  bool rows = true;   // else on the row kernel (four pixels a thread)
};

// Reads SLUICE_CUDA_DEPTHWISE_TILE and SLUICE_CUDA_DEPTHWISE_ROWS (each unset, 0 or 1).
DepthwiseChoice depthwise_choice_from_env();

void depthwise_conv(DType t, const void* x, const void* w, const void* bias, const void* z, void* y,
                    const DepthwiseShape& s, ActParams act, DepthwiseChoice choice, cudaStream_t st);

}  // namespace sluice::cuda
