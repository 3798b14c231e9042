// Pooling windows (MaxPool, AveragePool).  2-D pools, the kind every CNN has, take a kernel with
// 32-bit indices and precomputed divisors; channels-last tensors move 16 bytes of channels per
// access (K channels of one output pixel per thread, each window tap one packed load).  1-D and
// 3-D pools, and tensors past 2^31 elements, take the general kernel.
#include "engine/cuda/kernels.h"
#include "engine/cuda/kernels_common.cuh"

namespace sluice::cuda {
namespace {

// The general kernel: 1 to 3 spatial dims, either layout, 64-bit indices.
template <typename T>
__global__ void pool_kernel(const T* x, T* y, int64_t n, PoolShape s) {
  SLUICE_GRID_STRIDE(i, n) {
    int64_t o[3];
    int64_t rem = i, c = 0;
    if (s.channels_last) {
      c = rem % s.c;
      rem /= s.c;
    }
    for (int d = s.dims - 1; d >= 0; --d) {
      const int64_t q = rem / s.out[d];
      o[d] = rem - q * s.out[d];
      rem = q;
    }
    // rem is now n * C + c (channels first) or n (channels last).
    int64_t in_plane = 1;
    for (int d = 0; d < s.dims; ++d) in_plane *= s.in[d];
    const T* xp = s.channels_last ? x + rem * in_plane * s.c + c : x + rem * in_plane;
    const int64_t step = s.channels_last ? s.c : 1;
    float acc = s.is_max ? -INFINITY : 0.f;
    int64_t count = 0;
    int64_t k[3] = {0, 0, 0};
    const int64_t k0 = s.kernel[0], k1 = s.dims > 1 ? s.kernel[1] : 1, k2 = s.dims > 2 ? s.kernel[2] : 1;
    for (k[0] = 0; k[0] < k0; ++k[0])
      for (k[1] = 0; k[1] < k1; ++k[1])
        for (k[2] = 0; k[2] < k2; ++k[2]) {
          int64_t off = 0;
          bool inside = true, in_padded = true;
          for (int d = 0; d < s.dims; ++d) {
            const int64_t j = o[d] * s.stride[d] - s.pad[d] + k[d] * s.dilation[d];
            if (j < 0 || j >= s.in[d]) inside = false;
            if (j < -s.pad[d] || j >= s.in[d] + s.pad_end[d]) in_padded = false;
            off = off * s.in[d] + j;
          }
          if (inside) {
            const float v = to_f(xp[off * step]);
            acc = s.is_max ? fmaxf(acc, v) : acc + v;
          }
          if (s.count_include_pad ? in_padded : inside) ++count;
        }
    if (!s.is_max) acc = count > 0 ? acc / static_cast<float>(count) : 0.f;
    y[i] = from_f<T>(acc);
  }
}

// ---- 2-D pools -------------------------------------------------------------------------------------

struct Pool2D {
  FastDiv ow, oh, cp;        // output width and height; channel packs (channels-last)
  uint32_t h = 0, w = 0, c = 0;
  int kh = 1, kw = 1, sh = 1, sw = 1, dh = 1, dw = 1, ph = 0, pw = 0, eh = 0, ew = 0;   // e: end padding
  bool is_max = true, count_include_pad = false;
};

// Channels-last: memory [N, H, W, C], K channels per thread.  Channels-first: [N*C, H, W], one
// output element per thread.
template <typename T, int K, bool ChannelsLast>
__global__ void pool2d_kernel(const T* __restrict__ x, T* __restrict__ y, uint32_t total, Pool2D p) {
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
    uint32_t rem = i, cp = 0, ox, oy;
    if (ChannelsLast) rem = p.cp.divmod(rem, &cp);
    rem = p.ow.divmod(rem, &ox);
    const uint32_t outer = p.oh.divmod(rem, &oy);   // n (channels-last) or n * C + c
    const T* xb = ChannelsLast ? x + static_cast<size_t>(outer) * p.h * p.w * p.c + cp * K
                               : x + static_cast<size_t>(outer) * p.h * p.w;
    float acc[K];
#pragma unroll
    for (int k = 0; k < K; ++k) acc[k] = p.is_max ? -INFINITY : 0.f;
    int count = 0;
    const int y0 = static_cast<int>(oy) * p.sh - p.ph, x0 = static_cast<int>(ox) * p.sw - p.pw;
    for (int ky = 0; ky < p.kh; ++ky) {
      const int iy = y0 + ky * p.dh;
      const bool row_in = iy >= 0 && iy < static_cast<int>(p.h);
      const bool row_padded = iy >= -p.ph && iy < static_cast<int>(p.h) + p.eh;
      for (int kx = 0; kx < p.kw; ++kx) {
        const int ix = x0 + kx * p.dw;
        const bool inside = row_in && ix >= 0 && ix < static_cast<int>(p.w);
        if (p.count_include_pad ? (row_padded && ix >= -p.pw && ix < static_cast<int>(p.w) + p.ew) : inside) ++count;
        if (!inside) continue;
        const size_t at = static_cast<size_t>(iy) * p.w + ix;
        if (ChannelsLast) {
          const Pack<T, K> v = *reinterpret_cast<const Pack<T, K>*>(xb + at * p.c);
#pragma unroll
          for (int k = 0; k < K; ++k) acc[k] = p.is_max ? fmaxf(acc[k], to_f(v.v[k])) : acc[k] + to_f(v.v[k]);
        } else {
          const float v = to_f(xb[at]);
          acc[0] = p.is_max ? fmaxf(acc[0], v) : acc[0] + v;
        }
      }
    }
    Pack<T, K> out;
#pragma unroll
    for (int k = 0; k < K; ++k)
      out.v[k] = from_f<T>(p.is_max ? acc[k] : (count > 0 ? acc[k] / static_cast<float>(count) : 0.f));
    reinterpret_cast<Pack<T, K>*>(y)[i] = out;
  }
}

// Launches the 2-D kernel for a 2-D pool that fits 32-bit indices; false otherwise.
bool launch_pool2d(DType t, const void* x, void* y, const PoolShape& s, int64_t n, cudaStream_t st) {
  if (s.dims != 2 || !fits_int32(n) || !fits_int32(s.n * s.c * s.in[0] * s.in[1])) return false;
  Pool2D p;
  p.h = static_cast<uint32_t>(s.in[0]);
  p.w = static_cast<uint32_t>(s.in[1]);
  p.c = static_cast<uint32_t>(s.c);
  p.oh = FastDiv(s.out[0]);
  p.ow = FastDiv(s.out[1]);
  p.kh = static_cast<int>(s.kernel[0]);
  p.kw = static_cast<int>(s.kernel[1]);
  p.sh = static_cast<int>(s.stride[0]);
  p.sw = static_cast<int>(s.stride[1]);
  p.dh = static_cast<int>(s.dilation[0]);
  p.dw = static_cast<int>(s.dilation[1]);
  p.ph = static_cast<int>(s.pad[0]);
  p.pw = static_cast<int>(s.pad[1]);
  p.eh = static_cast<int>(s.pad_end[0]);
  p.ew = static_cast<int>(s.pad_end[1]);
  p.is_max = s.is_max;
  p.count_include_pad = s.count_include_pad;
  dispatch_float(t, [&](auto tag) {
    using T = decltype(tag);
    const T* xp = static_cast<const T*>(x);
    T* yp = static_cast<T*>(y);
    constexpr int K = kVec<T>;
    if (s.channels_last && s.c % K == 0 && aligned16(x) && aligned16(y)) {
      p.cp = FastDiv(s.c / K);
      pool2d_kernel<T, K, true><<<waves_grid(n / K), kThreads, 0, st>>>(xp, yp, static_cast<uint32_t>(n / K), p);
    } else if (s.channels_last) {
      p.cp = FastDiv(s.c);
      pool2d_kernel<T, 1, true><<<waves_grid(n), kThreads, 0, st>>>(xp, yp, static_cast<uint32_t>(n), p);
    } else {
      pool2d_kernel<T, 1, false><<<waves_grid(n), kThreads, 0, st>>>(xp, yp, static_cast<uint32_t>(n), p);
    }
  });
  CUDA_CHECK_LAUNCH();
  return true;
}

}  // namespace

void pool(DType t, const void* x, void* y, const PoolShape& shape, cudaStream_t s) {
  int64_t n = shape.n * shape.c;
  for (int d = 0; d < shape.dims; ++d) n *= shape.out[d];
  if (n <= 0) return;
  if (fast_kernels() && launch_pool2d(t, x, y, shape, n, s)) return;
  dispatch_float(t, [&](auto tag) {
    using T = decltype(tag);
    pool_kernel<T><<<grid_for(n), kThreads, 0, s>>>(static_cast<const T*>(x), static_cast<T*>(y), n, shape);
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace sluice::cuda
