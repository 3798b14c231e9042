#pragma once
// GridSample's sampling of one output point (ONNX opset 16 and 20, 2-D: X [N, C, H, W], grid
// [N, Ho, Wo, 2] holding (x, y) in [-1, 1]), written once for the CPU engine and the CUDA kernel
// (compiled by nvcc as __host__ __device__).  The value of an input pixel is read through
// `at(yi, xi)`, in bounds only, so each engine brings its own storage type.
//
// ONNX's definition: a grid value v unnormalizes to the pixel coordinate (v + 1) / 2 * (size - 1)
// with align_corners, ((v + 1) * size - 1) / 2 without.  Padding "border" clamps the coordinate to
// [0, size - 1]; "reflection" reflects it about the borders ([0, size - 1] with align_corners,
// [-0.5, size - 0.5] without) and reads the pixels around it reflected the same way; "zeros" reads 0
// outside the image.  Nearest rounds half to even (nearbyint); bilinear weighs the four pixels
// around the point.
#include <cmath>
#include <cstdint>

#ifdef __CUDACC__
#define SLUICE_GS_HD __host__ __device__ __forceinline__
#else
#define SLUICE_GS_HD inline
#endif

namespace sluice {

enum class GridPadding : int { Zeros = 0, Border = 1, Reflection = 2 };

struct GridSampleSpec {
  int64_t n = 0, c = 0, h = 0, w = 0, ho = 0, wo = 0;
  bool nearest = false;  // else bilinear
  GridPadding padding = GridPadding::Zeros;
  bool align_corners = false;
};

SLUICE_GS_HD float grid_unnormalize(float v, int64_t size, bool align) {
  const float s = static_cast<float>(size);
  return align ? (v + 1.f) * 0.5f * (s - 1.f) : ((v + 1.f) * s - 1.f) * 0.5f;
}

// x reflected into [lo, hi] (as many times as it takes).
SLUICE_GS_HD float grid_reflect(float x, float lo, float hi) {
  const float range = hi - lo;
  if (range <= 0.f) return lo;
  if (x < lo) {
    const float d = lo - x;
    const float k = floorf(d / range);
    const float r = d - k * range;
    return fmodf(k, 2.f) == 0.f ? lo + r : hi - r;
  }
  if (x > hi) {
    const float d = x - hi;
    const float k = floorf(d / range);
    const float r = d - k * range;
    return fmodf(k, 2.f) == 0.f ? hi - r : lo + r;
  }
  return x;
}

// The pixel at integer position (yi, xi), padded as the spec says.
template <typename At>
SLUICE_GS_HD float grid_pixel(At at, const GridSampleSpec& s, int64_t yi, int64_t xi) {
  if (s.padding == GridPadding::Zeros) {
    if (xi < 0 || xi >= s.w || yi < 0 || yi >= s.h) return 0.f;
  } else if (s.padding == GridPadding::Border) {
    xi = xi < 0 ? 0 : xi >= s.w ? s.w - 1 : xi;
    yi = yi < 0 ? 0 : yi >= s.h ? s.h - 1 : yi;
  } else {
    const float lx = s.align_corners ? 0.f : -0.5f, hx = s.align_corners ? s.w - 1.f : s.w - 0.5f;
    const float ly = s.align_corners ? 0.f : -0.5f, hy = s.align_corners ? s.h - 1.f : s.h - 0.5f;
    xi = static_cast<int64_t>(grid_reflect(static_cast<float>(xi), lx, hx));
    yi = static_cast<int64_t>(grid_reflect(static_cast<float>(yi), ly, hy));
    xi = xi < 0 ? 0 : xi >= s.w ? s.w - 1 : xi;
    yi = yi < 0 ? 0 : yi >= s.h ? s.h - 1 : yi;
  }
  return at(yi, xi);
}

// The sampled value at grid point (gx, gy) of one [H, W] plane.
template <typename At>
SLUICE_GS_HD float grid_sample_point(At at, const GridSampleSpec& s, float gx, float gy) {
  float x = grid_unnormalize(gx, s.w, s.align_corners), y = grid_unnormalize(gy, s.h, s.align_corners);
  if (s.padding == GridPadding::Border) {
    x = fminf(fmaxf(x, 0.f), s.w - 1.f);
    y = fminf(fmaxf(y, 0.f), s.h - 1.f);
  } else if (s.padding == GridPadding::Reflection) {
    x = s.align_corners ? grid_reflect(x, 0.f, s.w - 1.f) : grid_reflect(x, -0.5f, s.w - 0.5f);
    y = s.align_corners ? grid_reflect(y, 0.f, s.h - 1.f) : grid_reflect(y, -0.5f, s.h - 0.5f);
  }
  if (!(x == x) || !(y == y)) return NAN;
  // Far outside the image (zeros padding) every tap reads 0; keep the integer positions in range.
  const float lim = 4194304.f;  // 2^22
  x = fminf(fmaxf(x, -lim), lim);
  y = fminf(fmaxf(y, -lim), lim);
  if (s.nearest) return grid_pixel(at, s, static_cast<int64_t>(nearbyintf(y)), static_cast<int64_t>(nearbyintf(x)));
  const float fx = floorf(x), fy = floorf(y);
  const int64_t x0 = static_cast<int64_t>(fx), y0 = static_cast<int64_t>(fy);
  const float ax = x - fx, ay = y - fy;
  const float p00 = grid_pixel(at, s, y0, x0), p01 = grid_pixel(at, s, y0, x0 + 1);
  const float p10 = grid_pixel(at, s, y0 + 1, x0), p11 = grid_pixel(at, s, y0 + 1, x0 + 1);
  return (1.f - ay) * ((1.f - ax) * p00 + ax * p01) + ay * ((1.f - ax) * p10 + ax * p11);
}

}  // namespace sluice
