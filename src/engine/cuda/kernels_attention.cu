// The softmax step of sluice.Attention on the batched-GEMM path: scores (already scaled by the
// product's alpha, stored in the compute type) plus a bias matrix per `group` score matrices that
// repeats every `period` of those, softmax over each row with fp32 statistics, probabilities written over the scores in
// the type the second product reads.
#include <algorithm>
#include <cfloat>

#include "engine/cuda/kernels.h"
#include "engine/cuda/kernels_common.cuh"

namespace sluice::cuda {
namespace {

constexpr int kPerLane = 8;   // rows up to 256 keys stay in registers

// One warp per row.  Short rows (<= 32 * kPerLane) are read once into registers; longer ones are
// read three times (max, sum, write), from L1/L2 after the first.
template <typename T, typename B>
__global__ void attention_softmax_kernel(const T* x, const B* __restrict__ bias, T* y,
                                         int64_t rows, int64_t s, int64_t skv, int64_t period, int64_t group,
                                         bool one_row, bool zero_rows) {
  const int lane = threadIdx.x & 31;
  SLUICE_WARP_ROWS(row, rows) {
    const T* xr = x + row * skv;
    const B* br = nullptr;
    if (bias) {
      const int64_t m = row / s, i = row - m * s;
      br = bias + (one_row ? ((m / group) % period) : (((m / group) % period) * s + i)) * skv;
    }
    T* yr = y + row * skv;
    auto score = [&](int64_t j) { return to_f(xr[j]) + (br ? to_f(br[j]) : 0.f); };
    const bool cached = skv <= 32 * kPerLane;
    float v[kPerLane];
    float mx = -INFINITY;
    if (cached) {
#pragma unroll
      for (int k = 0; k < kPerLane; ++k) {
        const int64_t j = lane + 32 * k;
        v[k] = j < skv ? score(j) : -INFINITY;
        mx = fmaxf(mx, v[k]);
      }
    } else {
      for (int64_t j = lane; j < skv; j += 32) mx = fmaxf(mx, score(j));
    }
    mx = warp_max(mx);
    if (mx == -INFINITY) {   // every key masked
      const float fill = zero_rows ? 0.f : NAN;
      for (int64_t j = lane; j < skv; j += 32) yr[j] = from_f<T>(fill);
      continue;
    }
    float sum = 0.f;
    if (cached) {
#pragma unroll
      for (int k = 0; k < kPerLane; ++k) {
        v[k] = lane + 32 * k < skv ? expf(v[k] - mx) : 0.f;
        sum += v[k];
      }
    } else {
      for (int64_t j = lane; j < skv; j += 32) sum += expf(score(j) - mx);
    }
    const float inv = 1.f / warp_sum(sum);
    if (cached) {
#pragma unroll
      for (int k = 0; k < kPerLane; ++k) {
        const int64_t j = lane + 32 * k;
        if (j < skv) yr[j] = from_f<T>(v[k] * inv);
      }
    } else {
      for (int64_t j = lane; j < skv; j += 32) yr[j] = from_f<T>(expf(score(j) - mx) * inv);
    }
  }
}

}  // namespace

void attention_softmax(DType t, DType bias_type, const void* scores, const void* bias, void* probs, int64_t rows,
                       int64_t s, int64_t skv, int64_t period, int64_t group, int64_t bias_rows, bool zero_rows,
                       cudaStream_t st) {
  if (rows <= 0 || skv <= 0) return;
  dispatch_float(t, [&](auto tag) {
    using T = decltype(tag);
    auto launch = [&](auto btag) {
      using Bt = decltype(btag);
      attention_softmax_kernel<T, Bt><<<warp_grid(rows), kThreads, 0, st>>>(
          static_cast<const T*>(scores), static_cast<const Bt*>(bias), static_cast<T*>(probs), rows, s, skv,
          period > 0 ? period : 1, group > 0 ? group : 1, bias_rows == 1 && s != 1, zero_rows);
    };
    if (!bias) launch(float{});
    else dispatch_float(bias_type, launch);
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace sluice::cuda

// ---- sluice.Attention in one kernel for short sequences (window attention) -------------------
// One block per score matrix m = n * heads + h: q, k, v (up to SP rows of up to DP columns) are
// copied to shared memory (zero padded), the scores q k^T computed on tensor cores (WMMA 16x16x16,
// fp32 accumulators) into shared memory, each row scaled, given its bias row (matrix (m / group) mod period)
// and softmaxed in fp32 by one warp, the probabilities rounded to T over the scores, and p v
// accumulated in fp32 and written as T.  Warp w owns query rows 16w..16w+15 from the scores on, so
// only the loads need the whole block.
#include <mma.h>

namespace sluice::cuda {
namespace {

template <int SP, int DP>
struct WinLayout {
  static constexpr int kLdT = DP + 8;                       // q, k, v rows (T elements)
  // The softmax gives each row SP / 8 lanes (8 values each), 32 / (SP / 8) rows at a time: rows
  // padded by SP / 8 floats put those rows on disjoint banks.
  static constexpr int kLanesPerRow = SP / 8;
  static constexpr int kLdF = (SP > DP ? SP : DP) + kLanesPerRow;   // score / output rows (floats)
  static constexpr std::size_t kTile = static_cast<std::size_t>(SP) * kLdT;   // T elements
  static constexpr std::size_t bytes(std::size_t tsize) { return 3 * kTile * tsize + static_cast<std::size_t>(SP) * kLdF * 4; }
};

// rows x cols of src (element (r, c) at src[r * rs + c * cs]) into dst [SP][ld], zeros elsewhere.
template <typename T, int SP, int DP>
__device__ __forceinline__ void win_load(T* dst, const T* __restrict__ src, int64_t rs, int64_t cs, int rows, int cols,
                                         bool vec) {
  constexpr int ld = WinLayout<SP, DP>::kLdT;
  if (vec) {   // cs == 1, 16-byte aligned rows, cols a multiple of 8
    constexpr int chunks = DP / 8;
    for (int i = threadIdx.x; i < SP * chunks; i += blockDim.x) {
      const int r = i / chunks, c = (i - r * chunks) * 8;
      uint4 x = make_uint4(0, 0, 0, 0);
      if (r < rows && c < cols) x = __ldg(reinterpret_cast<const uint4*>(src + r * rs + c));
      *reinterpret_cast<uint4*>(dst + r * ld + c) = x;
    }
  } else {
    for (int i = threadIdx.x; i < SP * DP; i += blockDim.x) {
      const int r = i / DP, c = i - r * DP;
      dst[r * ld + c] = r < rows && c < cols ? src[r * rs + c * cs] : from_f<T>(0.f);
    }
  }
}

template <typename T, typename B, int SP, int DP>
__global__ void __launch_bounds__(SP * 2) window_attention_kernel(WindowAttentionArgs a) {
  using namespace nvcuda;
  using L = WinLayout<SP, DP>;
  extern __shared__ __align__(128) unsigned char smem[];
  T* sq = reinterpret_cast<T*>(smem);
  T* sk = sq + L::kTile;
  T* sv = sk + L::kTile;
  float* ss = reinterpret_cast<float*>(sv + L::kTile);

  const int64_t m = blockIdx.x;
  const int64_t n = m / a.heads, h = m - n * a.heads;
  const int s = a.s, skv = a.skv, d = a.d, dv = a.dv;
  const T* q = static_cast<const T*>(a.q) + n * a.sample[0] + h * a.head[0];
  const T* k = static_cast<const T*>(a.k) + n * a.sample[1] + h * a.head[1];
  const T* v = static_cast<const T*>(a.v) + n * a.sample[2] + h * a.head[2];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int r0 = warp * 16;
  // Softmax lanes: row r0 + it * kRows + g (it < kIter) is lane group g's, columns sub + kLpr * t.
  constexpr int kLpr = L::kLanesPerRow, kRows = 32 / kLpr, kIter = 16 / kRows;
  const int g = lane / kLpr, sub = lane - g * kLpr;
  // This warp's bias values, loaded first so that their latency hides behind the operands' (one
  // dependent load per row in the softmax loop would serialise the L2 round trips).
  float bb[kIter][8];
  {
    const B* bias = static_cast<const B*>(a.bias);
    const int64_t bm = a.period > 0 ? ((m / a.group) % a.period) : 0;
#pragma unroll
    for (int it = 0; it < kIter; ++it)
#pragma unroll
      for (int t = 0; t < 8; ++t) {
        const int r = r0 + it * kRows + g, j = sub + kLpr * t;
        const int64_t br = a.bias_rows == 1 ? bm : bm * s + r;
        bb[it][t] = bias && r < s && j < skv ? to_f(__ldg(bias + br * static_cast<int64_t>(skv) + j)) : 0.f;
      }
  }
  win_load<T, SP, DP>(sq, q, a.row[0], 1, s, d, a.vec[0]);
  if (a.kt) win_load<T, SP, DP>(sk, k, 1, a.row[1], skv, d, false);   // k given as [d, skv]
  else win_load<T, SP, DP>(sk, k, a.row[1], 1, skv, d, a.vec[1]);
  win_load<T, SP, DP>(sv, v, a.row[2], 1, skv, dv, a.vec[2]);
  __syncthreads();

  if (r0 >= s) return;   // no query rows here (the loads were the block's last shared work)
  float* srow = ss + r0 * L::kLdF;

  // scores = q k^T, rows r0..r0+15
  {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa[DP / 16];
    const int dt = (d + 15) / 16;
#pragma unroll
    for (int kk = 0; kk < DP / 16; ++kk)
      if (kk < dt) wmma::load_matrix_sync(fa[kk], sq + r0 * L::kLdT + kk * 16, L::kLdT);
    const int nt = (skv + 15) / 16;
    for (int j = 0; j < nt; ++j) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::fill_fragment(acc, 0.f);
#pragma unroll
      for (int kk = 0; kk < DP / 16; ++kk)
        if (kk < dt) {
          wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> fb;
          wmma::load_matrix_sync(fb, sk + j * 16 * L::kLdT + kk * 16, L::kLdT);
          wmma::mma_sync(acc, fa[kk], fb, acc);
        }
      wmma::store_matrix_sync(srow + j * 16, acc, L::kLdF, wmma::mem_row_major);
    }
  }
  __syncwarp();

  // softmax(scale * scores + bias) per row, p (type T) over the row's first bytes
#pragma unroll
  for (int it = 0; it < kIter; ++it) {
    const int rr = it * kRows + g, r = r0 + rr;
    float* row = srow + rr * L::kLdF;
    T* prow = reinterpret_cast<T*>(row);
    float x[8];
    float mx = -INFINITY;
#pragma unroll
    for (int t = 0; t < 8; ++t) {
      const int j = sub + kLpr * t;
      x[t] = -INFINITY;
      if (r < s && j < skv) x[t] = row[j] * a.scale + bb[it][t];
      mx = fmaxf(mx, x[t]);
    }
#pragma unroll
    for (int o = kLpr / 2; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(kFull, mx, o));
    float sum = 0.f;
#pragma unroll
    for (int t = 0; t < 8; ++t) {
      x[t] = mx == -INFINITY ? 0.f : __expf(x[t] - mx);
      sum += x[t];
    }
#pragma unroll
    for (int o = kLpr / 2; o > 0; o >>= 1) sum += __shfl_xor_sync(kFull, sum, o);
    float inv = 1.f / sum;
    if (mx == -INFINITY) inv = 0.f;
    const bool masked = r < s && mx == -INFINITY && !a.zero_rows;   // every key masked: NaN as Softmax
    __syncwarp();   // every lane has read its row before p overwrites it
#pragma unroll
    for (int t = 0; t < 8; ++t) {
      const int j = sub + kLpr * t;
      prow[j] = from_f<T>(masked && j < skv ? NAN : x[t] * inv);
    }
  }
  __syncwarp();

  // y = p v
  {
    constexpr int kLdP = 2 * L::kLdF;   // p rows in T elements
    const T* sp = reinterpret_cast<const T*>(srow);
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[DP / 16];
    const int ot = (dv + 15) / 16, kt = (skv + 15) / 16;
#pragma unroll
    for (int j = 0; j < DP / 16; ++j) wmma::fill_fragment(acc[j], 0.f);
    for (int kk = 0; kk < kt; ++kk) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
      wmma::load_matrix_sync(fa, sp + kk * 16, kLdP);
#pragma unroll
      for (int j = 0; j < DP / 16; ++j)
        if (j < ot) {
          wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> fb;
          wmma::load_matrix_sync(fb, sv + kk * 16 * L::kLdT + j * 16, L::kLdT);
          wmma::mma_sync(acc[j], fa, fb, acc[j]);
        }
    }
    __syncwarp();   // p is read; the output goes over it
#pragma unroll
    for (int j = 0; j < DP / 16; ++j)
      if (j < ot) wmma::store_matrix_sync(srow + j * 16, acc[j], L::kLdF, wmma::mem_row_major);
  }
  __syncwarp();
  T* y = static_cast<T*>(a.y) + n * a.sample[3] + h * a.head[3];
  const int rows = min(16, s - r0);
  if (a.vec[3]) {
    const int chunks = dv / 8;
    for (int i = lane; i < rows * chunks; i += 32) {
      const int rr = i / chunks, c = (i - rr * chunks) * 8;
      const float* src = srow + rr * L::kLdF + c;
      alignas(16) T out[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) out[e] = from_f<T>(src[e]);
      *reinterpret_cast<uint4*>(y + (r0 + rr) * a.row[3] + c) = *reinterpret_cast<const uint4*>(out);
    }
  } else {
    for (int i = lane; i < rows * dv; i += 32) {
      const int rr = i / dv, c = i - rr * dv;
      y[(r0 + rr) * a.row[3] + c] = from_f<T>(srow[rr * L::kLdF + c]);
    }
  }
}

template <typename T, typename B, int SP, int DP>
void launch_window(const WindowAttentionArgs& a, cudaStream_t st) {
  auto kern = window_attention_kernel<T, B, SP, DP>;
  const std::size_t smem = WinLayout<SP, DP>::bytes(sizeof(T));
  if (smem > 48 * 1024) CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  kern<<<static_cast<unsigned>(a.mats), SP * 2, smem, st>>>(a);
}

template <typename T, typename B, int SP>
void launch_window_dp(const WindowAttentionArgs& a, cudaStream_t st) {
  const int64_t dmax = std::max(a.d, a.dv);
  if (dmax <= 32) launch_window<T, B, SP, 32>(a, st);
  else if (dmax <= 64) launch_window<T, B, SP, 64>(a, st);
  else launch_window<T, B, SP, 128>(a, st);
}

}  // namespace

bool window_attention_fits(DType t, int64_t s, int64_t skv, int64_t d, int64_t dv) {
  return (t == DType::BF16 || t == DType::F16) && s > 0 && skv > 0 && s <= kWindowMaxTokens && skv <= kWindowMaxTokens &&
         d > 0 && dv > 0 && d <= 128 && dv <= 128;
}

void window_attention(DType t, DType bias_type, const WindowAttentionArgs& args, cudaStream_t st) {
  if (args.mats <= 0) return;
  if (!window_attention_fits(t, args.s, args.skv, args.d, args.dv) || args.mats > 0x7fffffff)
    SLUICE_THROW("window attention: ", dtype_name(t), " s ", args.s, " s_kv ", args.skv, " d ", args.d, " dv ", args.dv,
                 " is not a shape the kernel takes");
  WindowAttentionArgs a = args;
  if (a.group < 1) a.group = 1;
  // 16-byte vectors where an operand's rows allow them.
  auto vec_ok = [&](const void* p, int i, int64_t cols) {
    const int64_t e = 16 / static_cast<int64_t>(dtype_size(t));
    return aligned16(p) && cols % e == 0 && a.row[i] % e == 0 && a.sample[i] % e == 0 && a.head[i] % e == 0 && !(i == 1 && a.kt);
  };
  a.vec[0] = vec_ok(a.q, 0, a.d);
  a.vec[1] = vec_ok(a.k, 1, a.d);
  a.vec[2] = vec_ok(a.v, 2, a.dv);
  a.vec[3] = vec_ok(a.y, 3, a.dv);
  const int64_t smax = std::max(a.s, a.skv);
  auto go = [&](auto ttag) {
    using T = decltype(ttag);
    if (a.bias && bias_type != DType::F32 && bias_type != t)
      SLUICE_THROW("window attention: a ", dtype_name(bias_type), " bias (the kernel reads fp32 biases or its own type's)");
    if (a.bias && bias_type == t) {   // a bias computed in the compute type (a text encoder's mask)
      if (smax <= 64) launch_window_dp<T, T, 64>(a, st);
      else launch_window_dp<T, T, 128>(a, st);
    } else {
      if (smax <= 64) launch_window_dp<T, float, 64>(a, st);
      else launch_window_dp<T, float, 128>(a, st);
    }
  };
  if (t == DType::BF16) go(__nv_bfloat16{});
  else go(__half{});
  CUDA_CHECK_LAUNCH();
}

}  // namespace sluice::cuda
