// The softmax step of sluice.Attention on the batched-GEMM path: scores (already scaled by the
// product's alpha, stored in the compute type) plus a bias that repeats every `period` score
// matrices, softmax over each row with fp32 statistics, probabilities written over the scores in
// the type the second product reads.
#include <cfloat>

#include "engine/cuda/kernels.h"
#include "engine/cuda/kernels_common.cuh"

namespace sluice::cuda {
namespace {

constexpr int kPerLane = 8;   // rows up to 256 keys stay in registers

// One warp per row.  Short rows (<= 32 * kPerLane) are read once into registers; longer ones are
// read three times (max, sum, write), from L1/L2 after the first.
template <typename T, typename B>
__global__ void attention_softmax_kernel(const T* x, const B* __restrict__ bias, T* y,
                                         int64_t rows, int64_t s, int64_t skv, int64_t period, bool zero_rows) {
  const int lane = threadIdx.x & 31;
  SLUICE_WARP_ROWS(row, rows) {
    const T* xr = x + row * skv;
    const B* br = nullptr;
    if (bias) {
      const int64_t m = row / s, i = row - m * s;
      br = bias + ((m % period) * s + i) * skv;
    }
    T* yr = y + row * skv;
    auto score = [&](int64_t j) { return to_f(xr[j]) + (br ? to_f(br[j]) : 0.f); };
    const bool cached = skv <= 32 * kPerLane;
    float v[kPerLane];
    float mx = -INFINITY;
    if (cached) {
#pragma unroll
      for (int k = 0; k < kPerLane; ++k) {
        const int64_t j = lane + 32 * k;
        v[k] = j < skv ? score(j) : -INFINITY;
        mx = fmaxf(mx, v[k]);
      }
    } else {
      for (int64_t j = lane; j < skv; j += 32) mx = fmaxf(mx, score(j));
    }
    mx = warp_max(mx);
    if (mx == -INFINITY) {   // every key masked
      const float fill = zero_rows ? 0.f : NAN;
      for (int64_t j = lane; j < skv; j += 32) yr[j] = from_f<T>(fill);
      continue;
    }
    float sum = 0.f;
    if (cached) {
#pragma unroll
      for (int k = 0; k < kPerLane; ++k) {
        v[k] = lane + 32 * k < skv ? expf(v[k] - mx) : 0.f;
        sum += v[k];
      }
    } else {
      for (int64_t j = lane; j < skv; j += 32) sum += expf(score(j) - mx);
    }
    const float inv = 1.f / warp_sum(sum);
    if (cached) {
#pragma unroll
      for (int k = 0; k < kPerLane; ++k) {
        const int64_t j = lane + 32 * k;
        if (j < skv) yr[j] = from_f<T>(v[k] * inv);
      }
    } else {
      for (int64_t j = lane; j < skv; j += 32) yr[j] = from_f<T>(expf(score(j) - mx) * inv);
    }
  }
}

}  // namespace

void attention_softmax(DType t, DType bias_type, const void* scores, const void* bias, void* probs, int64_t rows,
                       int64_t s, int64_t skv, int64_t period, bool zero_rows, cudaStream_t st) {
  if (rows <= 0 || skv <= 0) return;
  dispatch_float(t, [&](auto tag) {
    using T = decltype(tag);
    auto launch = [&](auto btag) {
      using Bt = decltype(btag);
      attention_softmax_kernel<T, Bt><<<warp_grid(rows), kThreads, 0, st>>>(
          static_cast<const T*>(scores), static_cast<const Bt*>(bias), static_cast<T*>(probs), rows, s, skv,
          period > 0 ? period : 1, zero_rows);
    };
    if (!bias) launch(float{});
    else dispatch_float(bias_type, launch);
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace sluice::cuda
