#pragma once
// ONNX Resize's coordinate arithmetic, shared by the resize kernels and the fused output tails:
// the source coordinate of an output index for each coordinate_transformation_mode, the nearest
// source index for each nearest_mode, the cubic weights, and the two linear (or one nearest) taps
// of one axis.  Float math, in the same order everywhere, so every kernel computes the same values.
#include "engine/cuda/kernels.h"

namespace sluice::cuda {

__device__ __forceinline__ float original_coordinate(int64_t x, int d, const ResizeShape& s) {
  const float scale = s.scale[d];
  const float xr = static_cast<float>(x);
  const float in = static_cast<float>(s.in[d]);
  const float out = static_cast<float>(s.out[d]);
  switch (s.coord) {
    case CoordMode::HalfPixel: return (xr + 0.5f) / scale - 0.5f;
    case CoordMode::PytorchHalfPixel: return s.out[d] > 1 ? (xr + 0.5f) / scale - 0.5f : 0.f;
    case CoordMode::AlignCorners: return s.out[d] == 1 ? 0.f : xr * (in - 1.f) / (out - 1.f);
    case CoordMode::Asymmetric: return xr / scale;
    case CoordMode::TfHalfPixelForNearest: return (xr + 0.5f) / scale;
    case CoordMode::HalfPixelSymmetric: {
      const float adjustment = out / (scale * in);
      const float center = in / 2.f;
      const float offset = center * (1.f - adjustment);
      return offset + (xr + 0.5f) / scale - 0.5f;
    }
  }
  return 0.f;
}

__device__ __forceinline__ int64_t nearest_index(float xo, NearestMode m, int64_t len, float scale) {
  float r;
  switch (m) {
    case NearestMode::Simple: r = scale < 1.f ? ceilf(xo) : truncf(xo); break;
    case NearestMode::RoundPreferFloor: r = (xo - floorf(xo) == 0.5f) ? floorf(xo) : roundf(xo); break;
    case NearestMode::RoundPreferCeil: r = (xo - floorf(xo) == 0.5f) ? ceilf(xo) : roundf(xo); break;
    case NearestMode::Floor: r = floorf(xo); break;
    case NearestMode::Ceil: r = ceilf(xo); break;
    default: r = xo; break;
  }
  int64_t j = static_cast<int64_t>(r);
  return j < 0 ? 0 : (j >= len ? len - 1 : j);
}

__device__ __forceinline__ void cubic_coeffs(float r, float a, float c[4]) {
  const float t0 = r + 1.f, t3 = 2.f - r, t2 = 1.f - r;
  c[0] = ((a * t0 - 5.f * a) * t0 + 8.f * a) * t0 - 4.f * a;
  c[1] = ((a + 2.f) * r - (a + 3.f)) * r * r + 1.f;
  c[2] = ((a + 2.f) * t2 - (a + 3.f)) * t2 * t2 + 1.f;
  c[3] = ((a * t3 - 5.f * a) * t3 + 8.f * a) * t3 - 4.f * a;
}

// The taps of one axis: value = w0 * x[i0] + w1 * x[i1] (w1 == 0 for nearest and unscaled axes).
struct AxisTaps {
  int64_t i0 = 0, i1 = 0;
  float w0 = 1.f, w1 = 0.f;
};

// Taps of output index o along memory dim d (mode Nearest or Linear).  An axis that keeps its size
// and scale is copied whatever the coordinate mode, as the CPU engine and ONNX Runtime do.
__device__ __forceinline__ AxisTaps axis_taps(int64_t o, int d, const ResizeShape& s) {
  AxisTaps t;
  if (s.in[d] == s.out[d] && s.scale[d] == 1.f) {
    t.i0 = t.i1 = o;
    return t;
  }
  const float xo = original_coordinate(o, d, s);
  if (s.mode == ResizeMode::Nearest) {
    t.i0 = t.i1 = nearest_index(xo, s.nearest, s.in[d], s.scale[d]);
    return t;
  }
  const float fl = floorf(xo);
  const float r = xo - fl;
  const int64_t base = static_cast<int64_t>(fl), len = s.in[d];
  t.i0 = base < 0 ? 0 : (base >= len ? len - 1 : base);   // edge padding, as the ONNX reference does
  t.i1 = base + 1 < 0 ? 0 : (base + 1 >= len ? len - 1 : base + 1);
  t.w0 = 1.f - r;
  t.w1 = r;
  return t;
}

// The four-tap sum of a 2-D linear (or nearest) resize in the order the generic kernel takes it:
// (y0, x0), (y1, x0), (y0, x1), (y1, x1), zero weights skipped (so infinities stay where they were).
__device__ __forceinline__ float blend4(const AxisTaps& ty, const AxisTaps& tx, float v00, float v10, float v01, float v11) {
  float acc = 0.f;
  if (ty.w0 * tx.w0 != 0.f) acc += ty.w0 * tx.w0 * v00;
  if (ty.w1 * tx.w0 != 0.f) acc += ty.w1 * tx.w0 * v10;
  if (ty.w0 * tx.w1 != 0.f) acc += ty.w0 * tx.w1 * v01;
  if (ty.w1 * tx.w1 != 0.f) acc += ty.w1 * tx.w1 * v11;
  return acc;
}

// The same with the values read through at(y, x); all four taps are valid (clamped) positions.
template <typename F>
__device__ __forceinline__ float interpolate2d(const AxisTaps& ty, const AxisTaps& tx, F&& at) {
  return blend4(ty, tx, at(ty.i0, tx.i0), at(ty.i1, tx.i0), at(ty.i0, tx.i1), at(ty.i1, tx.i1));
}

}  // namespace sluice::cuda
