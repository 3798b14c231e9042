// The residual stream's kernels: the mixed-type residual Add and LayerNormalization fused with it
// (kernels.h).  Each operand has its own element type: known at compile time in the common case,
// otherwise read through a per-pointer type code (the branch is uniform across the grid, so it
// costs no divergence).
//
// Three LayerNorm kernels, the first that takes the call runs:
// - vectorized (vec_norm_kernel): rows whose width is a multiple of 8 and whose pointers are
//   16-byte aligned move 8 elements per access (one 16-byte load of a 16-bit type, two of fp32);
//   a group of 1..32 lanes of a warp takes a row, sized to the width so each lane holds at most 4
//   (8 past 1,024 elements) such chunks in registers; the sum is written in fp32 or the output type;
// - the same kernel one element per access for the other widths up to 1,024 (any alignment);
// - the warp-per-row kernel of one-element loads (residual_norm_kernel), the only one with
//   SLUICE_CUDA_NORM_VEC=0: rows past what the others hold, operands repeating within a row, and
//   2^31 elements or more through type codes.
#include "engine/cuda/kernels.h"
#include "engine/cuda/kernels_common.cuh"

#include <algorithm>

namespace sluice::cuda {
namespace {

// Elements of a row each lane keeps in registers; longer rows are read again for each pass.
constexpr int kPerLane = 32;

enum Code : int { kF32 = 0, kF16 = 1, kBF16 = 2 };

Code code(DType t) {
  switch (t) {
    case DType::F32: return kF32;
    case DType::F16: return kF16;
    case DType::BF16: return kBF16;
    default: SLUICE_THROW("cuda residual kernel: element type ", dtype_name(t), " is not a float type");
  }
}

__device__ __forceinline__ float load(const void* p, int c, int64_t i) {
  if (c == kF32) return static_cast<const float*>(p)[i];
  if (c == kF16) return __half2float(static_cast<const __half*>(p)[i]);
  return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
}

__device__ __forceinline__ void store(void* p, int c, int64_t i, float v) {
  if (c == kF32) static_cast<float*>(p)[i] = v;
  else if (c == kF16) static_cast<__half*>(p)[i] = __float2half_rn(v);
  else static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v);
}

// Operand access.  The kernels below are written once over these and instantiated twice: with the
// element types as template parameters (Typed*), plain loads the compiler can issue all at once,
// for the common case; and with each pointer's type read from its code at run time (Coded*), for
// what the typed instantiations do not take.  A type switch and a 64-bit modulo in every access
// leave each lane's loads serialized: the fused LayerNorm read that way ran at 7 % of the copy
// rate on the H200 (ViT-S rows of 384).

// Element i of an operand of `count` elements repeating onto the output (count 0: as long as it).
template <typename T>
struct TypedRepeat {
  const T* p;
  uint32_t count;
  __device__ __forceinline__ float at(uint32_t i) const { return to_f(p[count ? i % count : i]); }
};
// Element i of an operand as long as the output.
template <typename T>
struct TypedIn {
  const T* p;
  __device__ __forceinline__ float at(int64_t i) const { return to_f(p[i]); }
};
template <typename T>
struct TypedOut {
  T* p;
  __device__ __forceinline__ void put(int64_t i, float v) const { p[i] = from_f<T>(v); }
};
struct CodedIn {
  const void* p;
  int c;
  int64_t count;   // 0: as long as the output
  __device__ __forceinline__ float at(int64_t i) const { return load(p, c, count == 0 ? i : i % count); }
};
struct CodedOut {
  void* p;
  int c;
  __device__ __forceinline__ void put(int64_t i, float v) const { store(p, c, i, v); }
};

// I: the index type (32-bit where the output has fewer than 2^31 elements).
template <typename I, typename InA, typename InB, typename Out>
__global__ void residual_add_kernel(InA a, InB b, Out y, I n, bool multiply) {
  for (I i = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += static_cast<I>(gridDim.x) * blockDim.x) {
    const float x = a.at(i), z = b.at(i);
    y.put(i, multiply ? x * z : x + z);
  }
}

// J: the column index type.
template <typename J, typename InA, typename InB, typename OutSum, typename OutY>
struct NormArgs {
  InA a;
  InB b;
  bool add;
  OutSum sum;   // p null: not written
  OutY y;
  CodedOut mean, inv;
  int64_t rows;
  J cols;
  float eps;
  const float* gamma;
  const float* beta;
};

// One warp per row.  The row's values stay in registers when it is at most 32 * kPerLane long
// (always with kInRegisters, which the launch guarantees); longer rows are read again for each
// pass.  The variance is the mean of squared deviations from the mean (two passes, accurate for
// large means).
template <bool kInRegisters, typename J, typename InA, typename InB, typename OutSum, typename OutY>
__global__ void residual_norm_kernel(NormArgs<J, InA, InB, OutSum, OutY> r) {
  const int lane = threadIdx.x & 31;
  const bool cached = kInRegisters || r.cols <= 32 * kPerLane;
  SLUICE_WARP_ROWS(row, r.rows) {
    const int64_t base = row * r.cols;
    auto value = [&](J j) { return r.add ? r.a.at(base + j) + r.b.at(base + j) : r.a.at(base + j); };
    float v[kPerLane];
    float sum = 0.f;
    if (cached) {
#pragma unroll
      for (int k = 0; k < kPerLane; ++k) {
        const J j = lane + 32 * k;
        v[k] = j < r.cols ? r.a.at(base + j) : 0.f;
      }
      if (r.add) {
#pragma unroll
        for (int k = 0; k < kPerLane; ++k) {
          const J j = lane + 32 * k;
          if (j < r.cols) v[k] += r.b.at(base + j);
        }
      }
#pragma unroll
      for (int k = 0; k < kPerLane; ++k) sum += v[k];
    } else {
      for (J j = lane; j < r.cols; j += 32) sum += value(j);
    }
    const float mean = warp_sum(sum) / static_cast<float>(r.cols);
    float sq = 0.f;
    if (cached) {
#pragma unroll
      for (int k = 0; k < kPerLane; ++k) {
        const J j = lane + 32 * k;
        const float d = j < r.cols ? v[k] - mean : 0.f;
        sq += d * d;
      }
    } else {
      for (J j = lane; j < r.cols; j += 32) {
        const float d = value(j) - mean;
        sq += d * d;
      }
    }
    const float inv = rsqrtf(warp_sum(sq) / static_cast<float>(r.cols) + r.eps);
    auto emit = [&](J j, float x) {
      if (r.sum.p) r.sum.put(base + j, x);
      float o = (x - mean) * inv;
      if (r.gamma) o *= r.gamma[j];
      if (r.beta) o += r.beta[j];
      r.y.put(base + j, o);
    };
    if (cached) {
#pragma unroll
      for (int k = 0; k < kPerLane; ++k) {
        const J j = lane + 32 * k;
        if (j < r.cols) emit(j, v[k]);
      }
    } else {
      for (J j = lane; j < r.cols; j += 32) emit(j, value(j));
    }
    if (lane == 0) {
      if (r.mean.p) r.mean.put(row, mean);
      if (r.inv.p) r.inv.put(row, inv);
    }
  }
}

CodedIn coded(const ResidualOperand& o, int64_t n) { return CodedIn{o.p, code(o.t), o.count >= n ? 0 : o.count}; }

// ---- vectorized ------------------------------------------------------------------------------------

// V consecutive elements of T at p (p aligned to V elements, or to 16 bytes when V * sizeof(T) > 16),
// converted to float: accesses of at most 16 bytes.
template <typename T, int V>
__device__ __forceinline__ void load_v(const T* p, float (&v)[V]) {
  constexpr int kPer = V * static_cast<int>(sizeof(T)) > 16 ? 16 / static_cast<int>(sizeof(T)) : V;
#pragma unroll
  for (int u = 0; u < V / kPer; ++u) {
    const Pack<T, kPer> x = reinterpret_cast<const Pack<T, kPer>*>(p)[u];
#pragma unroll
    for (int k = 0; k < kPer; ++k) v[u * kPer + k] = to_f(x.v[k]);
  }
}
template <typename T, int V>
__device__ __forceinline__ void store_v(T* p, const float (&v)[V]) {
  constexpr int kPer = V * static_cast<int>(sizeof(T)) > 16 ? 16 / static_cast<int>(sizeof(T)) : V;
#pragma unroll
  for (int u = 0; u < V / kPer; ++u) {
    Pack<T, kPer> x;
#pragma unroll
    for (int k = 0; k < kPer; ++k) x.v[k] = from_f<T>(v[u * kPer + k]);
    reinterpret_cast<Pack<T, kPer>*>(p)[u] = x;
  }
}

constexpr int kNormThreads = 128;

enum SumOut : int { kNoSum = 0, kSumF32 = 1, kSumLikeY = 2 };

template <typename A, typename B, typename Y>
struct VecNormArgs {
  const A* a;
  const B* b;                 // null: no add
  int64_t a_rows, b_rows;     // rows each operand holds, repeated over the output's (a position embedding)
  void* sum;                  // written when sum_out != kNoSum
  int sum_out;
  Y* y;
  CodedOut mean, inv;
  int64_t rows;
  int cols;
  int group_shift;            // log2 of the lanes that share a row
  float eps;
  const float* gamma;
  const float* beta;
};

// Sum over the aligned group of `lanes` lanes (a power of two up to 32) this lane belongs to; every
// lane of the warp takes part.
__device__ __forceinline__ float group_sum(float v, int lanes) {
  for (int o = lanes >> 1; o > 0; o >>= 1) v += __shfl_xor_sync(kFull, v, o);
  return v;
}

// A row per group of 2^group_shift lanes: lane `sub` of the group holds chunks sub, sub + lanes,
// ... (V elements each, at most C of them), so the group's accesses to one chunk index are
// contiguous.  Mean, then the mean of squared deviations, both from the registers.
template <int V, int C, typename A, typename B, typename Y>
__global__ void __launch_bounds__(kNormThreads) vec_norm_kernel(VecNormArgs<A, B, Y> r) {
  const int lanes = 1 << r.group_shift;
  const int sub = static_cast<int>(threadIdx.x) & (lanes - 1);
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (kNormThreads >> r.group_shift) + (threadIdx.x >> r.group_shift);
  const bool live = row < r.rows;
  const int chunks = r.cols / V;
  const int64_t base = row * r.cols;
  const int64_t base_a = (row < r.a_rows ? row : row % r.a_rows) * r.cols;
  const int64_t base_b = (row < r.b_rows ? row : row % r.b_rows) * r.cols;
  float v[C][V];
  float sum = 0.f;
#pragma unroll
  for (int c = 0; c < C; ++c) {
    const int k = c * lanes + sub;
    if (live && k < chunks) {
      load_v<A, V>(r.a + base_a + k * V, v[c]);
      if (r.b) {
        float w[V];
        load_v<B, V>(r.b + base_b + k * V, w);
#pragma unroll
        for (int i = 0; i < V; ++i) v[c][i] += w[i];
      }
#pragma unroll
      for (int i = 0; i < V; ++i) sum += v[c][i];
    } else {
#pragma unroll
      for (int i = 0; i < V; ++i) v[c][i] = 0.f;
    }
  }
  const float mean = group_sum(sum, lanes) / static_cast<float>(r.cols);
  float sq = 0.f;
#pragma unroll
  for (int c = 0; c < C; ++c) {
    const int k = c * lanes + sub;
    if (live && k < chunks) {
#pragma unroll
      for (int i = 0; i < V; ++i) {
        const float d = v[c][i] - mean;
        sq += d * d;
      }
    }
  }
  const float inv = rsqrtf(group_sum(sq, lanes) / static_cast<float>(r.cols) + r.eps);
#pragma unroll
  for (int c = 0; c < C; ++c) {
    const int k = c * lanes + sub;
    if (!live || k >= chunks) continue;
    const int64_t at = base + k * V;
    if (r.sum_out == kSumF32) store_v<float, V>(static_cast<float*>(r.sum) + at, v[c]);
    else if (r.sum_out == kSumLikeY) store_v<Y, V>(static_cast<Y*>(r.sum) + at, v[c]);
    float o[V], g[V], be[V];
#pragma unroll
    for (int i = 0; i < V; ++i) o[i] = (v[c][i] - mean) * inv;
    if (r.gamma) {
      load_v<float, V>(r.gamma + k * V, g);
#pragma unroll
      for (int i = 0; i < V; ++i) o[i] *= g[i];
    }
    if (r.beta) {
      load_v<float, V>(r.beta + k * V, be);
#pragma unroll
      for (int i = 0; i < V; ++i) o[i] += be[i];
    }
    store_v<Y, V>(r.y + at, o);
  }
  if (live && sub == 0) {
    if (r.mean.p) r.mean.put(row, mean);
    if (r.inv.p) r.inv.put(row, inv);
  }
}

int floor_log2(int64_t v) {
  int s = 0;
  while ((int64_t{2} << s) <= v) ++s;
  return s;
}

// The lanes per row (as a shift) for rows of `chunks` chunks with at most `cap` chunks a lane:
// at least 4 lanes where the row has that many chunks (so a group's access to one chunk index spans
// 64 bytes or more), more until the chunks fit; -1 when 32 lanes do not hold the row.
int group_shift_for(int64_t chunks, int cap, int min_lanes_log2) {
  int shift = std::min(min_lanes_log2, floor_log2(chunks));
  while (shift < 5 && (chunks + (int64_t{1} << shift) - 1) >> shift > cap) ++shift;
  return (chunks + (int64_t{1} << shift) - 1) >> shift > cap ? -1 : shift;
}

// Rows an operand holds when it repeats whole rows onto the output's `rows` (its count a multiple
// of cols); 0 when it repeats within a row.
int64_t operand_rows(const ResidualOperand& o, int64_t rows, int64_t cols) {
  if (o.count >= rows * cols) return rows;
  return o.count % cols == 0 ? o.count / cols : 0;
}

// Launches the vectorized kernel when it takes the call (see the top of the file).
bool try_vec_norm(const ResidualNorm& r, cudaStream_t s) {
  const bool add = r.b.p != nullptr;
  const int64_t a_rows = operand_rows(r.a, r.rows, r.cols), b_rows = add ? operand_rows(r.b, r.rows, r.cols) : r.rows;
  if (a_rows == 0 || b_rows == 0 || r.cols > 2048) return false;
  int sum_out = kNoSum;
  if (r.sum) {
    if (r.tsum == DType::F32) sum_out = kSumF32;
    else if (r.tsum == r.ty) sum_out = kSumLikeY;
    else return false;
  }
  // 8 elements an access: every pointer 16-byte aligned, rows a multiple of 8 (so every row is too).
  const bool wide = r.cols % 8 == 0 && aligned16(r.a.p) && (!add || aligned16(r.b.p)) && (!r.sum || aligned16(r.sum)) &&
                    aligned16(r.y) && (!r.gamma || aligned16(r.gamma)) && (!r.beta || aligned16(r.beta));
  int v = 0, cap = 0, shift = -1;
  if (wide) {
    v = 8;
    cap = 4;
    shift = group_shift_for(r.cols / 8, 4, 2);
    if (shift < 0) {
      cap = 8;
      shift = group_shift_for(r.cols / 8, 8, 2);
    }
  }
  if (shift < 0 && r.cols <= 1024) {
    // One element an access: the operands' own alignment is all it needs.
    v = 1;
    cap = 32;
    shift = group_shift_for(r.cols, 32, 5);
  }
  if (shift < 0) return false;
  const int64_t rows_per_block = kNormThreads >> shift;
  const int64_t blocks = (r.rows + rows_per_block - 1) / rows_per_block;
  if (blocks >= (int64_t{1} << 31)) return false;
  const CodedOut mean{r.mean, code(r.tstat)}, inv{r.inv, code(r.tstat)};
  dispatch_float(r.a.t, [&](auto ta) {
    dispatch_float(add ? r.b.t : r.a.t, [&](auto tb) {
      dispatch_float(r.ty, [&](auto tyv) {
        using A = decltype(ta);
        using B = decltype(tb);
        using Y = decltype(tyv);
        VecNormArgs<A, B, Y> k{static_cast<const A*>(r.a.p), static_cast<const B*>(add ? r.b.p : nullptr), a_rows, b_rows,
                               r.sum, sum_out, static_cast<Y*>(r.y), mean, inv, r.rows, static_cast<int>(r.cols), shift,
                               r.eps, r.gamma, r.beta};
        const unsigned grid = static_cast<unsigned>(blocks);
        if (v == 8 && cap == 4) vec_norm_kernel<8, 4><<<grid, kNormThreads, 0, s>>>(k);
        else if (v == 8) vec_norm_kernel<8, 8><<<grid, kNormThreads, 0, s>>>(k);
        else vec_norm_kernel<1, 32><<<grid, kNormThreads, 0, s>>>(k);
      });
    });
  });
  return true;
}

// The residual Add with 8 elements an access: n, and each repeating operand's count, multiples of 8.
template <typename A, typename B, typename Y>
__global__ void residual_add_vec_kernel(const A* a, FastDiv ca, bool rep_a, const B* b, FastDiv cb, bool rep_b, Y* y,
                                        uint32_t packs, bool multiply) {
  constexpr int V = 8;
  for (uint32_t p = blockIdx.x * blockDim.x + threadIdx.x; p < packs; p += gridDim.x * blockDim.x) {
    const uint32_t i = p * V;
    uint32_t ia = i, ib = i;
    if (rep_a) ca.divmod(i, &ia);
    if (rep_b) cb.divmod(i, &ib);
    float x[V], z[V];
    load_v<A, V>(a + ia, x);
    load_v<B, V>(b + ib, z);
#pragma unroll
    for (int k = 0; k < V; ++k) x[k] = multiply ? x[k] * z[k] : x[k] + z[k];
    store_v<Y, V>(y + i, x);
  }
}

}  // namespace

void residual_add(const ResidualOperand& a, const ResidualOperand& b, void* y, DType ty, int64_t n, cudaStream_t s,
                  bool multiply, bool vectorized) {
  if (n <= 0) return;
  SLUICE_CHECK(a.count > 0 && b.count > 0 && n % a.count == 0 && n % b.count == 0,
               "cuda residual_add: operands of ", a.count, " and ", b.count, " elements do not repeat onto ", n);
  if (vectorized && fits_int32(n) && n % 8 == 0 && a.count % 8 == 0 && b.count % 8 == 0 && aligned16(a.p) &&
      aligned16(b.p) && aligned16(y)) {
    const bool rep_a = a.count < n, rep_b = b.count < n;
    const FastDiv ca(rep_a ? a.count : 1), cb(rep_b ? b.count : 1);
    const uint32_t packs = static_cast<uint32_t>(n / 8);
    dispatch_float(a.t, [&](auto ta) {
      dispatch_float(b.t, [&](auto tb) {
        dispatch_float(ty, [&](auto tyv) {
          using A = decltype(ta);
          using B = decltype(tb);
          using Y = decltype(tyv);
          residual_add_vec_kernel<<<waves_grid(packs), kThreads, 0, s>>>(static_cast<const A*>(a.p), ca, rep_a,
                                                                         static_cast<const B*>(b.p), cb, rep_b,
                                                                         static_cast<Y*>(y), packs, multiply);
        });
      });
    });
  } else if (fits_int32(n)) {
    const uint32_t ca = a.count >= n ? 0 : static_cast<uint32_t>(a.count), cb = b.count >= n ? 0 : static_cast<uint32_t>(b.count);
    dispatch_float(a.t, [&](auto ta) {
      dispatch_float(b.t, [&](auto tb) {
        dispatch_float(ty, [&](auto tyv) {
          using A = decltype(ta);
          using B = decltype(tb);
          using Y = decltype(tyv);
          residual_add_kernel<<<grid_for(n), kThreads, 0, s>>>(TypedRepeat<A>{static_cast<const A*>(a.p), ca},
                                                               TypedRepeat<B>{static_cast<const B*>(b.p), cb},
                                                               TypedOut<Y>{static_cast<Y*>(y)}, static_cast<uint32_t>(n), multiply);
        });
      });
    });
  } else {
    residual_add_kernel<<<grid_for(n), kThreads, 0, s>>>(coded(a, n), coded(b, n), CodedOut{y, code(ty)}, n, multiply);
  }
  CUDA_CHECK_LAUNCH();
}

void residual_norm(const ResidualNorm& r, cudaStream_t s) {
  if (r.rows <= 0 || r.cols <= 0) return;
  const int64_t n = r.rows * r.cols;
  const bool add = r.b.p != nullptr;
  SLUICE_CHECK(r.a.count > 0 && n % r.a.count == 0 && (!add || (r.b.count > 0 && n % r.b.count == 0)),
               "cuda residual_norm: operands of ", r.a.count, " and ", r.b.count, " elements do not repeat onto ", n);
  if (r.vectorized && try_vec_norm(r, s)) {
    CUDA_CHECK_LAUNCH();
    return;
  }
  const CodedOut mean{r.mean, code(r.tstat)}, inv{r.inv, code(r.tstat)};
  const unsigned grid = warp_grid(r.rows);
  // Typed: operands that do not repeat, rows held in registers, an fp32 sum (or none).
  const bool typed = r.cols <= 32 * kPerLane && r.a.count >= n && (!add || r.b.count >= n) &&
                     (!r.sum || r.tsum == DType::F32);
  if (typed) {
    dispatch_float(r.a.t, [&](auto ta) {
      dispatch_float(add ? r.b.t : r.a.t, [&](auto tb) {
        dispatch_float(r.ty, [&](auto tyv) {
          using A = decltype(ta);
          using B = decltype(tb);
          using Y = decltype(tyv);
          NormArgs<int, TypedIn<A>, TypedIn<B>, TypedOut<float>, TypedOut<Y>> k{
              {static_cast<const A*>(r.a.p)}, {static_cast<const B*>(add ? r.b.p : nullptr)}, add,
              {static_cast<float*>(r.sum)}, {static_cast<Y*>(r.y)}, mean, inv, r.rows, static_cast<int>(r.cols), r.eps,
              r.gamma, r.beta};
          residual_norm_kernel<true><<<grid, kThreads, 0, s>>>(k);
        });
      });
    });
  } else {
    NormArgs<int64_t, CodedIn, CodedIn, CodedOut, CodedOut> k{
        coded(r.a, n), add ? coded(r.b, n) : CodedIn{nullptr, kF32, 0}, add, {r.sum, code(r.tsum)}, {r.y, code(r.ty)},
        mean, inv, r.rows, r.cols, r.eps, r.gamma, r.beta};
    residual_norm_kernel<false><<<grid, kThreads, 0, s>>>(k);
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace sluice::cuda
