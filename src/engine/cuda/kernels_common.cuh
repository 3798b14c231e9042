#pragma once
// Device helpers shared by the kernel files: float conversion of the storage types, launch shapes
// and the type dispatch from DType to a template instantiation.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "core/error.h"
#include "engine/cuda/cuda_check.h"
#include "model/dtype.h"

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
