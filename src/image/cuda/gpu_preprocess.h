#pragma once
// The preprocessing kernel's view of a batch, and the arithmetic of one output pixel, shared by the
// kernel (gpu_preprocess.cu) and host code (tests run the same function on the CPU).
//
// The reader threads lay each batch out in its pinned slot (gpu_image_input.cpp): one GpuRowPlan
// per row, and tap tables computed by image.h's axis_taps(), so the kernel uses exactly the
// weights the CPU path uses.  A tap table covers the output coordinates of one axis after the crop
// or letterbox offset: entry o says which input pixels output coordinate o reads and where their
// weights are (count 0: outside the resized image, the pad value; such entries own no weights).  The kernel sums in float32 in the CPU's order (horizontal
// pass, then vertical) without fused multiply-adds, so it matches preprocess_rgb() to the bit
// unless the CPU side orders its sums differently.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

// Outside nvcc, cuda_runtime.h defines __host__ and __device__ away: plain inline functions.
#define SLUICE_HD __host__ __device__ __forceinline__

namespace sluice {

// What the kernel writes for one row of the batch.
enum GpuRowKind : int32_t {
  kGpuRowZero = 0,   // bad sample or padding row of a short batch: zeros
  kGpuRowDecoded = 1,// decoded by nvJPEG into the arena: resize/crop/letterbox it
  kGpuRowHost = 2,   // preprocessed on the CPU, copied into the engine input already: left alone
};

struct TapSpan {
  int32_t first = 0, count = 0;  // input pixels [first, first + count)
  int32_t weight = 0;            // their weights: weights[weight, weight + count)
};

struct GpuRowPlan {
  int32_t kind = kGpuRowZero;
  int32_t in_h = 0, in_w = 0;      // decoded size
  int32_t y_span = 0, x_span = 0;  // first entry of the row's tap tables in the span array
  int32_t round_rows = 0;          // 1: the horizontal pass is rounded to uint8 (bicubic, as PIL)
  int64_t arena_offset = 0;        // the decoded RGB (interleaved, pitch in_w * 3) in the arena
};

struct PreprocessLaunch {
  const GpuRowPlan* rows = nullptr;  // device, [batch]
  const TapSpan* spans = nullptr;    // device
  const float* weights = nullptr;    // device
  const uint8_t* arena = nullptr;    // device: decoded images
  uint8_t* out = nullptr;            // device: uint8 [batch, 3, out_h, out_w]
  int batch = 0, out_h = 0, out_w = 0;
  uint8_t pad[3] = {0, 0, 0};        // the padding's colour, per channel (travels with the launch)
};

// One kernel for the whole batch, on `stream`.
void launch_image_preprocess(const PreprocessLaunch& p, cudaStream_t stream);

// float products and sums that the compiler may not fuse: the CPU (x86-64 without FMA) rounds
// each one, and so must the GPU to agree with it.
SLUICE_HD float mul_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
SLUICE_HD float add_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

// Round half up, clamp to uint8: the one rounding of a bilinear resize (bicubic rounds each pass).
SLUICE_HD uint8_t to_u8(float v) {
  const float r = floorf(v + 0.5f);
  return static_cast<uint8_t>(r < 0.f ? 0.f : (r > 255.f ? 255.f : r));
}

// Output pixel from interleaved RGB `src` (row pitch in bytes): the horizontal taps over each
// input row that the vertical taps read, then the vertical taps over those sums.
SLUICE_HD void resample_pixel(const uint8_t* src, int64_t pitch, TapSpan ys, const float* wy, TapSpan xs,
                              const float* wx, bool round_rows, uint8_t rgb[3]) {
  float a0 = 0.f, a1 = 0.f, a2 = 0.f;
  for (int ky = 0; ky < ys.count; ++ky) {
    const uint8_t* row = src + static_cast<int64_t>(ys.first + ky) * pitch + static_cast<int64_t>(xs.first) * 3;
    float h0 = 0.f, h1 = 0.f, h2 = 0.f;
    for (int kx = 0; kx < xs.count; ++kx) {
      const float w = wx[kx];
      h0 = add_rn(h0, mul_rn(w, static_cast<float>(row[3 * kx + 0])));
      h1 = add_rn(h1, mul_rn(w, static_cast<float>(row[3 * kx + 1])));
      h2 = add_rn(h2, mul_rn(w, static_cast<float>(row[3 * kx + 2])));
    }
    if (round_rows) {  // each pass rounded and clamped, as the CPU path (image/preprocess.cpp) does
      h0 = static_cast<float>(to_u8(h0));
      h1 = static_cast<float>(to_u8(h1));
      h2 = static_cast<float>(to_u8(h2));
    }
    const float w = wy[ky];
    a0 = add_rn(a0, mul_rn(w, h0));
    a1 = add_rn(a1, mul_rn(w, h1));
    a2 = add_rn(a2, mul_rn(w, h2));
  }
  rgb[0] = to_u8(a0);
  rgb[1] = to_u8(a1);
  rgb[2] = to_u8(a2);
}

// Everything the kernel does for output pixel (y, x) of one decoded row: the pad colour outside the
// resized image, the resampled pixel inside.
SLUICE_HD void preprocess_pixel(const GpuRowPlan& r, const TapSpan* spans, const float* weights, const uint8_t* image,
                                int y, int x, const uint8_t pad[3], uint8_t rgb[3]) {
  const TapSpan ys = spans[r.y_span + y];
  const TapSpan xs = spans[r.x_span + x];
  if (ys.count == 0 || xs.count == 0) {
    rgb[0] = pad[0];
    rgb[1] = pad[1];
    rgb[2] = pad[2];
    return;
  }
  resample_pixel(image, static_cast<int64_t>(r.in_w) * 3, ys, weights + ys.weight, xs, weights + xs.weight,
                 r.round_rows != 0, rgb);
}

}  // namespace sluice
