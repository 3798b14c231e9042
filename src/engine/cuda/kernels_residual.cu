// The residual stream's kernels: the mixed-type residual Add and LayerNormalization fused with it
// (kernels.h).  Operands of different element types are read through a per-pointer type code (the
// branch is uniform across the grid, so it costs no divergence).
#include "engine/cuda/kernels.h"
#include "engine/cuda/kernels_common.cuh"

namespace sluice::cuda {
namespace {

constexpr unsigned kFull = 0xffffffffu;
// Elements of a row each lane keeps in registers; longer rows are read again for each pass.
constexpr int kPerLane = 32;

enum Code : int { kF32 = 0, kF16 = 1, kBF16 = 2 };

Code code(DType t) {
  switch (t) {
    case DType::F32: return kF32;
    case DType::F16: return kF16;
    case DType::BF16: return kBF16;
    default: SLUICE_THROW("cuda residual kernel: element type ", dtype_name(t), " is not a float type");
  }
}

__device__ __forceinline__ float load(const void* p, int c, int64_t i) {
  if (c == kF32) return static_cast<const float*>(p)[i];
  if (c == kF16) return __half2float(static_cast<const __half*>(p)[i]);
  return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
}

__device__ __forceinline__ void store(void* p, int c, int64_t i, float v) {
  if (c == kF32) static_cast<float*>(p)[i] = v;
  else if (c == kF16) static_cast<__half*>(p)[i] = __float2half_rn(v);
  else static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v);
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFull, v, o);
  return v;
}

struct Operand {
  const void* p;
  int c;
  int64_t count;
  __device__ __forceinline__ float at(int64_t i) const { return load(p, c, count == 0 ? i : i % count); }
};

__global__ void residual_add_kernel(Operand a, Operand b, void* y, int cy, int64_t n, bool multiply) {
  SLUICE_GRID_STRIDE(i, n) store(y, cy, i, multiply ? a.at(i) * b.at(i) : a.at(i) + b.at(i));
}

struct NormArgs {
  Operand a, b;
  bool add;
  void* sum;
  int csum;
  void* y;
  int cy;
  void* mean;
  void* inv;
  int cstat;
  int64_t rows, cols;
  float eps;
  const float* gamma;
  const float* beta;
};

// One warp per row.  The row's values stay in registers when it is at most 32 * kPerLane long; the
// variance is the mean of squared deviations from the mean (two passes, accurate for large means).
__global__ void residual_norm_kernel(NormArgs r) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / 32);
  const bool cached = r.cols <= 32 * kPerLane;
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32; row < r.rows; row += warps) {
    const int64_t base = row * r.cols;
    auto value = [&](int64_t j) { return r.add ? r.a.at(base + j) + r.b.at(base + j) : r.a.at(base + j); };
    float v[kPerLane];
    float sum = 0.f;
    if (cached) {
#pragma unroll
      for (int k = 0; k < kPerLane; ++k) {
        const int64_t j = lane + 32 * k;
        v[k] = j < r.cols ? value(j) : 0.f;
        sum += v[k];
      }
    } else {
      for (int64_t j = lane; j < r.cols; j += 32) sum += value(j);
    }
    const float mean = warp_sum(sum) / static_cast<float>(r.cols);
    float sq = 0.f;
    if (cached) {
#pragma unroll
      for (int k = 0; k < kPerLane; ++k) {
        const int64_t j = lane + 32 * k;
        const float d = j < r.cols ? v[k] - mean : 0.f;
        sq += d * d;
      }
    } else {
      for (int64_t j = lane; j < r.cols; j += 32) {
        const float d = value(j) - mean;
        sq += d * d;
      }
    }
    const float inv = rsqrtf(warp_sum(sq) / static_cast<float>(r.cols) + r.eps);
    auto emit = [&](int64_t j, float x) {
      if (r.sum) store(r.sum, r.csum, base + j, x);
      float o = (x - mean) * inv;
      if (r.gamma) o *= r.gamma[j];
      if (r.beta) o += r.beta[j];
      store(r.y, r.cy, base + j, o);
    };
    if (cached) {
#pragma unroll
      for (int k = 0; k < kPerLane; ++k) {
        const int64_t j = lane + 32 * k;
        if (j < r.cols) emit(j, v[k]);
      }
    } else {
      for (int64_t j = lane; j < r.cols; j += 32) emit(j, value(j));
    }
    if (lane == 0) {
      if (r.mean) store(r.mean, r.cstat, row, mean);
      if (r.inv) store(r.inv, r.cstat, row, inv);
    }
  }
}


// ---- the same two kernels with the element types known at compile time ----
// The type-coded loads above keep a runtime branch and a 64-bit modulo in every access, which
// leaves each lane's loads serialized: the fused LayerNorm ran at 7 % of the copy rate on the
// H200 (ViT-S rows of 384).  These take the common case (no operand repeating inside the row
// loop for the norm, 32-bit indices for the add) with plain typed loads the compiler can issue
// all at once.

template <typename T> __device__ __forceinline__ float to_f(T v);
template <> __device__ __forceinline__ float to_f<float>(float v) { return v; }
template <> __device__ __forceinline__ float to_f<__half>(__half v) { return __half2float(v); }
template <> __device__ __forceinline__ float to_f<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> __device__ __forceinline__ T from_f(float v);
template <> __device__ __forceinline__ float from_f<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_f<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

struct FastNorm {
  const void* a;
  const void* b;   // null: no add
  float* sum;      // fp32 running sum out, or null
  void* y;
  void* mean;
  void* inv;
  int cstat;
  int64_t rows;
  int cols;
  float eps;
  const float* gamma;
  const float* beta;
};

template <typename A, typename B, typename Y>
__global__ void residual_norm_typed(FastNorm r) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / 32);
  const A* a = static_cast<const A*>(r.a);
  const B* b = static_cast<const B*>(r.b);
  Y* y = static_cast<Y*>(r.y);
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32; row < r.rows; row += warps) {
    const int64_t base = row * r.cols;
    float v[kPerLane];
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) {
      const int j = lane + 32 * k;
      v[k] = j < r.cols ? to_f(a[base + j]) : 0.f;
    }
    if (b) {
#pragma unroll
      for (int k = 0; k < kPerLane; ++k) {
        const int j = lane + 32 * k;
        if (j < r.cols) v[k] += to_f(b[base + j]);
      }
    }
    float total = 0.f;
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) total += v[k];
    const float mean = warp_sum(total) / static_cast<float>(r.cols);
    float sq = 0.f;
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) {
      const int j = lane + 32 * k;
      const float d = j < r.cols ? v[k] - mean : 0.f;
      sq += d * d;
    }
    const float inv = rsqrtf(warp_sum(sq) / static_cast<float>(r.cols) + r.eps);
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) {
      const int j = lane + 32 * k;
      if (j >= r.cols) continue;
      if (r.sum) r.sum[base + j] = v[k];
      float o = (v[k] - mean) * inv;
      if (r.gamma) o *= r.gamma[j];
      if (r.beta) o += r.beta[j];
      y[base + j] = from_f<Y>(o);
    }
    if (lane == 0) {
      if (r.mean) store(r.mean, r.cstat, row, mean);
      if (r.inv) store(r.inv, r.cstat, row, inv);
    }
  }
}

template <typename A, typename B, typename Y>
__global__ void residual_add_typed(const A* a, uint32_t ca, const B* b, uint32_t cb, Y* y, uint32_t n, bool multiply) {
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    const float x = to_f(a[ca ? i % ca : i]), z = to_f(b[cb ? i % cb : i]);
    y[i] = from_f<Y>(multiply ? x * z : x + z);
  }
}

Operand operand(const ResidualOperand& o, int64_t n) {
  return Operand{o.p, code(o.t), o.count >= n ? 0 : o.count};
}

}  // namespace

void residual_add(const ResidualOperand& a, const ResidualOperand& b, void* y, DType ty, int64_t n, cudaStream_t s,
                  bool multiply) {
  if (n <= 0) return;
  SLUICE_CHECK(a.count > 0 && b.count > 0 && n % a.count == 0 && n % b.count == 0,
               "cuda residual_add: operands of ", a.count, " and ", b.count, " elements do not repeat onto ", n);
  if (n < (int64_t{1} << 31)) {
    const uint32_t ca = a.count >= n ? 0 : static_cast<uint32_t>(a.count), cb = b.count >= n ? 0 : static_cast<uint32_t>(b.count);
    dispatch_float(a.t, [&](auto ta) {
      dispatch_float(b.t, [&](auto tb) {
        dispatch_float(ty, [&](auto tyv) {
          using A = decltype(ta);
          using B = decltype(tb);
          using Y = decltype(tyv);
          residual_add_typed<A, B, Y><<<grid_for(n), kThreads, 0, s>>>(static_cast<const A*>(a.p), ca, static_cast<const B*>(b.p), cb,
                                                                      static_cast<Y*>(y), static_cast<uint32_t>(n), multiply);
        });
      });
    });
  } else {
    residual_add_kernel<<<grid_for(n), kThreads, 0, s>>>(operand(a, n), operand(b, n), y, code(ty), n, multiply);
  }
  CUDA_CHECK_LAUNCH();
}

void residual_norm(const ResidualNorm& r, cudaStream_t s) {
  if (r.rows <= 0 || r.cols <= 0) return;
  const int64_t n = r.rows * r.cols;
  const bool add = r.b.p != nullptr;
  SLUICE_CHECK(r.a.count > 0 && n % r.a.count == 0 && (!add || (r.b.count > 0 && n % r.b.count == 0)),
               "cuda residual_norm: operands of ", r.a.count, " and ", r.b.count, " elements do not repeat onto ", n);
  NormArgs k{operand(r.a, n), add ? operand(r.b, n) : Operand{nullptr, kF32, 0}, add, r.sum, code(r.tsum), r.y, code(r.ty),
             r.mean, r.inv, code(r.tstat), r.rows, r.cols, r.eps, r.gamma, r.beta};
  const int64_t per_block = kThreads / 32;
  int64_t blocks = (r.rows + per_block - 1) / per_block;
  if (blocks > (1 << 20)) blocks = 1 << 20;
  // The typed kernel: operands that do not repeat, rows held in registers, an fp32 sum (or none).
  const bool typed = r.cols <= 32 * kPerLane && r.a.count >= n && (!add || r.b.count >= n) &&
                     (!r.sum || r.tsum == DType::F32);
  if (typed) {
    FastNorm f{r.a.p, add ? r.b.p : nullptr, static_cast<float*>(r.sum), r.y, r.mean, r.inv, code(r.tstat),
               r.rows, static_cast<int>(r.cols), r.eps, r.gamma, r.beta};
    dispatch_float(r.a.t, [&](auto ta) {
      dispatch_float(add ? r.b.t : r.a.t, [&](auto tb) {
        dispatch_float(r.ty, [&](auto tyv) {
          residual_norm_typed<decltype(ta), decltype(tb), decltype(tyv)><<<static_cast<unsigned>(blocks), kThreads, 0, s>>>(f);
        });
      });
    });
  } else {
    residual_norm_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, s>>>(k);
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace sluice::cuda
