// Elementwise kernels: activations, broadcasting binary ops and the per-channel ops (the
// convolution epilogue, unfused BatchNormalization).  All are memory-bound: each thread moves 16
// bytes per access (a Pack of 8 half or 4 float elements), index arithmetic is 32-bit with
// precomputed divisors (FastDiv), and grids are a few waves of the GPU with grid-stride loops.
// Tensors of 2^31 elements or more, or misaligned pointers, take the plain one-element kernels.
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/params.h"
#include "engine/cuda/kernels.h"
#include "engine/cuda/kernels_act.cuh"
#include "engine/cuda/kernels_common.cuh"

namespace sluice::cuda {

bool fast_kernels() {
  static const bool on = param_on("SLUICE_CUDA_FAST");
  return on;
}

bool switch_on(const char* name) { return param_on(name); }

unsigned waves_grid(int64_t n, int threads) {
  static int sms = [] {
    int dev = 0, count = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
      count = 132;
    return count;
  }();
  const int64_t per_sm = 2048 / threads;   // resident blocks of this size per SM, at full occupancy
  const int64_t cap = static_cast<int64_t>(sms) * per_sm * 4;
  int64_t blocks = (n + threads - 1) / threads;
  if (blocks > cap) blocks = cap;
  return static_cast<unsigned>(blocks < 1 ? 1 : blocks);
}

namespace {

// Global index of this thread and the grid's size, 32-bit.
__device__ __forceinline__ uint32_t thread_index() { return blockIdx.x * blockDim.x + threadIdx.x; }
__device__ __forceinline__ uint32_t grid_size() { return gridDim.x * blockDim.x; }

// ---- unary ---------------------------------------------------------------------------------------

// n / K packs, then the last n % K elements one by one.
template <typename T, int K>
__global__ void unary_kernel(const T* x, T* y, uint32_t n, ActParams p) {
  const uint32_t packs = n / K;
  for (uint32_t i = thread_index(); i < packs; i += grid_size()) {
    Pack<T, K> a = reinterpret_cast<const Pack<T, K>*>(x)[i];
#pragma unroll
    for (int k = 0; k < K; ++k) a.v[k] = from_f<T>(apply_act(to_f(a.v[k]), p));
    reinterpret_cast<Pack<T, K>*>(y)[i] = a;
  }
  for (uint32_t i = packs * K + thread_index(); i < n; i += grid_size()) y[i] = from_f<T>(apply_act(to_f(x[i]), p));
}

template <typename T>
__global__ void unary_kernel64(const T* x, T* y, int64_t n, ActParams p) {
  SLUICE_GRID_STRIDE(i, n) { y[i] = from_f<T>(apply_act(to_f(x[i]), p)); }
}

// ---- swish: v * sigmoid(a v), v = x (+ bias) ------------------------------------------------------
// The generic unary kernel picks its activation with a switch on a run-time value for each element:
// a tree of branches per element, which also keeps the compiler from interleaving the elements of
// a pack, so CLIP's quick GELU ran issue-bound at about half the copy rate.  This kernel has the
// activation at compile time, no branch inside a pack and two packs in flight per thread.

__device__ __forceinline__ float ex2_approx(float x) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}
// Not flushing: 1 / d for d up to 2^128 stays a subnormal, as the exact division's result does.
__device__ __forceinline__ float rcp_approx(float x) {
  float r;
  asm("rcp.approx.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}

// neg_a_log2e = -a / ln 2, for the fast form exp(-a v) = 2^(v * neg_a_log2e).
template <bool Fast>
__device__ __forceinline__ float swish_f(float v, float a, float neg_a_log2e) {
  if (Fast) return v * rcp_approx(1.f + ex2_approx(v * neg_a_log2e));
  return v / (1.f + expf(-a * v));   // apply_act's Act::Swish, the same expression
}

// Pack i (its first element e = i * K) through the swish.  With a bias, channels % K == 0 and the
// bias is 16-byte aligned, so the pack's K biases are consecutive and load as float4s.
template <typename T, int K, bool Bias, bool Fast>
__device__ __forceinline__ void swish_pack(Pack<T, K>& u, uint32_t e, const float* bias, FastDiv channels, float a,
                                           float neg_a_log2e) {
  float bb[K];
  if (Bias) {
    uint32_t c;
    channels.divmod(e, &c);
    if constexpr (K % 4 == 0) {
#pragma unroll
      for (int k = 0; k < K; k += 4) {
        const float4 q = *reinterpret_cast<const float4*>(bias + c + k);
        bb[k] = q.x;
        bb[k + 1] = q.y;
        bb[k + 2] = q.z;
        bb[k + 3] = q.w;
      }
    } else {
#pragma unroll
      for (int k = 0; k < K; ++k) bb[k] = bias[c + k];
    }
  }
#pragma unroll
  for (int k = 0; k < K; ++k) {
    float v = to_f(u.v[k]);
    if (Bias) v += bb[k];
    u.v[k] = from_f<T>(swish_f<Fast>(v, a, neg_a_log2e));
  }
}

// n / K packs, two a thread at a time (both loads issued before either is computed), then the last
// n % K elements one by one (only without a bias, or with K == 1: a bias takes packs only when
// channels % K == 0, and then n % K == 0).
template <typename T, int K, bool Bias, bool Fast>
__global__ void __launch_bounds__(kThreads) swish_kernel(const T* x, T* y, uint32_t n, const float* bias,
                                                         FastDiv channels, float a) {
  const float neg_a_log2e = -a * 1.4426950408889634f;
  const uint32_t packs = n / K, stride = grid_size();
  const Pack<T, K>* xp = reinterpret_cast<const Pack<T, K>*>(x);
  Pack<T, K>* yp = reinterpret_cast<Pack<T, K>*>(y);
  uint32_t i = thread_index();
  for (; i + stride < packs; i += 2 * stride) {
    Pack<T, K> u = xp[i];
    Pack<T, K> w = xp[i + stride];
    swish_pack<T, K, Bias, Fast>(u, i * K, bias, channels, a, neg_a_log2e);
    swish_pack<T, K, Bias, Fast>(w, (i + stride) * K, bias, channels, a, neg_a_log2e);
    yp[i] = u;
    yp[i + stride] = w;
  }
  if (i < packs) {
    Pack<T, K> u = xp[i];
    swish_pack<T, K, Bias, Fast>(u, i * K, bias, channels, a, neg_a_log2e);
    yp[i] = u;
  }
  if (K > 1)
    for (uint32_t j = packs * K + thread_index(); j < n; j += stride) {
      Pack<T, 1> u;
      u.v[0] = x[j];
      swish_pack<T, 1, Bias, Fast>(u, j, bias, channels, a, neg_a_log2e);
      y[j] = u.v[0];
    }
}

template <typename T>
__global__ void swish_kernel64(const T* x, T* y, int64_t n, const float* bias, int64_t channels, float a, bool fast) {
  const float neg_a_log2e = -a * 1.4426950408889634f;
  SLUICE_GRID_STRIDE(i, n) {
    float v = to_f(x[i]);
    if (bias) v += bias[i % channels];
    y[i] = from_f<T>(fast ? swish_f<true>(v, a, neg_a_log2e) : swish_f<false>(v, a, neg_a_log2e));
  }
}

template <typename T, int K>
void launch_swish(const T* x, T* y, uint32_t n, const SwishParams& p, cudaStream_t s) {
  const FastDiv ch(p.bias ? p.channels : 1);
  const unsigned grid = waves_grid(n / K / 2 + 1);
  if (p.bias) {
    if (p.fast) swish_kernel<T, K, true, true><<<grid, kThreads, 0, s>>>(x, y, n, p.bias, ch, p.alpha);
    else swish_kernel<T, K, true, false><<<grid, kThreads, 0, s>>>(x, y, n, p.bias, ch, p.alpha);
  } else {
    if (p.fast) swish_kernel<T, K, false, true><<<grid, kThreads, 0, s>>>(x, y, n, nullptr, ch, p.alpha);
    else swish_kernel<T, K, false, false><<<grid, kThreads, 0, s>>>(x, y, n, nullptr, ch, p.alpha);
  }
}

// ---- binary --------------------------------------------------------------------------------------

template <typename T, int K>
__global__ void binary_same_kernel(BinOp op, const T* a, const T* b, T* y, uint32_t n, ActParams post) {
  const uint32_t packs = n / K;
  for (uint32_t i = thread_index(); i < packs; i += grid_size()) {
    Pack<T, K> u = reinterpret_cast<const Pack<T, K>*>(a)[i];
    const Pack<T, K> w = reinterpret_cast<const Pack<T, K>*>(b)[i];
#pragma unroll
    for (int k = 0; k < K; ++k) u.v[k] = from_f<T>(apply_act(apply_bin(op, to_f(u.v[k]), to_f(w.v[k])), post));
    reinterpret_cast<Pack<T, K>*>(y)[i] = u;
  }
  for (uint32_t i = packs * K + thread_index(); i < n; i += grid_size())
    y[i] = from_f<T>(apply_act(apply_bin(op, to_f(a[i]), to_f(b[i])), post));
}

// Broadcasting with 32-bit offsets.  Each thread takes K consecutive outputs of the innermost dim
// (its extent is a multiple of K); an operand whose innermost stride is 1 is read as one pack, one
// whose stride is 0 as a single element used K times.
struct Broadcast32 {
  int rank = 0;
  FastDiv out[kMaxRank];
  uint32_t sa[kMaxRank] = {}, sb[kMaxRank] = {};
};

template <typename T, int K>
__global__ void binary_bcast_kernel(BinOp op, const T* a, const T* b, T* y, uint32_t packs, Broadcast32 s,
                                    ActParams post) {
  const int last = s.rank - 1;
  const bool a_vec = s.sa[last] != 0, b_vec = s.sb[last] != 0;
  for (uint32_t i = thread_index(); i < packs; i += grid_size()) {
    uint32_t rem = i * K, oa = 0, ob = 0;
    for (int d = last; d >= 0; --d) {
      uint32_t idx;
      rem = s.out[d].divmod(rem, &idx);
      oa += idx * s.sa[d];
      ob += idx * s.sb[d];
    }
    Pack<T, K> u, w;
    if (a_vec) u = *reinterpret_cast<const Pack<T, K>*>(a + oa);
    else
#pragma unroll
      for (int k = 0; k < K; ++k) u.v[k] = a[oa];
    if (b_vec) w = *reinterpret_cast<const Pack<T, K>*>(b + ob);
    else
#pragma unroll
      for (int k = 0; k < K; ++k) w.v[k] = b[ob];
#pragma unroll
    for (int k = 0; k < K; ++k) u.v[k] = from_f<T>(apply_act(apply_bin(op, to_f(u.v[k]), to_f(w.v[k])), post));
    *reinterpret_cast<Pack<T, K>*>(y + static_cast<size_t>(i) * K) = u;
  }
}

template <typename T>
__global__ void binary_bcast_kernel64(BinOp op, const T* a, const T* b, T* y, int64_t n, BroadcastShape s,
                                      ActParams post) {
  SLUICE_GRID_STRIDE(i, n) {
    int64_t rem = i, oa = 0, ob = 0;
    for (int d = s.rank - 1; d >= 0; --d) {
      const int64_t q = rem / s.out[d];
      const int64_t idx = rem - q * s.out[d];
      rem = q;
      oa += idx * s.sa[d];
      ob += idx * s.sb[d];
    }
    y[i] = from_f<T>(apply_act(apply_bin(op, to_f(a[oa]), to_f(b[ob])), post));
  }
}

// ---- per-channel ops over [outer, channels, inner] -------------------------------------------------
// y = act(x * scale[c] + shift[c] + bias[c] + z): the convolution epilogue (scale/shift null) and
// unfused BatchNormalization (bias/z null).  x may be y.  A pack of K elements shares one channel
// when inner is a multiple of K, or covers K consecutive channels when inner is 1 (channels-last).
template <typename T, int K>
__global__ void channel_kernel(const T* x, T* y, const float* scale, const float* shift, const T* bias, const T* z,
                               uint32_t n, FastDiv inner, FastDiv channels, ActParams p) {
  const uint32_t packs = n / K;
  const bool per_element = inner.d == 1;
  for (uint32_t i = thread_index(); i < packs; i += grid_size()) {
    uint32_t c0;
    channels.divmod(inner.div(i * K), &c0);
    Pack<T, K> v = reinterpret_cast<const Pack<T, K>*>(x)[i];
    Pack<T, K> w;
    if (z) w = reinterpret_cast<const Pack<T, K>*>(z)[i];
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const uint32_t c = per_element ? c0 + k : c0;
      float f = to_f(v.v[k]);
      if (scale) f = f * scale[c] + shift[c];
      if (bias) f += to_f(bias[c]);
      if (z) f += to_f(w.v[k]);
      v.v[k] = from_f<T>(apply_act(f, p));
    }
    reinterpret_cast<Pack<T, K>*>(y)[i] = v;
  }
}

template <typename T>
__global__ void channel_kernel64(const T* x, T* y, const float* scale, const float* shift, const T* bias, const T* z,
                                 int64_t n, int64_t inner, int64_t channels, ActParams p) {
  SLUICE_GRID_STRIDE(i, n) {
    const int64_t c = (i / inner) % channels;
    float f = to_f(x[i]);
    if (scale) f = f * scale[c] + shift[c];
    if (bias) f += to_f(bias[c]);
    if (z) f += to_f(z[i]);
    y[i] = from_f<T>(apply_act(f, p));
  }
}

template <typename T>
void launch_channel(const T* x, T* y, const float* scale, const float* shift, const T* bias, const T* z, int64_t outer,
                    int64_t channels, int64_t inner, ActParams p, cudaStream_t s) {
  const int64_t n = outer * channels * inner;
  constexpr int K = kVec<T>;
  const bool packs_fit = inner == 1 ? channels % K == 0 : inner % K == 0;
  if (fast_kernels() && fits_int32(n) && packs_fit && aligned16(x) && aligned16(y) && (!z || aligned16(z))) {
    channel_kernel<T, K><<<waves_grid(n / K), kThreads, 0, s>>>(x, y, scale, shift, bias, z, static_cast<uint32_t>(n),
                                                                FastDiv(inner), FastDiv(channels), p);
  } else if (fits_int32(n) && fast_kernels()) {
    channel_kernel<T, 1><<<waves_grid(n), kThreads, 0, s>>>(x, y, scale, shift, bias, z, static_cast<uint32_t>(n),
                                                            FastDiv(inner), FastDiv(channels), p);
  } else {
    channel_kernel64<T><<<grid_for(n), kThreads, 0, s>>>(x, y, scale, shift, bias, z, n, inner, channels, p);
  }
}

}  // namespace

void unary(DType t, const void* x, void* y, int64_t n, ActParams p, cudaStream_t s) {
  if (n <= 0) return;
  dispatch_float(t, [&](auto tag) {
    using T = decltype(tag);
    const T* xp = static_cast<const T*>(x);
    T* yp = static_cast<T*>(y);
    constexpr int K = kVec<T>;
    if (!fast_kernels() || !fits_int32(n))
      unary_kernel64<T><<<grid_for(n), kThreads, 0, s>>>(xp, yp, n, p);
    else if (aligned16(x) && aligned16(y))
      unary_kernel<T, K><<<waves_grid(n / K + 1), kThreads, 0, s>>>(xp, yp, static_cast<uint32_t>(n), p);
    else
      unary_kernel<T, 1><<<waves_grid(n), kThreads, 0, s>>>(xp, yp, static_cast<uint32_t>(n), p);
  });
  CUDA_CHECK_LAUNCH();
}

void swish(DType t, const void* x, void* y, int64_t n, const SwishParams& p, cudaStream_t s) {
  if (n <= 0) return;
  SLUICE_CHECK(!p.bias || (p.channels >= 1 && n % p.channels == 0), "swish: ", n, " elements are not rows of ", p.channels,
               " biases");
  dispatch_float(t, [&](auto tag) {
    using T = decltype(tag);
    const T* xp = static_cast<const T*>(x);
    T* yp = static_cast<T*>(y);
    constexpr int K = kVec<T>;
    const bool packs_fit = !p.bias || (p.channels % K == 0 && aligned16(p.bias));
    if (!fast_kernels() || !fits_int32(n) || !fits_int32(p.channels))
      swish_kernel64<T><<<grid_for(n), kThreads, 0, s>>>(xp, yp, n, p.bias, p.channels, p.alpha, p.fast);
    else if (aligned16(x) && aligned16(y) && packs_fit)
      launch_swish<T, K>(xp, yp, static_cast<uint32_t>(n), p, s);
    else
      launch_swish<T, 1>(xp, yp, static_cast<uint32_t>(n), p, s);
  });
  CUDA_CHECK_LAUNCH();
}

void binary(DType t, BinOp op, const void* a, const void* b, void* y, const BroadcastShape& shape, ActParams post,
            cudaStream_t s) {
  int64_t n = 1;
  bool same = true;
  int64_t contiguous = 1;
  for (int d = shape.rank - 1; d >= 0; --d) {
    n *= shape.out[d];
    if (shape.out[d] != 1 && (shape.sa[d] != contiguous || shape.sb[d] != contiguous)) same = false;
    contiguous *= shape.out[d];
  }
  if (n <= 0) return;
  dispatch_float(t, [&](auto tag) {
    using T = decltype(tag);
    const T* pa = static_cast<const T*>(a);
    const T* pb = static_cast<const T*>(b);
    T* py = static_cast<T*>(y);
    constexpr int K = kVec<T>;
    const bool fast = fast_kernels() && fits_int32(n);
    const bool aligned = aligned16(a) && aligned16(b) && aligned16(y);
    if (same && fast) {
      if (aligned) binary_same_kernel<T, K><<<waves_grid(n / K + 1), kThreads, 0, s>>>(op, pa, pb, py, static_cast<uint32_t>(n), post);
      else binary_same_kernel<T, 1><<<waves_grid(n), kThreads, 0, s>>>(op, pa, pb, py, static_cast<uint32_t>(n), post);
      return;
    }
    if (fast) {   // every offset is below n < 2^31: operands never exceed the output
      Broadcast32 b32;
      b32.rank = shape.rank;
      for (int d = 0; d < shape.rank; ++d) {
        b32.out[d] = FastDiv(shape.out[d]);
        b32.sa[d] = static_cast<uint32_t>(shape.sa[d]);
        b32.sb[d] = static_cast<uint32_t>(shape.sb[d]);
      }
      const int last = shape.rank - 1;
      const bool packs_fit = shape.out[last] % K == 0 && shape.sa[last] <= 1 && shape.sb[last] <= 1;
      if (packs_fit && aligned)
        binary_bcast_kernel<T, K><<<waves_grid(n / K), kThreads, 0, s>>>(op, pa, pb, py, static_cast<uint32_t>(n / K), b32, post);
      else   // packs of one element read any stride
        binary_bcast_kernel<T, 1><<<waves_grid(n), kThreads, 0, s>>>(op, pa, pb, py, static_cast<uint32_t>(n), b32, post);
      return;
    }
    binary_bcast_kernel64<T><<<grid_for(n), kThreads, 0, s>>>(op, pa, pb, py, n, shape, post);
  });
  CUDA_CHECK_LAUNCH();
}

void bias_act(DType t, void* y, const void* bias, const void* z, int64_t outer, int64_t channels, int64_t inner,
              ActParams p, cudaStream_t s) {
  if (outer * channels * inner <= 0) return;
  dispatch_float(t, [&](auto tag) {
    using T = decltype(tag);
    launch_channel<T>(static_cast<const T*>(y), static_cast<T*>(y), nullptr, nullptr, static_cast<const T*>(bias),
                      static_cast<const T*>(z), outer, channels, inner, p, s);
  });
  CUDA_CHECK_LAUNCH();
}

void channel_affine(DType t, const void* x, void* y, const float* scale, const float* shift, int64_t outer,
                    int64_t channels, int64_t inner, cudaStream_t s) {
  if (outer * channels * inner <= 0) return;
  dispatch_float(t, [&](auto tag) {
    using T = decltype(tag);
    launch_channel<T>(static_cast<const T*>(x), static_cast<T*>(y), scale, shift, nullptr, nullptr, outer, channels, inner,
                      ActParams{}, s);
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace sluice::cuda
