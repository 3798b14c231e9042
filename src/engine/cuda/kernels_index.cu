// Kernels of the ops that attention-era models use around their products: comparisons and logic
// (bool results), Where, gathers and scatters with indices read on the device, CumSum and Trilu.
// They are small next to the GEMMs, so they use plain grid-stride loops with 64-bit indices; the
// point is that they run on the device inside the captured graph, not how fast.
#include <cmath>

#include "engine/cuda/kernels.h"
#include "engine/cuda/kernels_common.cuh"

namespace sluice::cuda {
namespace {

// The offsets of output element i in each of the operands of s.
template <int K>
__device__ __forceinline__ void offsets(const Broadcast3& s, int64_t i, int64_t* off) {
#pragma unroll
  for (int k = 0; k < K; ++k) off[k] = 0;
  for (int d = s.rank - 1; d >= 0; --d) {
    const int64_t q = i / s.out[d];
    const int64_t idx = i - q * s.out[d];
    i = q;
#pragma unroll
    for (int k = 0; k < K; ++k) off[k] += idx * s.st[k][d];
  }
}

// Comparable value of an element: floats as float, integers as int64 (exact for I64).
template <typename T> struct Val { using type = int64_t; };
template <> struct Val<float> { using type = float; };
template <> struct Val<__half> { using type = float; };
template <> struct Val<__nv_bfloat16> { using type = float; };
template <typename T> __device__ __forceinline__ typename Val<T>::type val(T v) { return static_cast<int64_t>(v); }
template <> __device__ __forceinline__ float val<float>(float v) { return v; }
template <> __device__ __forceinline__ float val<__half>(__half v) { return __half2float(v); }
template <> __device__ __forceinline__ float val<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
__global__ void compare_kernel(CmpOp op, const T* a, const T* b, uint8_t* y, int64_t n, Broadcast3 s) {
  SLUICE_GRID_STRIDE(i, n) {
    int64_t off[2];
    offsets<2>(s, i, off);
    const auto u = val(a[off[0]]), v = val(b[off[1]]);
    bool r = false;
    switch (op) {
      case CmpOp::Equal: r = u == v; break;
      case CmpOp::Less: r = u < v; break;
      case CmpOp::Greater: r = u > v; break;
      case CmpOp::LessOrEqual: r = u <= v; break;
      case CmpOp::GreaterOrEqual: r = u >= v; break;
      case CmpOp::And: r = (u != 0) && (v != 0); break;
      case CmpOp::Or: r = (u != 0) || (v != 0); break;
      case CmpOp::Xor: r = (u != 0) != (v != 0); break;
    }
    y[i] = r ? 1 : 0;
  }
}

template <typename T>
__global__ void int_binary_kernel(BinOp op, bool fmod, const T* a, const T* b, T* y, int64_t n, Broadcast3 s) {
  SLUICE_GRID_STRIDE(i, n) {
    int64_t off[2];
    offsets<2>(s, i, off);
    const int64_t u = a[off[0]], v = b[off[1]];
    int64_t r = 0;
    switch (op) {
      case BinOp::Add: r = u + v; break;
      case BinOp::Sub: r = u - v; break;
      case BinOp::Mul: r = u * v; break;
      case BinOp::Div: r = v == 0 ? 0 : u / v; break;
      case BinOp::Mod:
        if (v == 0) break;
        r = u % v;
        if (!fmod && r != 0 && ((r < 0) != (v < 0))) r += v;
        break;
      case BinOp::Max: r = u > v ? u : v; break;
      case BinOp::Min: r = u < v ? u : v; break;
      default: break;
    }
    y[i] = static_cast<T>(r);
  }
}

template <typename T>
__global__ void test_kernel(TestOp op, const T* x, uint8_t* y, int64_t n, bool pos, bool neg) {
  SLUICE_GRID_STRIDE(i, n) {
    const float v = to_f(x[i]);
    bool r = false;
    switch (op) {
      case TestOp::IsNaN: r = isnan(v); break;
      case TestOp::IsInf: r = isinf(v) && ((v > 0.f && pos) || (v < 0.f && neg)); break;
      case TestOp::Not: r = v == 0.f; break;
    }
    y[i] = r ? 1 : 0;
  }
}

template <typename U>
__global__ void where_kernel(const uint8_t* c, const U* x, const U* y, U* out, int64_t n, Broadcast3 s) {
  SLUICE_GRID_STRIDE(i, n) {
    int64_t off[3];
    offsets<3>(s, i, off);
    out[i] = c[off[0]] ? x[off[1]] : y[off[2]];
  }
}

__device__ __forceinline__ int64_t clamp_index(int64_t v, int64_t dim) {
  if (v < 0) v += dim;
  return v < 0 ? 0 : (v >= dim ? dim - 1 : v);
}

template <typename U, typename I>
__global__ void gather_axis_kernel(const U* x, const I* idx, U* y, int64_t n, int64_t dim, int64_t inner, int64_t count) {
  SLUICE_GRID_STRIDE(i, n) {
    const int64_t in = i % inner;
    const int64_t rest = i / inner;
    const int64_t j = rest % count, o = rest / count;
    const int64_t src = clamp_index(static_cast<int64_t>(idx[j]), dim);
    y[i] = x[(o * dim + src) * inner + in];
  }
}

__device__ __forceinline__ int64_t nd_offset(const IndexND& s, const int64_t* idx, int64_t row) {
  int64_t off = (row / s.rows_per_batch) * s.batch_stride;
  const int64_t* t = idx + row * s.k;
  for (int d = 0; d < s.k; ++d) off += clamp_index(t[d], s.dim[d]) * s.stride[d];
  return off;
}

template <typename U>
__global__ void gather_nd_kernel(const U* x, const int64_t* idx, U* y, int64_t n, IndexND s) {
  SLUICE_GRID_STRIDE(i, n) {
    const int64_t row = i / s.slice, j = i - row * s.slice;
    y[i] = x[nd_offset(s, idx, row) + j];
  }
}

template <typename U>
__global__ void scatter_nd_kernel(const int64_t* idx, const U* updates, U* y, int64_t n, IndexND s) {
  SLUICE_GRID_STRIDE(i, n) {
    const int64_t row = i / s.slice, j = i - row * s.slice;
    y[nd_offset(s, idx, row) + j] = updates[i];
  }
}

// The reduction of ScatterND (add, mul, max, min) applied to *addr atomically, so duplicate
// indices all take effect (ONNX defines the result for them, in any order).  A compare-and-swap
// loop on the word that holds the element: 16-bit types share a 32-bit word with a neighbour.
template <typename A>
__device__ __forceinline__ A combine(int op, A a, A b) {
  switch (op) {
    case 0: return a + b;
    case 1: return a * b;
    case 2: return a > b ? a : b;
    default: return a < b ? a : b;
  }
}

__device__ __forceinline__ void atomic_reduce(float* addr, int op, float v) {
  unsigned* w = reinterpret_cast<unsigned*>(addr);
  unsigned old = *w, seen;
  do {
    seen = old;
    old = atomicCAS(w, seen, __float_as_uint(combine(op, __uint_as_float(seen), v)));
  } while (old != seen);
}
__device__ __forceinline__ void atomic_reduce(int64_t* addr, int op, int64_t v) {
  unsigned long long* w = reinterpret_cast<unsigned long long*>(addr);
  unsigned long long old = *w, seen;
  do {
    seen = old;
    old = atomicCAS(w, seen, static_cast<unsigned long long>(combine(op, static_cast<int64_t>(seen), v)));
  } while (old != seen);
}
__device__ __forceinline__ void atomic_reduce(int32_t* addr, int op, int32_t v) {
  int old = *addr, seen;
  do {
    seen = old;
    old = atomicCAS(addr, seen, combine(op, seen, v));
  } while (old != seen);
}
template <typename H>
__device__ __forceinline__ void atomic_reduce_16(H* addr, int op, float v) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(addr);
  unsigned* w = reinterpret_cast<unsigned*>(a & ~uintptr_t{3});
  const unsigned shift = (a & 2u) ? 16u : 0u;
  unsigned old = *w, seen;
  do {
    seen = old;
    H cur;
    const uint16_t bits = static_cast<uint16_t>(seen >> shift);
    memcpy(&cur, &bits, 2);
    const H next = from_f<H>(combine(op, to_f(cur), v));
    uint16_t nb;
    memcpy(&nb, &next, 2);
    const unsigned word = (seen & ~(0xffffu << shift)) | (static_cast<unsigned>(nb) << shift);
    old = atomicCAS(w, seen, word);
  } while (old != seen);
}
__device__ __forceinline__ void atomic_reduce(__half* addr, int op, __half v) { atomic_reduce_16(addr, op, __half2float(v)); }
__device__ __forceinline__ void atomic_reduce(__nv_bfloat16* addr, int op, __nv_bfloat16 v) {
  atomic_reduce_16(addr, op, __bfloat162float(v));
}

template <typename T>
__global__ void scatter_nd_reduce_kernel(const int64_t* idx, const T* updates, T* y, int64_t n, IndexND s, int op) {
  SLUICE_GRID_STRIDE(i, n) {
    const int64_t row = i / s.slice, j = i - row * s.slice;
    atomic_reduce(y + nd_offset(s, idx, row) + j, op, updates[i]);
  }
}

// One thread per (outer, inner) line, walking the axis in order.
template <typename T, typename A>
__global__ void cumsum_kernel(const T* x, T* y, int64_t lines, int64_t r, int64_t inner, bool exclusive, bool reverse) {
  SLUICE_GRID_STRIDE(l, lines) {
    const int64_t o = l / inner, in = l - o * inner;
    const int64_t base = o * r * inner + in;
    A acc = 0;
    for (int64_t step = 0; step < r; ++step) {
      const int64_t j = reverse ? r - 1 - step : step;
      const A v = static_cast<A>(val(x[base + j * inner]));
      if (exclusive) {
        y[base + j * inner] = from_f<T>(static_cast<float>(acc));
        acc += v;
      } else {
        acc += v;
        y[base + j * inner] = from_f<T>(static_cast<float>(acc));
      }
    }
  }
}

template <typename T>
__global__ void cumsum_int_kernel(const T* x, T* y, int64_t lines, int64_t r, int64_t inner, bool exclusive, bool reverse) {
  SLUICE_GRID_STRIDE(l, lines) {
    const int64_t o = l / inner, in = l - o * inner;
    const int64_t base = o * r * inner + in;
    int64_t acc = 0;
    for (int64_t step = 0; step < r; ++step) {
      const int64_t j = reverse ? r - 1 - step : step;
      const int64_t v = static_cast<int64_t>(x[base + j * inner]);
      if (exclusive) {
        y[base + j * inner] = static_cast<T>(acc);
        acc += v;
      } else {
        acc += v;
        y[base + j * inner] = static_cast<T>(acc);
      }
    }
  }
}

template <typename U>
__global__ void trilu_kernel(const U* x, U* y, int64_t n, int64_t rows, int64_t cols, int64_t k, bool upper) {
  SLUICE_GRID_STRIDE(i, n) {
    const int64_t j = i % cols, r = (i / cols) % rows;
    const bool keep = upper ? j - r >= k : j - r <= k;
    y[i] = keep ? x[i] : U{0};
  }
}

template <typename T>
__global__ void col2im_kernel(const T* x, T* y, int64_t total, Col2ImShape s) {
  SLUICE_GRID_STRIDE(i, total) {
    const int64_t w = i % s.w, h = (i / s.w) % s.h, c = (i / (s.w * s.h)) % s.c, n = i / (s.w * s.h * s.c);
    float acc = 0.f;
    for (int64_t ki = 0; ki < s.kh; ++ki) {
      const int64_t hp = h + s.ph - ki * s.dh;   // = oy * sh for the block row that covers h
      if (hp < 0 || hp % s.sh != 0 || hp / s.sh >= s.oh) continue;
      const int64_t oy = hp / s.sh;
      for (int64_t kj = 0; kj < s.kw; ++kj) {
        const int64_t wp = w + s.pw - kj * s.dw;
        if (wp < 0 || wp % s.sw != 0 || wp / s.sw >= s.ow) continue;
        const int64_t ox = wp / s.sw;
        const int64_t row = (c * s.kh + ki) * s.kw + kj;
        acc += to_f(x[(n * s.c * s.kh * s.kw + row) * s.oh * s.ow + oy * s.ow + ox]);
      }
    }
    y[i] = from_f<T>(acc);
  }
}

// Calls f(T{}) for every element type the comparisons read.
template <typename F>
void dispatch_value(DType t, F&& f) {
  switch (t) {
    case DType::F32: f(float{}); return;
    case DType::F16: f(__half{}); return;
    case DType::BF16: f(__nv_bfloat16{}); return;
    case DType::I64: f(int64_t{}); return;
    case DType::I32: f(int32_t{}); return;
    case DType::I8: f(int8_t{}); return;
    case DType::U8:
    case DType::Bool: f(uint8_t{}); return;
    default: SLUICE_THROW("cuda kernel: element type ", dtype_name(t), " is not supported here");
  }
}

int64_t numel_of(const Broadcast3& s) {
  int64_t n = 1;
  for (int d = 0; d < s.rank; ++d) n *= s.out[d];
  return n;
}

}  // namespace

void compare(DType t, CmpOp op, const void* a, const void* b, uint8_t* y, const Broadcast3& shape, cudaStream_t s) {
  const int64_t n = numel_of(shape);
  if (n <= 0) return;
  dispatch_value(t, [&](auto tag) {
    using T = decltype(tag);
    compare_kernel<T><<<grid_for(n), kThreads, 0, s>>>(op, static_cast<const T*>(a), static_cast<const T*>(b), y, n, shape);
  });
  CUDA_CHECK_LAUNCH();
}

void int_binary(DType t, BinOp op, bool fmod, const void* a, const void* b, void* y, const Broadcast3& shape, cudaStream_t s) {
  const int64_t n = numel_of(shape);
  if (n <= 0) return;
  if (t == DType::I64)
    int_binary_kernel<int64_t><<<grid_for(n), kThreads, 0, s>>>(op, fmod, static_cast<const int64_t*>(a), static_cast<const int64_t*>(b),
                                                                 static_cast<int64_t*>(y), n, shape);
  else if (t == DType::I32)
    int_binary_kernel<int32_t><<<grid_for(n), kThreads, 0, s>>>(op, fmod, static_cast<const int32_t*>(a), static_cast<const int32_t*>(b),
                                                                 static_cast<int32_t*>(y), n, shape);
  else
    SLUICE_THROW("cuda int_binary: element type ", dtype_name(t), " is not an integer type");
  CUDA_CHECK_LAUNCH();
}

void test_values(DType t, TestOp op, const void* x, uint8_t* y, int64_t n, bool pos, bool neg, cudaStream_t s) {
  if (n <= 0) return;
  if (op == TestOp::Not) {
    test_kernel<uint8_t><<<grid_for(n), kThreads, 0, s>>>(op, static_cast<const uint8_t*>(x), y, n, pos, neg);
  } else {
    dispatch_float(t, [&](auto tag) {
      using T = decltype(tag);
      test_kernel<T><<<grid_for(n), kThreads, 0, s>>>(op, static_cast<const T*>(x), y, n, pos, neg);
    });
  }
  CUDA_CHECK_LAUNCH();
}

void where(std::size_t elem_size, const uint8_t* cond, const void* x, const void* y, void* out, const Broadcast3& shape,
           cudaStream_t s) {
  const int64_t n = numel_of(shape);
  if (n <= 0) return;
  dispatch_size(elem_size, [&](auto tag) {
    using U = decltype(tag);
    where_kernel<U><<<grid_for(n), kThreads, 0, s>>>(cond, static_cast<const U*>(x), static_cast<const U*>(y),
                                                     static_cast<U*>(out), n, shape);
  });
  CUDA_CHECK_LAUNCH();
}

void gather_axis(std::size_t elem_size, const void* x, const void* idx, DType index_type, void* y, int64_t outer,
                 int64_t dim, int64_t inner, int64_t count, cudaStream_t s) {
  const int64_t n = outer * count * inner;
  if (n <= 0) return;
  SLUICE_CHECK(dim > 0, "cuda gather: indexing an empty axis");
  dispatch_size(elem_size, [&](auto tag) {
    using U = decltype(tag);
    if (index_type == DType::I64)
      gather_axis_kernel<U, int64_t><<<grid_for(n), kThreads, 0, s>>>(static_cast<const U*>(x), static_cast<const int64_t*>(idx),
                                                                       static_cast<U*>(y), n, dim, inner, count);
    else if (index_type == DType::I32)
      gather_axis_kernel<U, int32_t><<<grid_for(n), kThreads, 0, s>>>(static_cast<const U*>(x), static_cast<const int32_t*>(idx),
                                                                       static_cast<U*>(y), n, dim, inner, count);
    else
      SLUICE_THROW("cuda gather: index type ", dtype_name(index_type), " is not supported");
  });
  CUDA_CHECK_LAUNCH();
}

void gather_nd(std::size_t elem_size, const void* x, const int64_t* idx, void* y, const IndexND& s, cudaStream_t st) {
  const int64_t n = s.rows * s.slice;
  if (n <= 0) return;
  dispatch_size(elem_size, [&](auto tag) {
    using U = decltype(tag);
    gather_nd_kernel<U><<<grid_for(n), kThreads, 0, st>>>(static_cast<const U*>(x), idx, static_cast<U*>(y), n, s);
  });
  CUDA_CHECK_LAUNCH();
}

void scatter_nd(std::size_t elem_size, const int64_t* idx, const void* updates, void* y, const IndexND& s, cudaStream_t st) {
  const int64_t n = s.rows * s.slice;
  if (n <= 0) return;
  dispatch_size(elem_size, [&](auto tag) {
    using U = decltype(tag);
    scatter_nd_kernel<U><<<grid_for(n), kThreads, 0, st>>>(idx, static_cast<const U*>(updates), static_cast<U*>(y), n, s);
  });
  CUDA_CHECK_LAUNCH();
}

void scatter_nd_reduce(DType t, ScatterReduction r, const int64_t* idx, const void* updates, void* y, const IndexND& s,
                       cudaStream_t st) {
  const int64_t n = s.rows * s.slice;
  if (n <= 0) return;
  const int op = static_cast<int>(r);
  auto launch = [&](auto tag) {
    using T = decltype(tag);
    scatter_nd_reduce_kernel<T><<<grid_for(n), kThreads, 0, st>>>(idx, static_cast<const T*>(updates), static_cast<T*>(y), n, s, op);
  };
  switch (t) {
    case DType::I64: launch(int64_t{}); break;
    case DType::I32: launch(int32_t{}); break;
    default: dispatch_float(t, launch);
  }
  CUDA_CHECK_LAUNCH();
}

void col2im(DType t, const void* x, void* y, const Col2ImShape& s, cudaStream_t st) {
  const int64_t total = s.n * s.c * s.h * s.w;
  if (total <= 0) return;
  dispatch_float(t, [&](auto tag) {
    using T = decltype(tag);
    col2im_kernel<T><<<grid_for(total), kThreads, 0, st>>>(static_cast<const T*>(x), static_cast<T*>(y), total, s);
  });
  CUDA_CHECK_LAUNCH();
}

void cumsum(DType t, const void* x, void* y, int64_t outer, int64_t r, int64_t inner, bool exclusive, bool reverse,
            cudaStream_t s) {
  const int64_t lines = outer * inner;
  if (lines <= 0 || r <= 0) return;
  switch (t) {
    case DType::I64:
      cumsum_int_kernel<int64_t><<<grid_for(lines), kThreads, 0, s>>>(static_cast<const int64_t*>(x), static_cast<int64_t*>(y),
                                                                       lines, r, inner, exclusive, reverse);
      break;
    case DType::I32:
      cumsum_int_kernel<int32_t><<<grid_for(lines), kThreads, 0, s>>>(static_cast<const int32_t*>(x), static_cast<int32_t*>(y),
                                                                       lines, r, inner, exclusive, reverse);
      break;
    default:
      dispatch_float(t, [&](auto tag) {
        using T = decltype(tag);
        cumsum_kernel<T, float><<<grid_for(lines), kThreads, 0, s>>>(static_cast<const T*>(x), static_cast<T*>(y), lines, r,
                                                                     inner, exclusive, reverse);
      });
  }
  CUDA_CHECK_LAUNCH();
}

void trilu(std::size_t elem_size, const void* x, void* y, int64_t batch, int64_t rows, int64_t cols, int64_t k, bool upper,
           cudaStream_t s) {
  const int64_t n = batch * rows * cols;
  if (n <= 0) return;
  dispatch_size(elem_size, [&](auto tag) {
    using U = decltype(tag);
    trilu_kernel<U><<<grid_for(n), kThreads, 0, s>>>(static_cast<const U*>(x), static_cast<U*>(y), n, rows, cols, k, upper);
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace sluice::cuda
