// Elementwise kernels: activations, broadcasting binary ops and the per-channel ops (the
// convolution epilogue, unfused BatchNormalization).  All are memory-bound: each thread moves 16
// bytes per access (a Pack of 8 half or 4 float elements), index arithmetic is 32-bit with
// precomputed divisors (FastDiv), and grids are a few waves of the GPU with grid-stride loops.
// Tensors of 2^31 elements or more, or misaligned pointers, take the plain one-element kernels.
#include <cstdlib>
#include <cstring>

#include "engine/cuda/kernels.h"
#include "engine/cuda/kernels_act.cuh"
#include "engine/cuda/kernels_common.cuh"

namespace sluice::cuda {

bool fast_kernels() {
  static const bool on = [] {
    const char* v = std::getenv("SLUICE_CUDA_FAST");
    return !(v && std::strcmp(v, "0") == 0);
  }();
  return on;
}

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
