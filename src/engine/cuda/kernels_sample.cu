// DepthToSpace / SpaceToDepth, the index tuples of GatherElements / ScatterElements and GridSample
// (kernels_sample.h).  Grid-stride loops over the output, 64-bit indices; every step is a plain
// kernel launch on the step's stream, so it runs inside the captured CUDA graph.
#include "engine/cuda/kernels_common.cuh"
#include "engine/cuda/kernels_sample.h"

namespace sluice::cuda {
namespace {

template <typename U>
__global__ void depth_space_kernel(const U* x, U* y, int64_t total, DepthSpaceShape s) {
  const int64_t b = s.b, sc = s.dc / (b * b), sh = s.dh * b, sw = s.dw * b;
  SLUICE_GRID_STRIDE(o, total) {
    int64_t r = o, ni, ch, yy, xx, i, j, c;
    if (s.to_space) {  // o indexes the space side [n, sc, sh, sw]
      const int64_t X = r % sw;
      r /= sw;
      const int64_t Y = r % sh;
      r /= sh;
      c = r % sc;
      ni = r / sc;
      yy = Y / b, i = Y - yy * b, xx = X / b, j = X - xx * b;
      ch = s.crd ? (c * b + i) * b + j : (i * b + j) * sc + c;
      y[o] = x[((ni * s.dc + ch) * s.dh + yy) * s.dw + xx];
    } else {  // o indexes the depth side [n, dc, dh, dw]
      xx = r % s.dw;
      r /= s.dw;
      yy = r % s.dh;
      r /= s.dh;
      ch = r % s.dc;
      ni = r / s.dc;
      c = ch % sc;
      const int64_t ij = ch / sc;
      i = ij / b, j = ij - i * b;
      y[o] = x[((ni * sc + c) * sh + yy * b + i) * sw + xx * b + j];
    }
  }
}

template <typename I>
__global__ void element_tuples_kernel(const I* idx, int64_t* tuples, ElementTuples s, int64_t axis_dim) {
  SLUICE_GRID_STRIDE(p, s.count) {
    int64_t r = p;
    int64_t* t = tuples + p * s.rank;
    for (int d = s.rank - 1; d >= 0; --d) {
      const int64_t k = r % s.dims[d];
      r /= s.dims[d];
      t[d] = k;
    }
    int64_t v = static_cast<int64_t>(idx[p]);
    if (v < 0) v += axis_dim;  // out of range stays out of range: nd_offset clamps it
    t[s.axis] = v;
  }
}

template <typename T>
__global__ void grid_sample_kernel(const T* x, const T* grid, T* y, int64_t total, GridSampleSpec s) {
  const int64_t points = s.ho * s.wo;
  SLUICE_GRID_STRIDE(o, total) {
    const int64_t p = o % points, plane = o / points, ni = plane / s.c;
    const T* xp = x + plane * s.h * s.w;
    const T* g = grid + (ni * points + p) * 2;
    auto at = [&](int64_t yi, int64_t xi) { return to_f(xp[yi * s.w + xi]); };
    y[o] = from_f<T>(grid_sample_point(at, s, to_f(g[0]), to_f(g[1])));
  }
}

}  // namespace

void depth_space(std::size_t elem_size, const void* x, void* y, const DepthSpaceShape& s, cudaStream_t st) {
  const int64_t total = s.n * s.dc * s.dh * s.dw;
  if (total <= 0) return;
  dispatch_size(elem_size, [&](auto tag) {
    using U = decltype(tag);
    depth_space_kernel<U><<<grid_for(total), kThreads, 0, st>>>(static_cast<const U*>(x), static_cast<U*>(y), total, s);
  });
  CUDA_CHECK_LAUNCH();
}

void element_tuples(DType index_type, const void* idx, int64_t* tuples, const ElementTuples& s, int64_t axis_dim,
                    cudaStream_t st) {
  if (s.count <= 0) return;
  if (index_type == DType::I32)
    element_tuples_kernel<<<grid_for(s.count), kThreads, 0, st>>>(static_cast<const int32_t*>(idx), tuples, s, axis_dim);
  else
    element_tuples_kernel<<<grid_for(s.count), kThreads, 0, st>>>(static_cast<const int64_t*>(idx), tuples, s, axis_dim);
  CUDA_CHECK_LAUNCH();
}

void grid_sample(DType t, const void* x, const void* grid, void* y, const GridSampleSpec& s, cudaStream_t st) {
  const int64_t total = s.n * s.c * s.ho * s.wo;
  if (total <= 0) return;
  dispatch_float(t, [&](auto tag) {
    using T = decltype(tag);
    grid_sample_kernel<T><<<grid_for(total), kThreads, 0, st>>>(static_cast<const T*>(x), static_cast<const T*>(grid),
                                                                static_cast<T*>(y), total, s);
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace sluice::cuda
