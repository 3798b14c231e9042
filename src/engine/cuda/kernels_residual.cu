// The residual stream's kernels: the mixed-type residual Add and LayerNormalization fused with it
// (kernels.h).  Each operand has its own element type: known at compile time in the common case,
// otherwise read through a per-pointer type code (the branch is uniform across the grid, so it
// costs no divergence).
#include "engine/cuda/kernels.h"
#include "engine/cuda/kernels_common.cuh"

namespace sluice::cuda {
namespace {

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

// Operand access.  The kernels below are written once over these and instantiated twice: with the
// element types as template parameters (Typed*), plain loads the compiler can issue all at once,
// for the common case; and with each pointer's type read from its code at run time (Coded*), for
// what the typed instantiations do not take.  A type switch and a 64-bit modulo in every access
// leave each lane's loads serialized: the fused LayerNorm read that way ran at 7 % of the copy
// rate on the H200 (ViT-S rows of 384).

// Element i of an operand of `count` elements repeating onto the output (count 0: as long as it).
template <typename T>
struct TypedRepeat {
  const T* p;
  uint32_t count;
  __device__ __forceinline__ float at(uint32_t i) const { return to_f(p[count ? i % count : i]); }
};
// Element i of an operand as long as the output.
template <typename T>
struct TypedIn {
  const T* p;
  __device__ __forceinline__ float at(int64_t i) const { return to_f(p[i]); }
};
template <typename T>
struct TypedOut {
  T* p;
  __device__ __forceinline__ void put(int64_t i, float v) const { p[i] = from_f<T>(v); }
};
struct CodedIn {
  const void* p;
  int c;
  int64_t count;   // 0: as long as the output
  __device__ __forceinline__ float at(int64_t i) const { return load(p, c, count == 0 ? i : i % count); }
};
struct CodedOut {
  void* p;
  int c;
  __device__ __forceinline__ void put(int64_t i, float v) const { store(p, c, i, v); }
};

// I: the index type (32-bit where the output has fewer than 2^31 elements).
template <typename I, typename InA, typename InB, typename Out>
__global__ void residual_add_kernel(InA a, InB b, Out y, I n, bool multiply) {
  for (I i = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += static_cast<I>(gridDim.x) * blockDim.x) {
    const float x = a.at(i), z = b.at(i);
    y.put(i, multiply ? x * z : x + z);
  }
}

// J: the column index type.
template <typename J, typename InA, typename InB, typename OutSum, typename OutY>
struct NormArgs {
  InA a;
  InB b;
  bool add;
  OutSum sum;   // p null: not written
  OutY y;
  CodedOut mean, inv;
  int64_t rows;
  J cols;
  float eps;
  const float* gamma;
  const float* beta;
};

// One warp per row.  The row's values stay in registers when it is at most 32 * kPerLane long
// (always with kInRegisters, which the launch guarantees); longer rows are read again for each
// pass.  The variance is the mean of squared deviations from the mean (two passes, accurate for
// large means).
template <bool kInRegisters, typename J, typename InA, typename InB, typename OutSum, typename OutY>
__global__ void residual_norm_kernel(NormArgs<J, InA, InB, OutSum, OutY> r) {
  const int lane = threadIdx.x & 31;
  const bool cached = kInRegisters || r.cols <= 32 * kPerLane;
  SLUICE_WARP_ROWS(row, r.rows) {
    const int64_t base = row * r.cols;
    auto value = [&](J j) { return r.add ? r.a.at(base + j) + r.b.at(base + j) : r.a.at(base + j); };
    float v[kPerLane];
    float sum = 0.f;
    if (cached) {
#pragma unroll
      for (int k = 0; k < kPerLane; ++k) {
        const J j = lane + 32 * k;
        v[k] = j < r.cols ? r.a.at(base + j) : 0.f;
      }
      if (r.add) {
#pragma unroll
        for (int k = 0; k < kPerLane; ++k) {
          const J j = lane + 32 * k;
          if (j < r.cols) v[k] += r.b.at(base + j);
        }
      }
#pragma unroll
      for (int k = 0; k < kPerLane; ++k) sum += v[k];
    } else {
      for (J j = lane; j < r.cols; j += 32) sum += value(j);
    }
    const float mean = warp_sum(sum) / static_cast<float>(r.cols);
    float sq = 0.f;
    if (cached) {
#pragma unroll
      for (int k = 0; k < kPerLane; ++k) {
        const J j = lane + 32 * k;
        const float d = j < r.cols ? v[k] - mean : 0.f;
        sq += d * d;
      }
    } else {
      for (J j = lane; j < r.cols; j += 32) {
        const float d = value(j) - mean;
        sq += d * d;
      }
    }
    const float inv = rsqrtf(warp_sum(sq) / static_cast<float>(r.cols) + r.eps);
    auto emit = [&](J j, float x) {
      if (r.sum.p) r.sum.put(base + j, x);
      float o = (x - mean) * inv;
      if (r.gamma) o *= r.gamma[j];
      if (r.beta) o += r.beta[j];
      r.y.put(base + j, o);
    };
    if (cached) {
#pragma unroll
      for (int k = 0; k < kPerLane; ++k) {
        const J j = lane + 32 * k;
        if (j < r.cols) emit(j, v[k]);
      }
    } else {
      for (J j = lane; j < r.cols; j += 32) emit(j, value(j));
    }
    if (lane == 0) {
      if (r.mean.p) r.mean.put(row, mean);
      if (r.inv.p) r.inv.put(row, inv);
    }
  }
}

CodedIn coded(const ResidualOperand& o, int64_t n) { return CodedIn{o.p, code(o.t), o.count >= n ? 0 : o.count}; }

}  // namespace

void residual_add(const ResidualOperand& a, const ResidualOperand& b, void* y, DType ty, int64_t n, cudaStream_t s,
                  bool multiply) {
  if (n <= 0) return;
  SLUICE_CHECK(a.count > 0 && b.count > 0 && n % a.count == 0 && n % b.count == 0,
               "cuda residual_add: operands of ", a.count, " and ", b.count, " elements do not repeat onto ", n);
  if (fits_int32(n)) {
    const uint32_t ca = a.count >= n ? 0 : static_cast<uint32_t>(a.count), cb = b.count >= n ? 0 : static_cast<uint32_t>(b.count);
    dispatch_float(a.t, [&](auto ta) {
      dispatch_float(b.t, [&](auto tb) {
        dispatch_float(ty, [&](auto tyv) {
          using A = decltype(ta);
          using B = decltype(tb);
          using Y = decltype(tyv);
          residual_add_kernel<<<grid_for(n), kThreads, 0, s>>>(TypedRepeat<A>{static_cast<const A*>(a.p), ca},
                                                               TypedRepeat<B>{static_cast<const B*>(b.p), cb},
                                                               TypedOut<Y>{static_cast<Y*>(y)}, static_cast<uint32_t>(n), multiply);
        });
      });
    });
  } else {
    residual_add_kernel<<<grid_for(n), kThreads, 0, s>>>(coded(a, n), coded(b, n), CodedOut{y, code(ty)}, n, multiply);
  }
  CUDA_CHECK_LAUNCH();
}

void residual_norm(const ResidualNorm& r, cudaStream_t s) {
  if (r.rows <= 0 || r.cols <= 0) return;
  const int64_t n = r.rows * r.cols;
  const bool add = r.b.p != nullptr;
  SLUICE_CHECK(r.a.count > 0 && n % r.a.count == 0 && (!add || (r.b.count > 0 && n % r.b.count == 0)),
               "cuda residual_norm: operands of ", r.a.count, " and ", r.b.count, " elements do not repeat onto ", n);
  const CodedOut mean{r.mean, code(r.tstat)}, inv{r.inv, code(r.tstat)};
  const unsigned grid = warp_grid(r.rows);
  // Typed: operands that do not repeat, rows held in registers, an fp32 sum (or none).
  const bool typed = r.cols <= 32 * kPerLane && r.a.count >= n && (!add || r.b.count >= n) &&
                     (!r.sum || r.tsum == DType::F32);
  if (typed) {
    dispatch_float(r.a.t, [&](auto ta) {
      dispatch_float(add ? r.b.t : r.a.t, [&](auto tb) {
        dispatch_float(r.ty, [&](auto tyv) {
          using A = decltype(ta);
          using B = decltype(tb);
          using Y = decltype(tyv);
          NormArgs<int, TypedIn<A>, TypedIn<B>, TypedOut<float>, TypedOut<Y>> k{
              {static_cast<const A*>(r.a.p)}, {static_cast<const B*>(add ? r.b.p : nullptr)}, add,
              {static_cast<float*>(r.sum)}, {static_cast<Y*>(r.y)}, mean, inv, r.rows, static_cast<int>(r.cols), r.eps,
              r.gamma, r.beta};
          residual_norm_kernel<true><<<grid, kThreads, 0, s>>>(k);
        });
      });
    });
  } else {
    NormArgs<int64_t, CodedIn, CodedIn, CodedOut, CodedOut> k{
        coded(r.a, n), add ? coded(r.b, n) : CodedIn{nullptr, kF32, 0}, add, {r.sum, code(r.tsum)}, {r.y, code(r.ty)},
        mean, inv, r.rows, r.cols, r.eps, r.gamma, r.beta};
    residual_norm_kernel<false><<<grid, kThreads, 0, s>>>(k);
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace sluice::cuda
