#pragma once
// Kernels of DepthToSpace / SpaceToDepth, GatherElements / ScatterElements (their index tuples) and
// GridSample (kernels_sample.cu; lowered by ops_sample.cpp).
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "engine/cuda/kernels.h"
#include "engine/grid_sample.h"

namespace sluice::cuda {

// The depth side [n, dc, dh, dw] and the space side [n, dc / (b b), dh b, dw b] of DepthToSpace
// (to_space: the space side is written) or SpaceToDepth (the depth side is written).  Depth channel
// (i b + j) sc + s, or s b b + i b + j with crd, holds space pixel (y b + i, x b + j) of channel s.
struct DepthSpaceShape {
  int64_t n = 0, dc = 0, dh = 0, dw = 0, b = 1;
  bool crd = false, to_space = true;
};
void depth_space(std::size_t elem_size, const void* x, void* y, const DepthSpaceShape& s, cudaStream_t st);

// GatherElements / ScatterElements as GatherND / ScatterND over every axis: the index at each
// position p of indices [rank dims] becomes the tuple (p's coordinates, with the one on `axis`
// replaced by the index, negative ones counted from the end) in tuples [count, rank].  The indices
// are int64 or int32 (index_type).
struct ElementTuples {
  int rank = 0, axis = 0;
  int64_t dims[kMaxRank] = {};  // indices' shape
  int64_t count = 0;
};
void element_tuples(DType index_type, const void* idx, int64_t* tuples, const ElementTuples& s, int64_t axis_dim,
                    cudaStream_t st);

// GridSample of 2-D images (engine/grid_sample.h): x [n, c, h, w], grid [n, ho, wo, 2], y [n, c, ho, wo],
// float types, computed in fp32.
void grid_sample(DType t, const void* x, const void* grid, void* y, const GridSampleSpec& s, cudaStream_t st);

}  // namespace sluice::cuda
