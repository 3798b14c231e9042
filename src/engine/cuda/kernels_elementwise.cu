// Elementwise kernels: activations, broadcasting binary ops, the convolution epilogue, casts and
// the input normalization.  All are memory-bound; they compute in float and touch each element once.
#include <type_traits>

#include "engine/cuda/kernels.h"
#include "engine/cuda/kernels_common.cuh"

namespace sluice::cuda {
namespace {

__device__ __forceinline__ float apply_act(float x, const ActParams& p) {
  switch (p.act) {
    case Act::Identity: return x;
    case Act::Relu: return x > 0.f ? x : 0.f;
    case Act::LeakyRelu: return x >= 0.f ? x : p.a * x;
    case Act::Clip: return fminf(fmaxf(x, p.a), p.b);
    case Act::Sigmoid: return 1.f / (1.f + expf(-x));
    case Act::Tanh: return tanhf(x);
    case Act::HardSigmoid: return fmaxf(0.f, fminf(1.f, p.a * x + p.b));
    case Act::HardSwish: return x * fmaxf(0.f, fminf(1.f, x * (1.f / 6.f) + 0.5f));
    case Act::Exp: return expf(x);
    case Act::Log: return logf(x);
    case Act::Sqrt: return sqrtf(x);
    case Act::Neg: return -x;
    case Act::Abs: return fabsf(x);
    case Act::Erf: return erff(x);
    case Act::Reciprocal: return 1.f / x;
    case Act::Floor: return floorf(x);
    case Act::Ceil: return ceilf(x);
    case Act::Round: return rintf(x);   // ONNX Round: halves to even, like rint
    case Act::Elu: return x > 0.f ? x : p.a * (expf(x) - 1.f);
    case Act::Softplus: return x > 20.f ? x : log1pf(expf(x));
    case Act::Gelu: return 0.5f * x * (1.f + erff(x * 0.70710678118654752f));
    case Act::GeluTanh: {
      const float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
      return 0.5f * x * (1.f + tanhf(u));
    }
    case Act::Selu: return x > 0.f ? p.b * x : p.b * (p.a * expf(x) - p.a);
    case Act::Sin: return sinf(x);
    case Act::Cos: return cosf(x);
    case Act::Not: return x == 0.f ? 1.f : 0.f;
  }
  return x;
}

__device__ __forceinline__ float apply_bin(BinOp op, float a, float b) {
  switch (op) {
    case BinOp::Add: return a + b;
    case BinOp::Sub: return a - b;
    case BinOp::Mul: return a * b;
    case BinOp::Div: return a / b;
    case BinOp::Pow: return powf(a, b);
    case BinOp::Max: return fmaxf(a, b);
    case BinOp::Min: return fminf(a, b);
    case BinOp::PRelu: return a >= 0.f ? a : a * b;
    case BinOp::Mod: return fmodf(a, b);
  }
  return a;
}

template <typename T>
__global__ void unary_kernel(const T* x, T* y, int64_t n, ActParams p) {
  SLUICE_GRID_STRIDE(i, n) { y[i] = from_f<T>(apply_act(to_f(x[i]), p)); }
}

template <typename T>
__global__ void binary_same_kernel(BinOp op, const T* a, const T* b, T* y, int64_t n, ActParams post) {
  SLUICE_GRID_STRIDE(i, n) { y[i] = from_f<T>(apply_act(apply_bin(op, to_f(a[i]), to_f(b[i])), post)); }
}

template <typename T>
__global__ void binary_bcast_kernel(BinOp op, const T* a, const T* b, T* y, int64_t n, BroadcastShape s,
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

template <typename T>
__global__ void bias_act_kernel(T* y, const T* bias, const T* z, int64_t n, int64_t channels, int64_t inner,
                                ActParams p) {
  SLUICE_GRID_STRIDE(i, n) {
    float v = to_f(y[i]);
    if (bias) v += to_f(bias[(i / inner) % channels]);
    if (z) v += to_f(z[i]);
    y[i] = from_f<T>(apply_act(v, p));
  }
}

template <typename T>
__global__ void channel_affine_kernel(const T* x, T* y, const float* scale, const float* shift, int64_t n,
                                      int64_t channels, int64_t inner) {
  SLUICE_GRID_STRIDE(i, n) {
    const int64_t c = (i / inner) % channels;
    y[i] = from_f<T>(to_f(x[i]) * scale[c] + shift[c]);
  }
}

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
__global__ void cast_kernel(const From* x, To* y, int64_t n) {
  SLUICE_GRID_STRIDE(i, n) { y[i] = convert<From, To>(x[i]); }
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

template <typename In, typename Out>
__global__ void normalize_kernel(const In* x, Out* y, int64_t n, int64_t channels, int64_t inner, float scale,
                                 const float* mean, const float* stddev, bool per_channel) {
  SLUICE_GRID_STRIDE(i, n) {
    const int64_t c = per_channel ? (i / inner) % channels : 0;
    float v;
    if constexpr (std::is_same<In, uint8_t>::value) v = static_cast<float>(x[i]);
    else v = to_f(x[i]);
    y[i] = from_f<Out>((v * scale - mean[c]) / stddev[c]);
  }
}

template <typename U>
__global__ void fill_kernel(U* y, int64_t n, U v) {
  SLUICE_GRID_STRIDE(i, n) { y[i] = v; }
}

}  // namespace

void unary(DType t, const void* x, void* y, int64_t n, ActParams p, cudaStream_t s) {
  if (n <= 0) return;
  dispatch_float(t, [&](auto tag) {
    using T = decltype(tag);
    unary_kernel<T><<<grid_for(n), kThreads, 0, s>>>(static_cast<const T*>(x), static_cast<T*>(y), n, p);
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
    if (same)
      binary_same_kernel<T><<<grid_for(n), kThreads, 0, s>>>(op, pa, pb, static_cast<T*>(y), n, post);
    else
      binary_bcast_kernel<T><<<grid_for(n), kThreads, 0, s>>>(op, pa, pb, static_cast<T*>(y), n, shape, post);
  });
  CUDA_CHECK_LAUNCH();
}

void bias_act(DType t, void* y, const void* bias, const void* z, int64_t outer, int64_t channels, int64_t inner,
              ActParams p, cudaStream_t s) {
  const int64_t n = outer * channels * inner;
  if (n <= 0) return;
  dispatch_float(t, [&](auto tag) {
    using T = decltype(tag);
    bias_act_kernel<T><<<grid_for(n), kThreads, 0, s>>>(static_cast<T*>(y), static_cast<const T*>(bias),
                                                        static_cast<const T*>(z), n, channels, inner, p);
  });
  CUDA_CHECK_LAUNCH();
}

void channel_affine(DType t, const void* x, void* y, const float* scale, const float* shift, int64_t outer,
                    int64_t channels, int64_t inner, cudaStream_t s) {
  const int64_t n = outer * channels * inner;
  if (n <= 0) return;
  dispatch_float(t, [&](auto tag) {
    using T = decltype(tag);
    channel_affine_kernel<T><<<grid_for(n), kThreads, 0, s>>>(static_cast<const T*>(x), static_cast<T*>(y), scale,
                                                              shift, n, channels, inner);
  });
  CUDA_CHECK_LAUNCH();
}

void cast(DType from, DType to, const void* x, void* y, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  dispatch_any(from, [&](auto ftag) {
    using From = decltype(ftag);
    dispatch_any(to, [&](auto ttag) {
      using To = decltype(ttag);
      cast_kernel<From, To><<<grid_for(n), kThreads, 0, s>>>(static_cast<const From*>(x), static_cast<To*>(y), n);
    });
  });
  CUDA_CHECK_LAUNCH();
}

void normalize(DType in, DType out, const void* x, void* y, int64_t outer, int64_t channels, int64_t inner,
               float scale, const float* mean, const float* stddev, bool per_channel, cudaStream_t s) {
  const int64_t n = outer * channels * inner;
  if (n <= 0) return;
  auto launch = [&](auto itag) {
    using In = decltype(itag);
    dispatch_float(out, [&](auto otag) {
      using Out = decltype(otag);
      normalize_kernel<In, Out><<<grid_for(n), kThreads, 0, s>>>(static_cast<const In*>(x), static_cast<Out*>(y), n,
                                                                 channels, inner, scale, mean, stddev, per_channel);
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
