// Kernels that move elements without arithmetic (strided copies, padding, the atrous rearrangements)
// and Resize.  The copies work on raw element sizes so one instantiation serves every dtype of that
// width.
#include "engine/cuda/kernels.h"
#include "engine/cuda/kernels_common.cuh"

namespace sluice::cuda {
namespace {

template <typename U>
__global__ void strided_copy_kernel(const U* x, U* y, int64_t n, CopyShape s) {
  SLUICE_GRID_STRIDE(i, n) {
    int64_t rem = i, off = 0;
    for (int d = s.rank - 1; d >= 0; --d) {
      const int64_t q = rem / s.out[d];
      const int64_t idx = rem - q * s.out[d];
      rem = q;
      off += (s.in_dim[d] == 1 ? 0 : idx % s.in_dim[d]) * s.in_stride[d];
    }
    y[i] = x[off];
  }
}

__device__ __forceinline__ int64_t pad_source(int64_t j, int64_t len, PadMode mode) {
  if (j >= 0 && j < len) return j;
  switch (mode) {
    case PadMode::Constant: return -1;
    case PadMode::Edge: return j < 0 ? 0 : len - 1;
    case PadMode::Wrap: return ((j % len) + len) % len;
    case PadMode::Reflect: {
      if (len == 1) return 0;
      const int64_t period = 2 * (len - 1);
      int64_t m = ((j % period) + period) % period;
      return m < len ? m : period - m;
    }
  }
  return -1;
}

template <typename U>
__global__ void pad_kernel(const U* x, U* y, int64_t n, PadShape s, U value) {
  SLUICE_GRID_STRIDE(i, n) {
    int64_t rem = i, off = 0, stride = 1;
    bool inside = true;
    for (int d = s.rank - 1; d >= 0; --d) {
      const int64_t q = rem / s.out[d];
      const int64_t idx = rem - q * s.out[d];
      rem = q;
      const int64_t j = pad_source(idx - s.begin[d], s.in[d], s.mode);
      if (j < 0) inside = false;
      off += j * stride;
      stride *= s.in[d];
    }
    y[i] = inside ? x[off] : value;
  }
}

// ---- Atrous convolution by space-to-batch ---------------------------------------------------------

// Sizes in units of U: for channels-last tensors c counts vectors of several channels.
template <typename I>
struct AtrousDims {
  I n, c, h, w, d, hs, ws;
};

// One thread per unit of the batched tensor, in its memory order: [d, d, n, c, hs, ws] or
// [d, d, n, hs, ws, c].  Both directions walk the batched side so the channels-last case reads and
// writes whole rows of channels; the batched side is the larger one (its padding), and every space
// position belongs to exactly one batched position.
template <typename U, typename I>
__global__ void atrous_kernel(const U* __restrict__ src, U* __restrict__ dst, I total, AtrousDims<I> s, bool nhwc,
                              bool to_batch) {
  const I step = static_cast<I>(gridDim.x) * blockDim.x;
  for (I i = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += step) {
    I rem = i, c, u, v;
    if (nhwc) {
      c = rem % s.c; rem /= s.c;
      v = rem % s.ws; rem /= s.ws;
      u = rem % s.hs; rem /= s.hs;
    } else {
      v = rem % s.ws; rem /= s.ws;
      u = rem % s.hs; rem /= s.hs;
      c = rem % s.c; rem /= s.c;
    }
    const I n = rem % s.n;
    rem /= s.n;
    const I h = rem / s.d + s.d * u, w = rem % s.d + s.d * v;
    const bool inside = h < s.h && w < s.w;
    const I at = nhwc ? ((n * s.h + h) * s.w + w) * s.c + c : ((n * s.c + c) * s.h + h) * s.w + w;
    if (to_batch) dst[i] = inside ? src[at] : U{};
    else if (inside) dst[at] = src[i];
  }
}

template <typename U>
void launch_atrous(const void* src, void* dst, int64_t c_units, const AtrousShape& a, bool to_batch, cudaStream_t st) {
  const int64_t hs = (a.h + a.d - 1) / a.d, ws = (a.w + a.d - 1) / a.d;
  const int64_t total = a.d * a.d * a.n * c_units * hs * ws;
  if (total <= 0) return;
  // 32-bit index arithmetic when it fits: the divisions dominate the kernel's instructions.
  if (total < (int64_t{1} << 31)) {
    const AtrousDims<uint32_t> d{static_cast<uint32_t>(a.n), static_cast<uint32_t>(c_units), static_cast<uint32_t>(a.h),
                                 static_cast<uint32_t>(a.w), static_cast<uint32_t>(a.d), static_cast<uint32_t>(hs),
                                 static_cast<uint32_t>(ws)};
    atrous_kernel<U, uint32_t><<<grid_for(total), kThreads, 0, st>>>(static_cast<const U*>(src), static_cast<U*>(dst),
                                                                    static_cast<uint32_t>(total), d, a.nhwc, to_batch);
  } else {
    const AtrousDims<uint64_t> d{static_cast<uint64_t>(a.n), static_cast<uint64_t>(c_units), static_cast<uint64_t>(a.h),
                                 static_cast<uint64_t>(a.w), static_cast<uint64_t>(a.d), static_cast<uint64_t>(hs),
                                 static_cast<uint64_t>(ws)};
    atrous_kernel<U, uint64_t><<<grid_for(total), kThreads, 0, st>>>(static_cast<const U*>(src), static_cast<U*>(dst),
                                                                    static_cast<uint64_t>(total), d, a.nhwc, to_batch);
  }
  CUDA_CHECK_LAUNCH();
}

void atrous(std::size_t es, const void* src, void* dst, const AtrousShape& a, bool to_batch, cudaStream_t st) {
  SLUICE_CHECK(a.d >= 1 && a.n >= 0 && a.c >= 0 && a.h >= 0 && a.w >= 0, "atrous rearrangement: bad shape");
  // Channels-last rows of channels move as vectors of up to 16 bytes when sizes and addresses allow.
  std::size_t unit = es;
  if (a.nhwc) {
    const auto aligned = [&](std::size_t v) {
      return (static_cast<std::size_t>(a.c) * es) % v == 0 && reinterpret_cast<uintptr_t>(src) % v == 0 &&
             reinterpret_cast<uintptr_t>(dst) % v == 0;
    };
    for (std::size_t v = 16; v > es; v /= 2)
      if (aligned(v)) { unit = v; break; }
  }
  const int64_t c_units = a.c * static_cast<int64_t>(es) / static_cast<int64_t>(unit);
  switch (unit) {
    case 1: launch_atrous<uint8_t>(src, dst, c_units, a, to_batch, st); break;
    case 2: launch_atrous<uint16_t>(src, dst, c_units, a, to_batch, st); break;
    case 4: launch_atrous<uint32_t>(src, dst, c_units, a, to_batch, st); break;
    case 8: launch_atrous<uint2>(src, dst, c_units, a, to_batch, st); break;
    case 16: launch_atrous<uint4>(src, dst, c_units, a, to_batch, st); break;
    default: SLUICE_THROW("atrous rearrangement: element size ", es, " is not supported");
  }
}

// ---- Resize --------------------------------------------------------------------------------------

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

template <typename T>
__global__ void resize_kernel(const T* x, T* y, int64_t n, ResizeShape s) {
  SLUICE_GRID_STRIDE(i, n) {
    int64_t idx[kMaxRank];
    int64_t rem = i;
    for (int d = s.rank - 1; d >= 0; --d) {
      const int64_t q = rem / s.out[d];
      idx[d] = rem - q * s.out[d];
      rem = q;
    }
    if (s.mode == ResizeMode::Nearest) {
      int64_t off = 0;
      for (int d = 0; d < s.rank; ++d) {
        // Axes that keep their size and scale are copied, whatever the coordinate mode (as the
        // CPU engine and ONNX Runtime do; tf_half_pixel_for_nn would otherwise shift them by one).
        const int64_t j = (s.in[d] == s.out[d] && s.scale[d] == 1.f)
                              ? idx[d]
                              : nearest_index(original_coordinate(idx[d], d, s), s.nearest, s.in[d], s.scale[d]);
        off = off * s.in[d] + j;
      }
      y[i] = x[off];
      continue;
    }
    // Linear or cubic: the taps of each interpolated dim, the others pass through.
    const int taps = s.mode == ResizeMode::Linear ? 2 : 4;
    int interp[3];
    int ni = 0;
    int64_t base[3];
    float w[3][4];
    for (int d = 0; d < s.rank; ++d) {
      if (s.in[d] == s.out[d] && s.scale[d] == 1.f) continue;
      const float xo = original_coordinate(idx[d], d, s);
      const float fl = floorf(xo);
      const float r = xo - fl;
      interp[ni] = d;
      if (taps == 2) {
        base[ni] = static_cast<int64_t>(fl);
        w[ni][0] = 1.f - r;
        w[ni][1] = r;
      } else {
        base[ni] = static_cast<int64_t>(fl) - 1;
        cubic_coeffs(r, s.cubic_a, w[ni]);
        if (s.exclude_outside) {
          float sum = 0.f;
          for (int t = 0; t < 4; ++t) {
            const int64_t j = base[ni] + t;
            if (j < 0 || j >= s.in[d]) w[ni][t] = 0.f;
            sum += w[ni][t];
          }
          for (int t = 0; t < 4; ++t) w[ni][t] = sum != 0.f ? w[ni][t] / sum : 0.f;
        }
      }
      ++ni;
    }
    int combos = 1;
    for (int k = 0; k < ni; ++k) combos *= taps;
    float acc = 0.f;
    for (int c = 0; c < combos; ++c) {
      int code = c;
      float weight = 1.f;
      int64_t src[kMaxRank];
      for (int d = 0; d < s.rank; ++d) src[d] = idx[d];
      for (int k = 0; k < ni; ++k) {
        const int t = code % taps;
        code /= taps;
        weight *= w[k][t];
        int64_t j = base[k] + t;
        const int64_t len = s.in[interp[k]];
        j = j < 0 ? 0 : (j >= len ? len - 1 : j);   // edge padding, as the ONNX reference does
        src[interp[k]] = j;
      }
      if (weight == 0.f) continue;
      int64_t off = 0;
      for (int d = 0; d < s.rank; ++d) off = off * s.in[d] + src[d];
      acc += weight * to_f(x[off]);
    }
    y[i] = from_f<T>(acc);
  }
}

}  // namespace

void strided_copy(std::size_t elem_size, const void* x, void* y, const CopyShape& shape, cudaStream_t s) {
  int64_t n = 1;
  for (int d = 0; d < shape.rank; ++d) n *= shape.out[d];
  if (n <= 0) return;
  dispatch_size(elem_size, [&](auto tag) {
    using U = decltype(tag);
    strided_copy_kernel<U><<<grid_for(n), kThreads, 0, s>>>(static_cast<const U*>(x), static_cast<U*>(y), n, shape);
  });
  CUDA_CHECK_LAUNCH();
}

void pad(std::size_t elem_size, const void* x, void* y, const PadShape& shape, cudaStream_t s) {
  int64_t n = 1;
  for (int d = 0; d < shape.rank; ++d) n *= shape.out[d];
  if (n <= 0) return;
  dispatch_size(elem_size, [&](auto tag) {
    using U = decltype(tag);
    pad_kernel<U><<<grid_for(n), kThreads, 0, s>>>(static_cast<const U*>(x), static_cast<U*>(y), n, shape,
                                                   static_cast<U>(shape.value_bits));
  });
  CUDA_CHECK_LAUNCH();
}

void space_to_batch(std::size_t elem_size, const void* x, void* xb, const AtrousShape& shape, cudaStream_t s) {
  atrous(elem_size, x, xb, shape, true, s);
}

void batch_to_space(std::size_t elem_size, const void* yb, void* y, const AtrousShape& shape, cudaStream_t s) {
  atrous(elem_size, yb, y, shape, false, s);
}

void resize(DType t, const void* x, void* y, const ResizeShape& shape, cudaStream_t s) {
  int64_t n = 1;
  int interpolated = 0;
  for (int d = 0; d < shape.rank; ++d) {
    n *= shape.out[d];
    if (!(shape.in[d] == shape.out[d] && shape.scale[d] == 1.f)) ++interpolated;
  }
  if (shape.mode == ResizeMode::Linear && interpolated > 3)
    SLUICE_THROW("cuda resize: linear interpolation over ", interpolated, " dims (at most 3 are supported)");
  if (shape.mode == ResizeMode::Cubic && interpolated > 2)
    SLUICE_THROW("cuda resize: cubic interpolation over ", interpolated, " dims (at most 2 are supported)");
  if (n <= 0) return;
  if (shape.mode == ResizeMode::Nearest) {
    // Nearest only moves elements: run it on the bit pattern (the interpolating branch of the
    // kernel is never taken).
    dispatch_size(dtype_size(t), [&](auto tag) {
      using U = decltype(tag);
      resize_kernel<U><<<grid_for(n), kThreads, 0, s>>>(static_cast<const U*>(x), static_cast<U*>(y), n, shape);
    });
  } else {
    dispatch_float(t, [&](auto tag) {
      using T = decltype(tag);
      resize_kernel<T><<<grid_for(n), kThreads, 0, s>>>(static_cast<const T*>(x), static_cast<T*>(y), n, shape);
    });
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace sluice::cuda
