// Conversions: Cast between any two element types, the input normalization (uint8 or float in,
// the compute type out, NCHW or channels-last with optional zero channels appended), and fill.
// Memory-bound; packs of up to 16 bytes per access where sizes and addresses allow.
#include <type_traits>

#include "engine/cuda/kernels.h"
#include "engine/cuda/kernels_common.cuh"

namespace sluice::cuda {
namespace {

// ---- casts ---------------------------------------------------------------------------------------
// Float-family sources go through float (double for float64); integer sources through int64.
template <typename T> struct IsFloating { static constexpr bool value = false; };
template <> struct IsFloating<float> { static constexpr bool value = true; };
template <> struct IsFloating<double> { static constexpr bool value = true; };
template <> struct IsFloating<__half> { static constexpr bool value = true; };
template <> struct IsFloating<__nv_bfloat16> { static constexpr bool value = true; };

template <typename T> __device__ __forceinline__ double load_d(T v) { return static_cast<double>(to_f(v)); }
template <> __device__ __forceinline__ double load_d<double>(double v) { return v; }

template <typename To> __device__ __forceinline__ To store_d(double v) { return from_f<To>(static_cast<float>(v)); }
template <> __device__ __forceinline__ double store_d<double>(double v) { return v; }

template <typename From, typename To>
__device__ __forceinline__ To convert(From x) {
  if constexpr (std::is_same<To, bool>::value) {
    if constexpr (IsFloating<From>::value) return load_d(x) != 0.0;
    else return x != From(0);
  } else if constexpr (IsFloating<From>::value && IsFloating<To>::value) {
    if constexpr (std::is_same<From, double>::value || std::is_same<To, double>::value) return store_d<To>(load_d(x));
    else return from_f<To>(to_f(x));
  } else if constexpr (IsFloating<From>::value) {
    // Through int64 so negative floats wrap instead of being undefined for unsigned targets.
    return static_cast<To>(static_cast<int64_t>(load_d(x)));
  } else if constexpr (IsFloating<To>::value) {
    if constexpr (std::is_same<To, double>::value) return static_cast<double>(static_cast<int64_t>(x));
    else return from_f<To>(static_cast<float>(static_cast<int64_t>(x)));
  } else {
    return static_cast<To>(x);
  }
}

template <typename From, typename To>
__global__ void cast_kernel64(const From* x, To* y, int64_t n) {
  SLUICE_GRID_STRIDE(i, n) { y[i] = convert<From, To>(x[i]); }
}

// K elements per thread: one access of K * sizeof(From) bytes in, K * sizeof(To) out.
template <typename From, typename To, int K>
__global__ void cast_kernel(const From* x, To* y, uint32_t n) {
  const uint32_t packs = n / K, stride = gridDim.x * blockDim.x;
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < packs; i += stride) {
    const Pack<From, K> a = reinterpret_cast<const Pack<From, K>*>(x)[i];
    Pack<To, K> b;
#pragma unroll
    for (int k = 0; k < K; ++k) b.v[k] = convert<From, To>(a.v[k]);
    reinterpret_cast<Pack<To, K>*>(y)[i] = b;
  }
  for (uint32_t i = packs * K + blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) y[i] = convert<From, To>(x[i]);
}

template <typename F>
void dispatch_any(DType t, F&& f) {
  switch (t) {
    case DType::F32: f(float{}); return;
    case DType::F16: f(__half{}); return;
    case DType::BF16: f(__nv_bfloat16{}); return;
    case DType::F64: f(double{}); return;
    case DType::U8: f(uint8_t{}); return;
    case DType::I8: f(int8_t{}); return;
    case DType::I32: f(int32_t{}); return;
    case DType::I64: f(int64_t{}); return;
    case DType::Bool: f(bool{}); return;
    default: SLUICE_THROW("cuda cast: element type ", dtype_name(t), " is not supported");
  }
}

// ---- input normalization -------------------------------------------------------------------------

template <typename In>
__device__ __forceinline__ float load_input(In v) {
  if constexpr (std::is_same<In, uint8_t>::value) return static_cast<float>(v);
  else return to_f(v);
}

// NCHW in and out, K elements of one channel per thread (inner is a multiple of K).
template <typename In, typename Out, int K>
__global__ void normalize_kernel(const In* x, Out* y, uint32_t n, FastDiv inner, FastDiv channels, float scale,
                                 const float* mean, const float* stddev, bool per_channel) {
  const uint32_t packs = n / K, stride = gridDim.x * blockDim.x;
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < packs; i += stride) {
    uint32_t c = 0;
    if (per_channel) channels.divmod(inner.div(i * K), &c);
    const float m = mean ? mean[c] : 0.f, sd = stddev ? stddev[c] : 1.f;
    const Pack<In, K> a = reinterpret_cast<const Pack<In, K>*>(x)[i];
    Pack<Out, K> b;
#pragma unroll
    for (int k = 0; k < K; ++k) b.v[k] = from_f<Out>((load_input(a.v[k]) * scale - m) / sd);
    reinterpret_cast<Pack<Out, K>*>(y)[i] = b;
  }
}

template <typename In, typename Out>
__global__ void normalize_kernel64(const In* x, Out* y, int64_t n, int64_t channels, int64_t inner, float scale,
                                   const float* mean, const float* stddev, bool per_channel) {
  SLUICE_GRID_STRIDE(i, n) {
    const int64_t c = per_channel ? (i / inner) % channels : 0;
    const float m = mean ? mean[c] : 0.f, sd = stddev ? stddev[c] : 1.f;
    y[i] = from_f<Out>((load_input(x[i]) * scale - m) / sd);
  }
}

// NCHW in, channels-last out with c_out >= c channels (the extra ones zero): one thread per pixel.
// Reads are coalesced per channel plane; the pixel's channels are written side by side.
template <typename In, typename Out>
__global__ void normalize_nhwc_kernel(const In* x, Out* y, uint32_t pixels, FastDiv plane, uint32_t c, uint32_t c_out,
                                      float scale, const float* mean, const float* stddev, bool per_channel) {
  const uint32_t stride = gridDim.x * blockDim.x;
  for (uint32_t q = blockIdx.x * blockDim.x + threadIdx.x; q < pixels; q += stride) {
    uint32_t p;
    const uint32_t n = plane.divmod(q, &p);
    const In* xp = x + static_cast<size_t>(n) * c * plane.d + p;
    Out* yp = y + static_cast<size_t>(q) * c_out;
    for (uint32_t ch = 0; ch < c_out; ++ch) {
      float v = 0.f;
      if (ch < c) {
        const uint32_t k = per_channel ? ch : 0;
        v = (load_input(xp[static_cast<size_t>(ch) * plane.d]) * scale - (mean ? mean[k] : 0.f)) / (stddev ? stddev[k] : 1.f);
      }
      yp[ch] = from_f<Out>(v);
    }
  }
}

template <typename U>
__global__ void fill_kernel(U* y, int64_t n, U v) {
  SLUICE_GRID_STRIDE(i, n) { y[i] = v; }
}

}  // namespace

void cast(DType from, DType to, const void* x, void* y, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  dispatch_any(from, [&](auto ftag) {
    using From = decltype(ftag);
    dispatch_any(to, [&](auto ttag) {
      using To = decltype(ttag);
      constexpr int K = 16 / (sizeof(From) > sizeof(To) ? sizeof(From) : sizeof(To));
      if (fast_kernels() && fits_int32(n) && aligned16(x) && aligned16(y))
        cast_kernel<From, To, K><<<waves_grid(n / K + 1), kThreads, 0, s>>>(static_cast<const From*>(x), static_cast<To*>(y),
                                                                             static_cast<uint32_t>(n));
      else
        cast_kernel64<From, To><<<grid_for(n), kThreads, 0, s>>>(static_cast<const From*>(x), static_cast<To*>(y), n);
    });
  });
  CUDA_CHECK_LAUNCH();
}

void normalize(DType in, DType out, const void* x, void* y, const NormalizeShape& sh, const float* mean,
               const float* stddev, cudaStream_t s) {
  const int64_t n = sh.n * sh.channels * sh.inner;
  if (n <= 0) return;
  auto launch = [&](auto itag) {
    using In = decltype(itag);
    dispatch_float(out, [&](auto otag) {
      using Out = decltype(otag);
      const In* xp = static_cast<const In*>(x);
      Out* yp = static_cast<Out*>(y);
      if (sh.nhwc) {
        SLUICE_CHECK(fits_int32(sh.n * sh.inner * sh.channels_out) && sh.channels_out >= sh.channels,
                     "normalize to channels-last: bad shape");
        const int64_t pixels = sh.n * sh.inner;
        normalize_nhwc_kernel<In, Out><<<waves_grid(pixels), kThreads, 0, s>>>(
            xp, yp, static_cast<uint32_t>(pixels), FastDiv(sh.inner), static_cast<uint32_t>(sh.channels),
            static_cast<uint32_t>(sh.channels_out), sh.scale, mean, stddev, sh.per_channel);
        return;
      }
      constexpr int K = 16 / (sizeof(In) > sizeof(Out) ? sizeof(In) : sizeof(Out));
      if (fast_kernels() && fits_int32(n) && sh.inner % K == 0 && aligned16(x) && aligned16(y))
        normalize_kernel<In, Out, K><<<waves_grid(n / K), kThreads, 0, s>>>(xp, yp, static_cast<uint32_t>(n), FastDiv(sh.inner),
                                                                            FastDiv(sh.channels), sh.scale, mean, stddev,
                                                                            sh.per_channel);
      else
        normalize_kernel64<In, Out><<<grid_for(n), kThreads, 0, s>>>(xp, yp, n, sh.channels, sh.inner, sh.scale, mean, stddev,
                                                                     sh.per_channel);
    });
  };
  if (in == DType::U8) launch(uint8_t{});
  else dispatch_float(in, launch);
  CUDA_CHECK_LAUNCH();
}

void fill(std::size_t elem_size, void* y, int64_t n, uint64_t bits, cudaStream_t s) {
  if (n <= 0) return;
  dispatch_size(elem_size, [&](auto tag) {
    using U = decltype(tag);
    fill_kernel<U><<<grid_for(n), kThreads, 0, s>>>(static_cast<U*>(y), n, static_cast<U>(bits));
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace sluice::cuda
