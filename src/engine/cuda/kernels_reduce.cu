// Kernels that reduce along one axis: reductions, softmax, argmax and top-k (pooling windows:
// kernels_pool.cu).
// Rows along the last axis (inner == 1) get one warp each so the reads are coalesced; reductions
// over a middle axis give one thread to each (outer, inner) pair, whose reads are coalesced across
// the threads of a warp.
#include <algorithm>
#include <cfloat>

#include "engine/cuda/kernels.h"
#include "engine/cuda/kernels_common.cuh"

namespace sluice::cuda {
namespace {

// ---- reductions ----------------------------------------------------------------------------------

__device__ __forceinline__ float red_init(RedOp op) {
  switch (op) {
    case RedOp::Max: return -INFINITY;
    case RedOp::Min: return INFINITY;
    case RedOp::Prod: return 1.f;
    default: return 0.f;
  }
}
__device__ __forceinline__ float red_step(RedOp op, float acc, float v) {
  switch (op) {
    case RedOp::Max: return fmaxf(acc, v);
    case RedOp::Min: return fminf(acc, v);
    case RedOp::Prod: return acc * v;
    case RedOp::SumSquare:
    case RedOp::L2: return acc + v * v;
    case RedOp::L1: return acc + fabsf(v);
    default: return acc + v;
  }
}
__device__ __forceinline__ float red_combine(RedOp op, float a, float b) {
  switch (op) {
    case RedOp::Max: return fmaxf(a, b);
    case RedOp::Min: return fminf(a, b);
    case RedOp::Prod: return a * b;
    default: return a + b;
  }
}
__device__ __forceinline__ float red_final(RedOp op, float acc, int64_t r) {
  switch (op) {
    case RedOp::Mean: return acc / static_cast<float>(r);
    case RedOp::L2: return sqrtf(acc);
    default: return acc;
  }
}

// The max of a row and the sum of exp(x - max) over it: the shared first half of LogSumExp and
// softmax, which subtract the max so that exp cannot overflow.
struct MaxSumExp {
  float max, sum;
};

// Over r contiguous elements, by the 32 lanes of one warp together; every lane gets the result.
template <typename T>
__device__ __forceinline__ MaxSumExp warp_max_sum_exp(const T* xr, int64_t r, int lane) {
  float m = -INFINITY;
  for (int64_t j = lane; j < r; j += 32) m = fmaxf(m, to_f(xr[j]));
  m = warp_max(m);
  float sum = 0.f;
  for (int64_t j = lane; j < r; j += 32) sum += expf(to_f(xr[j]) - m);
  return {m, warp_sum(sum)};
}

// Over r elements `inner` apart, by one thread.
template <typename T>
__device__ __forceinline__ MaxSumExp strided_max_sum_exp(const T* xp, int64_t r, int64_t inner) {
  float m = -INFINITY;
  for (int64_t j = 0; j < r; ++j) m = fmaxf(m, to_f(xp[j * inner]));
  float sum = 0.f;
  for (int64_t j = 0; j < r; ++j) sum += expf(to_f(xp[j * inner]) - m);
  return {m, sum};
}

// One warp per row of r contiguous elements.  LogSumExp takes two passes (max, then the sum).
template <typename T>
__global__ void reduce_rows_kernel(const T* x, T* y, int64_t rows, int64_t r, RedOp op) {
  const int lane = threadIdx.x & 31;
  SLUICE_WARP_ROWS(row, rows) {
    const T* xr = x + row * r;
    float out;
    if (op == RedOp::LogSumExp) {
      const MaxSumExp e = warp_max_sum_exp(xr, r, lane);
      out = logf(e.sum) + e.max;
    } else {
      float acc = red_init(op);
      for (int64_t j = lane; j < r; j += 32) acc = red_step(op, acc, to_f(xr[j]));
      for (int o = 16; o > 0; o >>= 1) acc = red_combine(op, acc, __shfl_xor_sync(kFull, acc, o));
      out = red_final(op, acc, r);
    }
    if (lane == 0) y[row] = from_f<T>(out);
  }
}

template <typename T>
__global__ void reduce_mid_kernel(const T* x, T* y, int64_t outer, int64_t r, int64_t inner, RedOp op) {
  SLUICE_GRID_STRIDE(i, outer * inner) {
    const int64_t o = i / inner, in = i - o * inner;
    const T* xp = x + o * r * inner + in;
    float out;
    if (op == RedOp::LogSumExp) {
      const MaxSumExp e = strided_max_sum_exp(xp, r, inner);
      out = logf(e.sum) + e.max;
    } else {
      float acc = red_init(op);
      for (int64_t j = 0; j < r; ++j) acc = red_step(op, acc, to_f(xp[j * inner]));
      out = red_final(op, acc, r);
    }
    y[i] = from_f<T>(out);
  }
}

// Reductions over the middle axis of [outer, r, inner] with inner > 1 (a channels-last global pool:
// [N, H*W, C]).  Each thread owns K adjacent columns (one 16-byte access per row) of one `outer`
// slice and a 1/by share of the rows; the block's by partial results are combined in shared memory.
// A block covers bx column packs; the grid covers (column packs / bx, outer).
template <typename T, int K>
__global__ void reduce_cols_kernel(const T* __restrict__ x, T* __restrict__ y, uint32_t r, uint32_t inner,
                                   uint32_t packs, RedOp op) {
  extern __shared__ float partial[];   // [by][bx][K]
  const uint32_t cp = blockIdx.x * blockDim.x + threadIdx.x;
  const uint32_t o = blockIdx.y;
  float acc[K];
#pragma unroll
  for (int k = 0; k < K; ++k) acc[k] = red_init(op);
  if (cp < packs) {
    const T* col = x + static_cast<size_t>(o) * r * inner + cp * K;
#pragma unroll 4
    for (uint32_t j = threadIdx.y; j < r; j += blockDim.y) {
      const Pack<T, K> v = *reinterpret_cast<const Pack<T, K>*>(col + static_cast<size_t>(j) * inner);
#pragma unroll
      for (int k = 0; k < K; ++k) acc[k] = red_step(op, acc[k], to_f(v.v[k]));
    }
  }
  float* mine = partial + (threadIdx.y * blockDim.x + threadIdx.x) * K;
#pragma unroll
  for (int k = 0; k < K; ++k) mine[k] = acc[k];
  __syncthreads();
  if (threadIdx.y != 0 || cp >= packs) return;
  for (uint32_t t = 1; t < blockDim.y; ++t) {
    const float* other = partial + (t * blockDim.x + threadIdx.x) * K;
#pragma unroll
    for (int k = 0; k < K; ++k) acc[k] = red_combine(op, acc[k], other[k]);
  }
  Pack<T, K> out;
#pragma unroll
  for (int k = 0; k < K; ++k) out.v[k] = from_f<T>(red_final(op, acc[k], r));
  *reinterpret_cast<Pack<T, K>*>(y + static_cast<size_t>(o) * inner + cp * K) = out;
}

// Launches the column kernel when it applies (not LogSumExp, 32-bit sizes); false otherwise.
template <typename T>
bool launch_reduce_cols(const T* x, T* y, int64_t outer, int64_t r, int64_t inner, RedOp op, cudaStream_t s) {
  if (!fast_kernels() || op == RedOp::LogSumExp || !fits_int32(outer * r * inner) || outer > 65535) return false;
  constexpr int K = kVec<T>;
  const bool packed = inner % K == 0 && aligned16(x) && aligned16(y);
  const int64_t packs = packed ? inner / K : inner;
  unsigned bx = 1;
  while (bx < 32 && bx < packs) bx *= 2;
  const unsigned by = std::max(1u, kThreads / bx);
  const dim3 grid(static_cast<unsigned>((packs + bx - 1) / bx), static_cast<unsigned>(outer));
  const std::size_t shared = static_cast<std::size_t>(bx) * by * (packed ? K : 1) * sizeof(float);
  if (packed)
    reduce_cols_kernel<T, K><<<grid, dim3(bx, by), shared, s>>>(x, y, static_cast<uint32_t>(r), static_cast<uint32_t>(inner),
                                                                static_cast<uint32_t>(packs), op);
  else
    reduce_cols_kernel<T, 1><<<grid, dim3(bx, by), shared, s>>>(x, y, static_cast<uint32_t>(r), static_cast<uint32_t>(inner),
                                                                static_cast<uint32_t>(packs), op);
  return true;
}

// ---- softmax -------------------------------------------------------------------------------------

template <typename T>
__global__ void softmax_rows_kernel(const T* x, T* y, int64_t rows, int64_t r, bool log) {
  const int lane = threadIdx.x & 31;
  SLUICE_WARP_ROWS(row, rows) {
    const T* xr = x + row * r;
    T* yr = y + row * r;
    const MaxSumExp e = warp_max_sum_exp(xr, r, lane);
    const float inv = 1.f / e.sum, lsum = logf(e.sum);
    for (int64_t j = lane; j < r; j += 32) {
      const float v = to_f(xr[j]) - e.max;
      yr[j] = from_f<T>(log ? v - lsum : expf(v) * inv);
    }
  }
}

template <typename T>
__global__ void softmax_mid_kernel(const T* x, T* y, int64_t outer, int64_t r, int64_t inner, bool log) {
  SLUICE_GRID_STRIDE(i, outer * inner) {
    const int64_t o = i / inner, in = i - o * inner;
    const T* xp = x + o * r * inner + in;
    T* yp = y + o * r * inner + in;
    const MaxSumExp e = strided_max_sum_exp(xp, r, inner);
    const float inv = 1.f / e.sum, lsum = logf(e.sum);
    for (int64_t j = 0; j < r; ++j) {
      const float v = to_f(xp[j * inner]) - e.max;
      yp[j * inner] = from_f<T>(log ? v - lsum : expf(v) * inv);
    }
  }
}

// ---- argmax --------------------------------------------------------------------------------------

// Is (va, ia) a better pick than (vb, ib)?  Larger (or smaller for argmin) wins; ties go to the
// first index, or to the last with select_last.
__device__ __forceinline__ bool arg_better(float va, int64_t ia, float vb, int64_t ib, bool is_min, bool last) {
  if (ib < 0) return ia >= 0;
  if (ia < 0) return false;
  if (va != vb) return is_min ? va < vb : va > vb;
  return last ? ia > ib : ia < ib;
}

template <typename T, typename I>
__global__ void argmax_rows_kernel(const T* x, I* y, int64_t rows, int64_t r, bool is_min, bool last) {
  const int lane = threadIdx.x & 31;
  SLUICE_WARP_ROWS(row, rows) {
    const T* xr = x + row * r;
    float bv = 0.f;
    int64_t bi = -1;
    for (int64_t j = lane; j < r; j += 32) {
      const float v = to_f(xr[j]);
      if (arg_better(v, j, bv, bi, is_min, last)) { bv = v; bi = j; }
    }
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(kFull, bv, o);
      const int64_t oi = __shfl_xor_sync(kFull, bi, o);
      if (arg_better(ov, oi, bv, bi, is_min, last)) { bv = ov; bi = oi; }
    }
    if (lane == 0) y[row] = static_cast<I>(bi < 0 ? 0 : bi);
  }
}

template <typename T, typename I>
__global__ void argmax_mid_kernel(const T* x, I* y, int64_t outer, int64_t r, int64_t inner, bool is_min, bool last) {
  SLUICE_GRID_STRIDE(i, outer * inner) {
    const int64_t o = i / inner, in = i - o * inner;
    const T* xp = x + o * r * inner + in;
    float bv = 0.f;
    int64_t bi = -1;
    for (int64_t j = 0; j < r; ++j) {
      const float v = to_f(xp[j * inner]);
      if (arg_better(v, j, bv, bi, is_min, last)) { bv = v; bi = j; }
    }
    y[i] = static_cast<I>(bi < 0 ? 0 : bi);
  }
}

// ---- top-k ---------------------------------------------------------------------------------------

// One warp per (outer, inner) row.  Pick j is the best element ranked strictly after pick j-1 in
// the order (value, then lower index), so no element is taken twice and no marks are needed.
template <typename T>
__global__ void topk_kernel(const T* x, T* values, int64_t* indices, int64_t rows, int64_t r, int64_t inner,
                            int64_t k, bool largest) {
  const int lane = threadIdx.x & 31;
  SLUICE_WARP_ROWS(row, rows) {
    const int64_t o = row / inner, in = row - o * inner;
    const T* xp = x + o * r * inner + in;
    float pv = 0.f;
    int64_t pi = -1;
    for (int64_t j = 0; j < k; ++j) {
      float bv = 0.f;
      int64_t bi = -1;
      for (int64_t e = lane; e < r; e += 32) {
        const float v = to_f(xp[e * inner]);
        // candidates must rank after the previous pick
        if (pi >= 0 && !arg_better(pv, pi, v, e, !largest, false)) continue;
        if (arg_better(v, e, bv, bi, !largest, false)) { bv = v; bi = e; }
      }
      for (int off = 16; off > 0; off >>= 1) {
        const float ov = __shfl_xor_sync(kFull, bv, off);
        const int64_t oi = __shfl_xor_sync(kFull, bi, off);
        if (arg_better(ov, oi, bv, bi, !largest, false)) { bv = ov; bi = oi; }
      }
      if (lane == 0) {
        const int64_t dst = (o * k + j) * inner + in;
        values[dst] = xp[(bi < 0 ? 0 : bi) * inner];
        indices[dst] = bi < 0 ? 0 : bi;
      }
      pv = bv;
      pi = bi;
    }
  }
}

// ---- group normalization -------------------------------------------------------------------------

// One block per (sample, group): the group's channels/groups * inner elements are contiguous.
// Mean first, then the mean of squared deviations (two passes over the data keep the variance
// accurate when the mean is large next to the spread).
template <typename T>
__global__ void group_norm_kernel(const T* x, T* y, int64_t channels, int64_t groups, int64_t inner, float eps,
                                  const float* gamma, const float* beta) {
  __shared__ float partial[kThreads / 32];
  __shared__ float result;
  const int64_t per_group = channels / groups;
  const int64_t count = per_group * inner;
  const int64_t g = blockIdx.x % groups;
  const T* xg = x + static_cast<int64_t>(blockIdx.x) * count;
  T* yg = y + static_cast<int64_t>(blockIdx.x) * count;
  const int lane = threadIdx.x & 31, warp = threadIdx.x / 32;
  auto block_sum = [&](float v) {
    v = warp_sum(v);
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    if (warp == 0) {
      float t = lane < static_cast<int>(blockDim.x / 32) ? partial[lane] : 0.f;
      t = warp_sum(t);
      if (lane == 0) result = t;
    }
    __syncthreads();
    const float total = result;
    __syncthreads();
    return total;
  };
  float sum = 0.f;
  for (int64_t j = threadIdx.x; j < count; j += blockDim.x) sum += to_f(xg[j]);
  const float mean = block_sum(sum) / static_cast<float>(count);
  float sq = 0.f;
  for (int64_t j = threadIdx.x; j < count; j += blockDim.x) {
    const float d = to_f(xg[j]) - mean;
    sq += d * d;
  }
  const float inv = rsqrtf(block_sum(sq) / static_cast<float>(count) + eps);
  for (int64_t j = threadIdx.x; j < count; j += blockDim.x) {
    const int64_t c = g * per_group + j / inner;
    float v = (to_f(xg[j]) - mean) * inv;
    if (gamma) v *= gamma[c];
    if (beta) v += beta[c];
    yg[j] = from_f<T>(v);
  }
}

}  // namespace

void reduce(DType t, RedOp op, const void* x, void* y, int64_t outer, int64_t r, int64_t inner, cudaStream_t s) {
  if (outer * inner <= 0) return;
  dispatch_float(t, [&](auto tag) {
    using T = decltype(tag);
    if (inner == 1)
      reduce_rows_kernel<T><<<warp_grid(outer), kThreads, 0, s>>>(static_cast<const T*>(x), static_cast<T*>(y), outer,
                                                                  r, op);
    else if (!launch_reduce_cols(static_cast<const T*>(x), static_cast<T*>(y), outer, r, inner, op, s))
      reduce_mid_kernel<T><<<grid_for(outer * inner), kThreads, 0, s>>>(static_cast<const T*>(x),
                                                                        static_cast<T*>(y), outer, r, inner, op);
  });
  CUDA_CHECK_LAUNCH();
}

void softmax(DType t, const void* x, void* y, int64_t outer, int64_t r, int64_t inner, bool log, cudaStream_t s) {
  if (outer * inner * r <= 0) return;
  dispatch_float(t, [&](auto tag) {
    using T = decltype(tag);
    if (inner == 1)
      softmax_rows_kernel<T><<<warp_grid(outer), kThreads, 0, s>>>(static_cast<const T*>(x), static_cast<T*>(y),
                                                                   outer, r, log);
    else
      softmax_mid_kernel<T><<<grid_for(outer * inner), kThreads, 0, s>>>(static_cast<const T*>(x),
                                                                         static_cast<T*>(y), outer, r, inner, log);
  });
  CUDA_CHECK_LAUNCH();
}

void argmax(DType t, DType index_type, const void* x, void* y, int64_t outer, int64_t r, int64_t inner, bool is_min,
            bool select_last, cudaStream_t s) {
  if (outer * inner <= 0) return;
  dispatch_float(t, [&](auto tag) {
    using T = decltype(tag);
    auto launch = [&](auto itag) {
      using I = decltype(itag);
      if (inner == 1)
        argmax_rows_kernel<T, I><<<warp_grid(outer), kThreads, 0, s>>>(static_cast<const T*>(x), static_cast<I*>(y),
                                                                       outer, r, is_min, select_last);
      else
        argmax_mid_kernel<T, I><<<grid_for(outer * inner), kThreads, 0, s>>>(
            static_cast<const T*>(x), static_cast<I*>(y), outer, r, inner, is_min, select_last);
    };
    switch (index_type) {
      case DType::I64: launch(int64_t{}); break;
      case DType::I32: launch(int32_t{}); break;
      case DType::U8: launch(uint8_t{}); break;
      default: SLUICE_THROW("cuda argmax: index type ", dtype_name(index_type), " is not supported");
    }
  });
  CUDA_CHECK_LAUNCH();
}

void topk(DType t, const void* x, void* values, int64_t* indices, int64_t outer, int64_t r, int64_t inner, int64_t k,
          bool largest, cudaStream_t s) {
  const int64_t rows = outer * inner;
  if (rows <= 0 || k <= 0) return;
  dispatch_float(t, [&](auto tag) {
    using T = decltype(tag);
    topk_kernel<T><<<warp_grid(rows), kThreads, 0, s>>>(static_cast<const T*>(x), static_cast<T*>(values), indices,
                                                        rows, r, inner, k, largest);
  });
  CUDA_CHECK_LAUNCH();
}

void group_norm(DType t, const void* x, void* y, int64_t n, int64_t channels, int64_t groups, int64_t inner, float eps,
                const float* gamma, const float* beta, cudaStream_t s) {
  const int64_t blocks = n * groups;
  if (blocks <= 0 || inner <= 0) return;
  SLUICE_CHECK(groups > 0 && channels % groups == 0, "cuda group_norm: ", channels, " channels in ", groups, " groups");
  SLUICE_CHECK(blocks < (int64_t{1} << 31), "cuda group_norm: ", blocks, " groups are too many for one launch");
  dispatch_float(t, [&](auto tag) {
    using T = decltype(tag);
    group_norm_kernel<T><<<static_cast<unsigned>(blocks), kThreads, 0, s>>>(static_cast<const T*>(x), static_cast<T*>(y),
                                                                            channels, groups, inner, eps, gamma, beta);
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace sluice::cuda
