#pragma once
// Device helpers shared by the kernel files: float conversion of the storage types, launch shapes,
// warp reductions and the type dispatch from DType to a template instantiation.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "core/cuda/cuda_check.h"
#include "core/dtype.h"
#include "core/error.h"

namespace sluice::cuda {

template <typename T> __device__ __forceinline__ float to_f(T v) { return static_cast<float>(v); }
template <> __device__ __forceinline__ float to_f<__half>(__half v) { return __half2float(v); }
template <> __device__ __forceinline__ float to_f<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T> __device__ __forceinline__ T from_f(float v) { return static_cast<T>(v); }
template <> __device__ __forceinline__ __half from_f<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

constexpr int kThreads = 256;

// Grid for a grid-stride loop over n items: enough blocks to fill the GPU many times over, capped
// so huge tensors loop instead of launching millions of blocks.
inline unsigned grid_for(int64_t n, int threads = kThreads) {
  int64_t blocks = (n + threads - 1) / threads;
  if (blocks < 1) blocks = 1;
  if (blocks > (1 << 20)) blocks = 1 << 20;
  return static_cast<unsigned>(blocks);
}

#define SLUICE_GRID_STRIDE(i, n)                                                             \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n);     \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

// One warp per row: `row` takes this warp's rows of [0, rows), a grid's worth of warps apart.
#define SLUICE_WARP_ROWS(row, rows)                                                                  \
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32; row < (rows); \
       row += static_cast<int64_t>(gridDim.x) * (blockDim.x / 32))

// The grid of a SLUICE_WARP_ROWS loop over `rows` with kThreads per block.
inline unsigned warp_grid(int64_t rows) { return grid_for(rows, kThreads / 32); }

// ---- warp reductions -------------------------------------------------------------------------
// Over the 32 lanes of a warp, all active; every lane gets the result.
constexpr unsigned kFull = 0xffffffffu;

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFull, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFull, v, o));
  return v;
}

// ---- fast integer division -------------------------------------------------------------------
// Index arithmetic dominates the instruction count of the memory-bound kernels: a 64-bit division
// is a long software sequence, a 32-bit one still tens of instructions.  A divisor fixed at launch
// becomes a multiply-high, an add and a shift (Granlund and Montgomery's method): q = (umulhi(n, m)
// + n) >> s with s = ceil(log2(d)) and m = floor(2^32 (2^s - d) / d) + 1, exact for n < 2^31.
struct FastDiv {
  uint32_t d = 1, mul = 0, shift = 0;
  FastDiv() = default;
  explicit FastDiv(int64_t divisor) {
    SLUICE_CHECK(divisor >= 1 && divisor < (int64_t{1} << 31), "FastDiv: divisor ", divisor, " out of range");
    d = static_cast<uint32_t>(divisor);
    while ((uint64_t{1} << shift) < d) ++shift;
    mul = static_cast<uint32_t>(((uint64_t{1} << 32) * ((uint64_t{1} << shift) - d)) / d + 1);
  }
  __device__ __forceinline__ uint32_t div(uint32_t n) const { return (__umulhi(n, mul) + n) >> shift; }
  // n = q * d + r
  __device__ __forceinline__ uint32_t divmod(uint32_t n, uint32_t* r) const {
    const uint32_t q = div(n);
    *r = n - q * d;
    return q;
  }
};

// Whether 32-bit index arithmetic covers n items (the fast kernels' precondition).
inline bool fits_int32(int64_t n) { return n >= 0 && n < (int64_t{1} << 31); }

// ---- vectors of elements --------------------------------------------------------------------------
// K elements of T loaded or stored as one access of K * sizeof(T) bytes (4, 8 or 16): the widest
// access a thread can make, which is what keeps enough bytes in flight to reach HBM bandwidth.
template <typename T, int K>
struct alignas(sizeof(T) * K) Pack {
  T v[K];
};
// Elements of T in a 16-byte access.
template <typename T>
constexpr int kVec = 16 / sizeof(T) > 0 ? static_cast<int>(16 / sizeof(T)) : 1;

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// A grid for a grid-stride loop over n work items with `threads` per block, no larger than a few
// waves of the GPU (extra blocks only add scheduling).
unsigned waves_grid(int64_t n, int threads = kThreads);

// Calls f(T{}) with T the storage type of a float dtype.
template <typename F>
void dispatch_float(DType t, F&& f) {
  switch (t) {
    case DType::F32: f(float{}); return;
    case DType::F16: f(__half{}); return;
    case DType::BF16: f(__nv_bfloat16{}); return;
    default: SLUICE_THROW("cuda kernel: element type ", dtype_name(t), " is not a float type");
  }
}

// Unsigned storage of the same size, for kernels that only move bytes.
template <typename F>
void dispatch_size(std::size_t bytes, F&& f) {
  switch (bytes) {
    case 1: f(uint8_t{}); return;
    case 2: f(uint16_t{}); return;
    case 4: f(uint32_t{}); return;
    case 8: f(uint64_t{}); return;
    default: SLUICE_THROW("cuda kernel: element size ", bytes, " is not supported");
  }
}

}  // namespace sluice::cuda
