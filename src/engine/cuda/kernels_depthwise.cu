// Depthwise 2-D convolution of channels-last tensors (MobileNet, EfficientNet): each channel is
// convolved with its own kh x kw filter, then bias, residual and activation are applied in the same
// pass.  cuDNN runs grouped convolutions only in NCHW here, which cost a transpose on each side of
// every depthwise layer; this kernel reads and writes the channels-last tensors directly.  It is
// memory-bound (kh*kw multiply-adds per output element): K channels of one output pixel per thread,
// each tap one 16-byte load of the input and one of the [kh, kw, C] filter, both L1/L2 resident.
#include <cstdlib>
#include <string>
#include <type_traits>

#include "engine/cuda/kernels.h"
#include "engine/cuda/kernels_act.cuh"
#include "engine/cuda/kernels_common.cuh"

namespace sluice::cuda {
namespace {

struct Depthwise32 {
  FastDiv ow, oh, cp;
  uint32_t h = 0, w = 0, c = 0;
  int kh = 1, kw = 1, sh = 1, sw = 1, dh = 1, dw = 1, ph = 0, pw = 0;
};

template <typename T, int K>
__global__ void depthwise_kernel(const T* __restrict__ x, const T* __restrict__ wt, const T* __restrict__ bias,
                                 const T* z, T* y, uint32_t total, Depthwise32 s, ActParams act) {
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
    uint32_t cp, ox, oy;
    const uint32_t n = s.oh.divmod(s.ow.divmod(s.cp.divmod(i, &cp), &ox), &oy);
    const uint32_t c0 = cp * K;
    const T* xb = x + static_cast<size_t>(n) * s.h * s.w * s.c + c0;
    float acc[K];
#pragma unroll
    for (int k = 0; k < K; ++k) acc[k] = bias ? to_f(bias[c0 + k]) : 0.f;
    const int y0 = static_cast<int>(oy) * s.sh - s.ph, x0 = static_cast<int>(ox) * s.sw - s.pw;
    for (int ky = 0; ky < s.kh; ++ky) {
      const int iy = y0 + ky * s.dh;
      if (iy < 0 || iy >= static_cast<int>(s.h)) continue;
      for (int kx = 0; kx < s.kw; ++kx) {
        const int ix = x0 + kx * s.dw;
        if (ix < 0 || ix >= static_cast<int>(s.w)) continue;
        const Pack<T, K> xv = *reinterpret_cast<const Pack<T, K>*>(xb + (static_cast<size_t>(iy) * s.w + ix) * s.c);
        const Pack<T, K> wv = *reinterpret_cast<const Pack<T, K>*>(wt + static_cast<size_t>(ky * s.kw + kx) * s.c + c0);
#pragma unroll
        for (int k = 0; k < K; ++k) acc[k] = fmaf(to_f(xv.v[k]), to_f(wv.v[k]), acc[k]);
      }
    }
    Pack<T, K> out;
    if (z) out = reinterpret_cast<const Pack<T, K>*>(z)[i];
#pragma unroll
    for (int k = 0; k < K; ++k) out.v[k] = from_f<T>(apply_act(z ? acc[k] + to_f(out.v[k]) : acc[k], act));
    reinterpret_cast<Pack<T, K>*>(y)[i] = out;
  }
}

// Stride 1, no dilation, kw = KW: each thread takes R neighbouring output pixels of one row (K
// channels each).  A filter row's R + KW - 1 input pixels are loaded once and serve R * KW taps,
// and each weight pack serves R pixels: (R + KW - 1) / R input and KW / R weight loads per pixel and
// filter row, where the kernel above makes KW of each (7x7, R = 4: 30 loads for 98).  ConvNeXt's
// 7x7 layers were held by those L1 loads, not by DRAM.
template <typename T, int K, int KW, int R>
__global__ void depthwise_rows_kernel(const T* __restrict__ x, const T* __restrict__ wt, const T* __restrict__ bias,
                                      const T* z, T* y, uint32_t total, Depthwise32 s, FastDiv blocks, ActParams act) {
  constexpr int kIn = R + KW - 1;
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
    uint32_t cp, bx, oy;
    const uint32_t n = s.oh.divmod(blocks.divmod(s.cp.divmod(i, &cp), &bx), &oy);
    const uint32_t c0 = cp * K;
    const int ox0 = static_cast<int>(bx) * R;
    const int x0 = ox0 - s.pw;
    const T* xb = x + static_cast<size_t>(n) * s.h * s.w * s.c + c0;
    float acc[R][K];
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const float b0 = bias ? to_f(bias[c0 + k]) : 0.f;
#pragma unroll
      for (int r = 0; r < R; ++r) acc[r][k] = b0;
    }
    for (int ky = 0; ky < s.kh; ++ky) {
      const int iy = static_cast<int>(oy) - s.ph + ky;
      if (iy < 0 || iy >= static_cast<int>(s.h)) continue;
      const T* row = xb + static_cast<size_t>(iy) * s.w * s.c;
      float wf[KW][K];
#pragma unroll
      for (int kx = 0; kx < KW; ++kx) {
        const Pack<T, K> wv = *reinterpret_cast<const Pack<T, K>*>(wt + static_cast<size_t>(ky * KW + kx) * s.c + c0);
#pragma unroll
        for (int k = 0; k < K; ++k) wf[kx][k] = to_f(wv.v[k]);
      }
      // Input pixel j of the row serves output r through tap j - r.
#pragma unroll
      for (int j = 0; j < kIn; ++j) {
        const int ix = x0 + j;
        if (ix < 0 || ix >= static_cast<int>(s.w)) continue;
        const Pack<T, K> xv = *reinterpret_cast<const Pack<T, K>*>(row + static_cast<size_t>(ix) * s.c);
        float xf[K];
#pragma unroll
        for (int k = 0; k < K; ++k) xf[k] = to_f(xv.v[k]);
#pragma unroll
        for (int r = 0; r < R; ++r) {
          if (j - r < 0 || j - r >= KW) continue;
#pragma unroll
          for (int k = 0; k < K; ++k) acc[r][k] = fmaf(xf[k], wf[j - r][k], acc[r][k]);
        }
      }
    }
    const size_t pixel0 = (static_cast<size_t>(n) * s.oh.d + oy) * s.ow.d + static_cast<uint32_t>(ox0);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (ox0 + r >= static_cast<int>(s.ow.d)) break;
      const size_t at = ((pixel0 + r) * s.c + c0) / K;
      Pack<T, K> out;
      if (z) out = reinterpret_cast<const Pack<T, K>*>(z)[at];
#pragma unroll
      for (int k = 0; k < K; ++k) out.v[k] = from_f<T>(apply_act(z ? acc[r][k] + to_f(out.v[k]) : acc[r][k], act));
      reinterpret_cast<Pack<T, K>*>(y)[at] = out;
    }
  }
}

// SLUICE_CUDA_DEPTHWISE_ROWS=0 keeps the one-pixel kernel for every layer, to measure the row kernel.
bool depthwise_rows_on() {
  const char* v = std::getenv("SLUICE_CUDA_DEPTHWISE_ROWS");
  const std::string e = v ? v : "";
  SLUICE_CHECK(e.empty() || e == "0" || e == "1", "SLUICE_CUDA_DEPTHWISE_ROWS must be 0 or 1, not '", e, "'");
  return e != "0";
}

}  // namespace

void depthwise_conv(DType t, const void* x, const void* w, const void* bias, const void* z, void* y,
                    const DepthwiseShape& s, ActParams act, cudaStream_t st) {
  const int64_t total = s.n * s.oh * s.ow * s.c;
  if (total <= 0) return;
  SLUICE_CHECK(fits_int32(total) && fits_int32(s.n * s.h * s.w * s.c), "depthwise convolution: ", total,
               " outputs exceed the kernel's 32-bit indexing");
  Depthwise32 d;
  d.ow = FastDiv(s.ow);
  d.oh = FastDiv(s.oh);
  d.h = static_cast<uint32_t>(s.h);
  d.w = static_cast<uint32_t>(s.w);
  d.c = static_cast<uint32_t>(s.c);
  d.kh = static_cast<int>(s.kh);
  d.kw = static_cast<int>(s.kw);
  d.sh = static_cast<int>(s.sh);
  d.sw = static_cast<int>(s.sw);
  d.dh = static_cast<int>(s.dh);
  d.dw = static_cast<int>(s.dw);
  d.ph = static_cast<int>(s.ph);
  d.pw = static_cast<int>(s.pw);
  dispatch_float(t, [&](auto tag) {
    using T = decltype(tag);
    constexpr int K = kVec<T>;
    const T* xp = static_cast<const T*>(x);
    const T* wp = static_cast<const T*>(w);
    const T* bp = static_cast<const T*>(bias);
    const T* zp = static_cast<const T*>(z);
    T* yp = static_cast<T*>(y);
    const bool packed = s.c % K == 0 && aligned16(x) && aligned16(w) && aligned16(y) && (!z || aligned16(z));
    constexpr int R = 4;
    const bool rows = packed && depthwise_rows_on() && s.sh == 1 && s.sw == 1 && s.dh == 1 && s.dw == 1 &&
                      (s.kw == 3 || s.kw == 5 || s.kw == 7);
    if (rows) {
      d.cp = FastDiv(s.c / K);
      const int64_t blocks = (s.ow + R - 1) / R, items = s.n * s.oh * blocks * (s.c / K);
      const FastDiv bd(blocks);
      auto launch = [&](auto kw_tag) {
        constexpr int KW = decltype(kw_tag)::value;
        depthwise_rows_kernel<T, K, KW, R><<<waves_grid(items), kThreads, 0, st>>>(xp, wp, bp, zp, yp,
                                                                              static_cast<uint32_t>(items), d, bd, act);
      };
      if (s.kw == 7) launch(std::integral_constant<int, 7>{});
      else if (s.kw == 5) launch(std::integral_constant<int, 5>{});
      else launch(std::integral_constant<int, 3>{});
    } else if (packed) {
      d.cp = FastDiv(s.c / K);
      depthwise_kernel<T, K><<<waves_grid(total / K), kThreads, 0, st>>>(xp, wp, bp, zp, yp, static_cast<uint32_t>(total / K), d, act);
    } else {
      d.cp = FastDiv(s.c);
      depthwise_kernel<T, 1><<<waves_grid(total), kThreads, 0, st>>>(xp, wp, bp, zp, yp, static_cast<uint32_t>(total), d, act);
    }
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace sluice::cuda
