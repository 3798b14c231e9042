// ONNX Resize.  The common case, a 2-D linear or nearest resize of a 4-D tensor (channels-first or
// channels-last), has its own kernel: 32-bit indices with precomputed divisors, and channels-last
// tensors move 16 bytes of channels per access.  Everything else (cubic, other ranks, resizes
// along N or C) takes the generic kernel, which walks every dim.
#include "engine/cuda/kernels.h"
#include "engine/cuda/kernels_common.cuh"
#include "engine/cuda/kernels_resize.cuh"

namespace sluice::cuda {
namespace {

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

// The 2-D case.  Memory order [N, H, W, C] (channels-last: K channels per thread) or [N, C, H, W]
// (one element per thread); dh, dw name the memory dims that are resized.
struct Resize2D {
  ResizeShape s;
  FastDiv ow, oh, cp;       // output width, height; channel packs (channels-last)
  uint32_t h = 0, w = 0, c = 0;
  int dh = 0, dw = 0;
};

template <typename T, int K, bool ChannelsLast>
__global__ void resize2d_kernel(const T* __restrict__ x, T* __restrict__ y, uint32_t total, Resize2D r) {
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
    uint32_t rem = i, cp = 0, ox, oy;
    if (ChannelsLast) rem = r.cp.divmod(rem, &cp);
    rem = r.ow.divmod(rem, &ox);
    const uint32_t outer = r.oh.divmod(rem, &oy);   // n (channels-last) or n * C + c
    const AxisTaps ty = axis_taps(oy, r.dh, r.s), tx = axis_taps(ox, r.dw, r.s);
    if (ChannelsLast) {
      // The four taps as packs of K channels, then the same weighted sum per channel.
      const T* xb = x + static_cast<size_t>(outer) * r.h * r.w * r.c + cp * K;
      auto tap = [&](int64_t yy, int64_t xx) {
        return *reinterpret_cast<const Pack<T, K>*>(xb + (static_cast<size_t>(yy) * r.w + xx) * r.c);
      };
      const Pack<T, K> p00 = tap(ty.i0, tx.i0), p10 = tap(ty.i1, tx.i0), p01 = tap(ty.i0, tx.i1), p11 = tap(ty.i1, tx.i1);
      Pack<T, K> out;
#pragma unroll
      for (int k = 0; k < K; ++k)
        out.v[k] = from_f<T>(blend4(ty, tx, to_f(p00.v[k]), to_f(p10.v[k]), to_f(p01.v[k]), to_f(p11.v[k])));
      reinterpret_cast<Pack<T, K>*>(y)[i] = out;
    } else {
      const T* xb = x + static_cast<size_t>(outer) * r.h * r.w;
      y[i] = from_f<T>(interpolate2d(ty, tx, [&](int64_t yy, int64_t xx) { return to_f(xb[yy * r.w + xx]); }));
    }
  }
}

// Launches the 2-D kernel when the resize is one (only two adjacent memory dims change, the last
// one or the first one kept); false otherwise.  Both paths index by memory dims, so they are right
// for either layout: "channels-last" means memory dims 1 and 2 resize, "channels-first" dims 2, 3.
bool launch_resize2d(DType t, const void* x, void* y, const ResizeShape& s, int64_t n, cudaStream_t st) {
  if (s.rank != 4 || (s.mode != ResizeMode::Nearest && s.mode != ResizeMode::Linear) || !fits_int32(n)) return false;
  if (t != DType::F32 && t != DType::F16 && t != DType::BF16) return false;
  const auto kept = [&](int d) { return s.in[d] == s.out[d] && s.scale[d] == 1.f; };
  int64_t in_total = 1;
  for (int d = 0; d < 4; ++d) in_total *= s.in[d];
  if (!fits_int32(in_total)) return false;
  const bool last_kept = kept(0) && kept(3), first_kept = kept(0) && kept(1);
  if (!last_kept && !first_kept) return false;
  Resize2D r;
  r.s = s;
  dispatch_float(t, [&](auto tag) {
    using T = decltype(tag);
    const T* xp = static_cast<const T*>(x);
    T* yp = static_cast<T*>(y);
    constexpr int K = kVec<T>;
    const bool packs = last_kept && s.in[3] % K == 0 && aligned16(x) && aligned16(y);
    if (packs || !first_kept) {
      r.dh = 1;
      r.dw = 2;
      r.h = static_cast<uint32_t>(s.in[1]);
      r.w = static_cast<uint32_t>(s.in[2]);
      r.c = static_cast<uint32_t>(s.in[3]);
      r.oh = FastDiv(s.out[1]);
      r.ow = FastDiv(s.out[2]);
      if (packs) {
        r.cp = FastDiv(s.in[3] / K);
        resize2d_kernel<T, K, true><<<waves_grid(n / K), kThreads, 0, st>>>(xp, yp, static_cast<uint32_t>(n / K), r);
      } else {
        r.cp = FastDiv(s.in[3]);
        resize2d_kernel<T, 1, true><<<waves_grid(n), kThreads, 0, st>>>(xp, yp, static_cast<uint32_t>(n), r);
      }
    } else {
      r.dh = 2;
      r.dw = 3;
      r.h = static_cast<uint32_t>(s.in[2]);
      r.w = static_cast<uint32_t>(s.in[3]);
      r.oh = FastDiv(s.out[2]);
      r.ow = FastDiv(s.out[3]);
      resize2d_kernel<T, 1, false><<<waves_grid(n), kThreads, 0, st>>>(xp, yp, static_cast<uint32_t>(n), r);
    }
  });
  CUDA_CHECK_LAUNCH();
  return true;
}

}  // namespace

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
  if (fast_kernels() && launch_resize2d(t, x, y, shape, n, s)) return;
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

namespace {

template <typename TI, typename TO>
__global__ void resize_taps_kernel(const TI* x, TO* y, const int64_t* index, const float* weight, int64_t n, int64_t in_len,
                                   int64_t out_len, int64_t inner, int64_t width) {
  SLUICE_GRID_STRIDE(i, n) {
    const int64_t k = i % inner, rest = i / inner;
    const int64_t o = rest % out_len, outer = rest / out_len;
    const TI* xo = x + outer * in_len * inner + k;
    float v = 0.f;
    for (int64_t t = 0; t < width; ++t) v += weight[o * width + t] * to_f(xo[index[o * width + t] * inner]);
    y[i] = from_f<TO>(v);
  }
}

}  // namespace

void resize_taps(DType tin, DType tout, const void* x, void* y, const int64_t* index, const float* weight, int64_t outer,
                 int64_t in_len, int64_t out_len, int64_t inner, int64_t width, cudaStream_t s) {
  const int64_t n = outer * out_len * inner;
  if (n <= 0) return;
  dispatch_float(tin, [&](auto itag) {
    using TI = decltype(itag);
    dispatch_float(tout, [&](auto otag) {
      using TO = decltype(otag);
      resize_taps_kernel<TI, TO><<<grid_for(n), kThreads, 0, s>>>(static_cast<const TI*>(x), static_cast<TO*>(y), index, weight,
                                                                  n, in_len, out_len, inner, width);
    });
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace sluice::cuda
