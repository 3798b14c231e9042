// Depthwise 2-D convolution of channels-last tensors (MobileNet, EfficientNet): each channel is
// convolved with its own kh x kw filter, then bias, residual and activation are applied in the same
// pass.  cuDNN runs grouped convolutions only in NCHW here, which cost a transpose on each side of
// every depthwise layer; this kernel reads and writes the channels-last tensors directly.  It is
// memory-bound (kh*kw multiply-adds per output element): K channels of one output pixel per thread,
// each tap one 16-byte load of the input and one of the [kh, kw, C] filter, both L1/L2 resident.
// Stride-1 layers 3, 5 or 7 wide take the shared-memory tile kernel (depthwise_tile_kernel) below.
#include <algorithm>
#include <cstdlib>
#include <string>
#include <type_traits>

#include "engine/cuda/kernels.h"
#include "engine/cuda/kernels_depthwise.h"
#include "engine/cuda/kernels_act.cuh"
#include "engine/cuda/kernels_common.cuh"

namespace sluice::cuda {
namespace {

struct Depthwise32 {
  FastDiv ow, oh, cp;
  uint32_t h = 0, w = 0, c = 0;
  int kh = 1, kw = 1, sh = 1, sw = 1, dh = 1, dw = 1, ph = 0, pw = 0;
};

template <typename T, int K>
__global__ void depthwise_kernel(const T* __restrict__ x, const T* __restrict__ wt, const T* __restrict__ bias,
                                 const T* z, T* y, uint32_t total, Depthwise32 s, ActParams act) {
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
    uint32_t cp, ox, oy;
    const uint32_t n = s.oh.divmod(s.ow.divmod(s.cp.divmod(i, &cp), &ox), &oy);
    const uint32_t c0 = cp * K;
    const T* xb = x + static_cast<size_t>(n) * s.h * s.w * s.c + c0;
    float acc[K];
#pragma unroll
    for (int k = 0; k < K; ++k) acc[k] = bias ? to_f(bias[c0 + k]) : 0.f;
    const int y0 = static_cast<int>(oy) * s.sh - s.ph, x0 = static_cast<int>(ox) * s.sw - s.pw;
    for (int ky = 0; ky < s.kh; ++ky) {
      const int iy = y0 + ky * s.dh;
      if (iy < 0 || iy >= static_cast<int>(s.h)) continue;
      for (int kx = 0; kx < s.kw; ++kx) {
        const int ix = x0 + kx * s.dw;
        if (ix < 0 || ix >= static_cast<int>(s.w)) continue;
        const Pack<T, K> xv = *reinterpret_cast<const Pack<T, K>*>(xb + (static_cast<size_t>(iy) * s.w + ix) * s.c);
        const Pack<T, K> wv = *reinterpret_cast<const Pack<T, K>*>(wt + static_cast<size_t>(ky * s.kw + kx) * s.c + c0);
#pragma unroll
        for (int k = 0; k < K; ++k) acc[k] = fmaf(to_f(xv.v[k]), to_f(wv.v[k]), acc[k]);
      }
    }
    Pack<T, K> out;
    if (z) out = reinterpret_cast<const Pack<T, K>*>(z)[i];
#pragma unroll
    for (int k = 0; k < K; ++k) out.v[k] = from_f<T>(apply_act(z ? acc[k] + to_f(out.v[k]) : acc[k], act));
    reinterpret_cast<Pack<T, K>*>(y)[i] = out;
  }
}

// Stride 1, no dilation, kw = KW: each thread takes R neighbouring output pixels of one row (K
// channels each).  A filter row's R + KW - 1 input pixels are loaded once and serve R * KW taps,
// and each weight pack serves R pixels: (R + KW - 1) / R input and KW / R weight loads per pixel and
// filter row, where the kernel above makes KW of each (7x7, R = 4: 30 loads for 98).  ConvNeXt's
// 7x7 layers were held by those L1 loads, not by DRAM.
template <typename T, int K, int KW, int R>
__global__ void depthwise_rows_kernel(const T* __restrict__ x, const T* __restrict__ wt, const T* __restrict__ bias,
                                      const T* z, T* y, uint32_t total, Depthwise32 s, FastDiv blocks, ActParams act) {
  constexpr int kIn = R + KW - 1;
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
    uint32_t cp, bx, oy;
    const uint32_t n = s.oh.divmod(blocks.divmod(s.cp.divmod(i, &cp), &bx), &oy);
    const uint32_t c0 = cp * K;
    const int ox0 = static_cast<int>(bx) * R;
    const int x0 = ox0 - s.pw;
    const T* xb = x + static_cast<size_t>(n) * s.h * s.w * s.c + c0;
    float acc[R][K];
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const float b0 = bias ? to_f(bias[c0 + k]) : 0.f;
#pragma unroll
      for (int r = 0; r < R; ++r) acc[r][k] = b0;
    }
    for (int ky = 0; ky < s.kh; ++ky) {
      const int iy = static_cast<int>(oy) - s.ph + ky;
      if (iy < 0 || iy >= static_cast<int>(s.h)) continue;
      const T* row = xb + static_cast<size_t>(iy) * s.w * s.c;
      float wf[KW][K];
#pragma unroll
      for (int kx = 0; kx < KW; ++kx) {
        const Pack<T, K> wv = *reinterpret_cast<const Pack<T, K>*>(wt + static_cast<size_t>(ky * KW + kx) * s.c + c0);
#pragma unroll
        for (int k = 0; k < K; ++k) wf[kx][k] = to_f(wv.v[k]);
      }
      // Input pixel j of the row serves output r through tap j - r.
#pragma unroll
      for (int j = 0; j < kIn; ++j) {
        const int ix = x0 + j;
        if (ix < 0 || ix >= static_cast<int>(s.w)) continue;
        const Pack<T, K> xv = *reinterpret_cast<const Pack<T, K>*>(row + static_cast<size_t>(ix) * s.c);
        float xf[K];
#pragma unroll
        for (int k = 0; k < K; ++k) xf[k] = to_f(xv.v[k]);
#pragma unroll
        for (int r = 0; r < R; ++r) {
          if (j - r < 0 || j - r >= KW) continue;
#pragma unroll
          for (int k = 0; k < K; ++k) acc[r][k] = fmaf(xf[k], wf[j - r][k], acc[r][k]);
        }
      }
    }
    const size_t pixel0 = (static_cast<size_t>(n) * s.oh.d + oy) * s.ow.d + static_cast<uint32_t>(ox0);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (ox0 + r >= static_cast<int>(s.ow.d)) break;
      const size_t at = ((pixel0 + r) * s.c + c0) / K;
      Pack<T, K> out;
      if (z) out = reinterpret_cast<const Pack<T, K>*>(z)[at];
#pragma unroll
      for (int k = 0; k < K; ++k) out.v[k] = from_f<T>(apply_act(z ? acc[r][k] + to_f(out.v[k]) : acc[r][k], act));
      reinterpret_cast<Pack<T, K>*>(y)[at] = out;
    }
  }
}


// ---- the shared-memory tile kernel ------------------------------------------------------------
// Stride 1, no dilation, kw = KW in {3, 5, 7}, C a multiple of the 16-byte pack.  A block computes
// an output tile of th rows x ts strips of kTileR pixels x kTileC channels of one image.  It first
// stages the tile's input (th + kh - 1 rows of ts * kTileR + KW - 1 pixels, zeros in the padding and
// past the last channel) by 16-byte loads into shared memory, and the tile's kh x KW x kTileC
// weights as fp32; then each thread computes one strip of kTileR neighbouring output pixels for
// kTileK channels: per filter row it reads KW weight packs and kTileR + KW - 1 input packs from
// shared memory and makes KW * kTileR * kTileK fp32 multiply-adds (7x7: 20 reads for 196 FMAs).
// The input is staged by cp.async (no register round trip, every copy of the block in flight at
// once), and three blocks of 256 threads fit an SM (80 registers), so one block computes while
// another stages.
// The row kernel read the same pixels from L1/L2 for every filter row of every output row (30
// 16-byte loads per output pack, 7x7), which left it stalled on its loads at 9 % of the copy rate.
constexpr int kTileC = 32;   // channels of a block
constexpr int kTileK = 4;    // channels of a thread (8 bytes of bf16/fp16, 16 of fp32 in shared memory)
constexpr int kTileR = 7;    // output pixels of a thread, along W (7 divides 7, 14, 28, 56, 112)
constexpr int kTileLanes = kTileC / kTileK;   // threads side by side over a block's channels
constexpr int kTileMaxThreads = 256;
constexpr std::size_t kTileMaxSmem = 48 * 1024;   // no opt-in attribute needed

struct DepthwiseTile {
  int n = 0, h = 0, w = 0, c = 0, oh = 0, ow = 0, kh = 1, ph = 0, pw = 0;
  int th = 1, ts = 1;                 // output rows and strips of a block
  int tiles_h = 1, tiles_w = 1, cblocks = 1;
  int in_h = 1, in_w = 1;             // the staged input tile, in pixels
};

// A 16-byte copy from global to shared memory that does not pass through registers (Ampere's
// cp.async): a block's staging loads are all in flight at once.  src_bytes 0 writes 16 zero bytes.
__device__ __forceinline__ void copy16_async(void* dst, const void* src, bool valid) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(valid ? 16 : 0) : "memory");
}
__device__ __forceinline__ void copy_async_wait() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

// Three blocks of 256 threads an SM: at most 80 registers a thread.
template <typename T, int KW>
__global__ void __launch_bounds__(kTileMaxThreads, 3)
depthwise_tile_kernel(const T* __restrict__ x, const T* __restrict__ wt, const T* __restrict__ bias, const T* z, T* y,
                      DepthwiseTile p, ActParams act) {
  extern __shared__ __align__(16) unsigned char dw_smem[];
  constexpr int R = kTileR, K = kTileK;
  float* ws = reinterpret_cast<float*>(dw_smem);                                   // [kh * KW][kTileC]
  T* xs = reinterpret_cast<T*>(dw_smem + sizeof(float) * p.kh * KW * kTileC);     // [in_h][in_w][kTileC]
  uint32_t b = blockIdx.x;
  const int cb = static_cast<int>(b % p.cblocks);
  b /= p.cblocks;
  const int tx_ = static_cast<int>(b % p.tiles_w);
  b /= p.tiles_w;
  const int ty_ = static_cast<int>(b % p.tiles_h);
  const int n = static_cast<int>(b / p.tiles_h);
  const int c0 = cb * kTileC;
  const int oy0 = ty_ * p.th, ox0 = tx_ * p.ts * R;
  const int iy0 = oy0 - p.ph, ix0 = ox0 - p.pw;

  constexpr int V = 16 / sizeof(T);     // elements of a 16-byte chunk
  constexpr int CPP = kTileC / V;       // chunks of a staged pixel
  const T* xn = x + static_cast<size_t>(n) * p.h * p.w * p.c;
  const int chunks = p.in_h * p.in_w * CPP;
  for (int i = threadIdx.x; i < chunks; i += blockDim.x) {
    const int q = i % CPP, px = i / CPP;
    const int ty = px / p.in_w, tx = px - ty * p.in_w;
    const int iy = iy0 + ty, ix = ix0 + tx, ch = c0 + q * V;
    const bool in = iy >= 0 && iy < p.h && ix >= 0 && ix < p.w && ch < p.c;
    copy16_async(xs + static_cast<size_t>(i) * V, in ? xn + (static_cast<size_t>(iy) * p.w + ix) * p.c + ch : x, in);
  }
  // The weights while the copies fly, four loads issued before their conversions.
  const int wn = p.kh * KW * kTileC;
  for (int i0 = threadIdx.x; i0 < wn; i0 += 4 * blockDim.x) {
    T v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const int i = i0 + u * static_cast<int>(blockDim.x), ch = c0 + i % kTileC;
      v[u] = i < wn && ch < p.c ? wt[static_cast<size_t>(i / kTileC) * p.c + ch] : from_f<T>(0.f);
    }
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const int i = i0 + u * static_cast<int>(blockDim.x);
      if (i < wn) ws[i] = to_f(v[u]);
    }
  }
  copy_async_wait();
  __syncthreads();

  const int lane = static_cast<int>(threadIdx.x) % kTileLanes, rest = static_cast<int>(threadIdx.x) / kTileLanes;
  const int s = rest % p.ts, r = rest / p.ts;
  const int cc = lane * K, ch0 = c0 + cc;
  const int oy = oy0 + r, ox = ox0 + s * R;
  if (r >= p.th || oy >= p.oh || ox >= p.ow || ch0 >= p.c) return;
  float acc[R][K];
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const float b0 = bias ? to_f(bias[ch0 + k]) : 0.f;
#pragma unroll
    for (int rr = 0; rr < R; ++rr) acc[rr][k] = b0;
  }
#pragma unroll 1
  for (int ky = 0; ky < p.kh; ++ky) {
    float wf[KW][K];
#pragma unroll
    for (int kx = 0; kx < KW; ++kx) {
      const float4 w4 = *reinterpret_cast<const float4*>(ws + (ky * KW + kx) * kTileC + cc);
      wf[kx][0] = w4.x;
      wf[kx][1] = w4.y;
      wf[kx][2] = w4.z;
      wf[kx][3] = w4.w;
    }
    const T* row = xs + (static_cast<size_t>(r + ky) * p.in_w + s * R) * kTileC + cc;
    // Input pixel j of the strip's row serves output rr through tap j - rr.
#pragma unroll
    for (int j = 0; j < R + KW - 1; ++j) {
      const Pack<T, K> xv = *reinterpret_cast<const Pack<T, K>*>(row + j * kTileC);
      float xf[K];
#pragma unroll
      for (int k = 0; k < K; ++k) xf[k] = to_f(xv.v[k]);
#pragma unroll
      for (int rr = 0; rr < R; ++rr) {
        if (j - rr < 0 || j - rr >= KW) continue;
#pragma unroll
        for (int k = 0; k < K; ++k) acc[rr][k] = fmaf(xf[k], wf[j - rr][k], acc[rr][k]);
      }
    }
  }
  const size_t at0 = ((static_cast<size_t>(n) * p.oh + oy) * p.ow + ox) * p.c + ch0;
#pragma unroll
  for (int rr = 0; rr < R; ++rr) {
    if (ox + rr >= p.ow) break;
    const size_t at = at0 + static_cast<size_t>(rr) * p.c;
    Pack<T, K> out;
    if (z) out = *reinterpret_cast<const Pack<T, K>*>(z + at);
#pragma unroll
    for (int k = 0; k < K; ++k) out.v[k] = from_f<T>(apply_act(z ? acc[rr][k] + to_f(out.v[k]) : acc[rr][k], act));
    *reinterpret_cast<Pack<T, K>*>(y + at) = out;
  }
}

// The tile for a layer: strips of kTileR pixels, up to 4 side by side (28 pixels), and as many
// rows as keep the block within kTileMaxThreads threads and the staged tile within 48 KiB; the
// rows and strips are spread evenly over the tiles (28 rows: 4 tiles of 7, not 3 of 8 and 1 of 4).
// Returns false where even one row does not fit.
bool plan_tile(const DepthwiseShape& s, std::size_t elem, DepthwiseTile* t, std::size_t* smem) {
  t->n = static_cast<int>(s.n);
  t->h = static_cast<int>(s.h);
  t->w = static_cast<int>(s.w);
  t->c = static_cast<int>(s.c);
  t->oh = static_cast<int>(s.oh);
  t->ow = static_cast<int>(s.ow);
  t->kh = static_cast<int>(s.kh);
  t->ph = static_cast<int>(s.ph);
  t->pw = static_cast<int>(s.pw);
  const int64_t strips = (s.ow + kTileR - 1) / kTileR;
  const int64_t tiles_w = (strips + 3) / 4;
  t->tiles_w = static_cast<int>(tiles_w);
  t->ts = static_cast<int>((strips + tiles_w - 1) / tiles_w);
  int64_t th = std::max<int64_t>(1, kTileMaxThreads / (kTileLanes * t->ts));
  auto bytes = [&](int64_t rows) {
    return sizeof(float) * static_cast<std::size_t>(s.kh * s.kw * kTileC) +
           elem * static_cast<std::size_t>((rows + s.kh - 1) * (t->ts * kTileR + s.kw - 1) * kTileC);
  };
  while (th > 1 && bytes(th) > kTileMaxSmem) --th;
  if (bytes(th) > kTileMaxSmem) return false;
  const int64_t tiles_h = (s.oh + th - 1) / th;
  th = (s.oh + tiles_h - 1) / tiles_h;
  t->th = static_cast<int>(th);
  t->tiles_h = static_cast<int>(tiles_h);
  t->cblocks = static_cast<int>((s.c + kTileC - 1) / kTileC);
  t->in_h = static_cast<int>(th + s.kh - 1);
  t->in_w = static_cast<int>(t->ts * kTileR + s.kw - 1);
  *smem = bytes(th);
  const int64_t blocks = s.n * tiles_h * tiles_w * t->cblocks;
  return blocks < (int64_t{1} << 31) && fits_int32(s.n * s.h * s.w * s.c);
}

}  // namespace

// SLUICE_CUDA_DEPTHWISE_ROWS=0 keeps the one-pixel kernel for every layer, to measure the row kernel.
// SLUICE_CUDA_DEPTHWISE_TILE=0 keeps the row kernel where the tile kernel would run.
DepthwiseChoice depthwise_choice_from_env() {
  DepthwiseChoice c;
  c.tile = switch_on("SLUICE_CUDA_DEPTHWISE_TILE");
  c.rows = switch_on("SLUICE_CUDA_DEPTHWISE_ROWS");
  return c;
}

void depthwise_conv(DType t, const void* x, const void* w, const void* bias, const void* z, void* y,
                    const DepthwiseShape& s, ActParams act, cudaStream_t st) {
  depthwise_conv(t, x, w, bias, z, y, s, act, depthwise_choice_from_env(), st);
}

void depthwise_conv(DType t, const void* x, const void* w, const void* bias, const void* z, void* y,
                    const DepthwiseShape& s, ActParams act, DepthwiseChoice choice, cudaStream_t st) {
  const int64_t total = s.n * s.oh * s.ow * s.c;
  if (total <= 0) return;
  SLUICE_CHECK(fits_int32(total) && fits_int32(s.n * s.h * s.w * s.c), "depthwise convolution: ", total,
               " outputs exceed the kernel's 32-bit indexing");
  Depthwise32 d;
  d.ow = FastDiv(s.ow);
  d.oh = FastDiv(s.oh);
  d.h = static_cast<uint32_t>(s.h);
  d.w = static_cast<uint32_t>(s.w);
  d.c = static_cast<uint32_t>(s.c);
  d.kh = static_cast<int>(s.kh);
  d.kw = static_cast<int>(s.kw);
  d.sh = static_cast<int>(s.sh);
  d.sw = static_cast<int>(s.sw);
  d.dh = static_cast<int>(s.dh);
  d.dw = static_cast<int>(s.dw);
  d.ph = static_cast<int>(s.ph);
  d.pw = static_cast<int>(s.pw);
  dispatch_float(t, [&](auto tag) {
    using T = decltype(tag);
    constexpr int K = kVec<T>;
    const T* xp = static_cast<const T*>(x);
    const T* wp = static_cast<const T*>(w);
    const T* bp = static_cast<const T*>(bias);
    const T* zp = static_cast<const T*>(z);
    T* yp = static_cast<T*>(y);
    const bool packed = s.c % K == 0 && aligned16(x) && aligned16(w) && aligned16(y) && (!z || aligned16(z));
    constexpr int R = 4;
    const bool stride1 = packed && s.sh == 1 && s.sw == 1 && s.dh == 1 && s.dw == 1 && (s.kw == 3 || s.kw == 5 || s.kw == 7);
    DepthwiseTile tile;
    std::size_t smem = 0;
    const bool tiled = stride1 && choice.tile && plan_tile(s, sizeof(T), &tile, &smem);
    const bool rows = stride1 && choice.rows;
    if (tiled) {
      const int64_t blocks = s.n * tile.tiles_h * tile.tiles_w * tile.cblocks;
      const unsigned threads = static_cast<unsigned>(kTileLanes * tile.ts * tile.th);
      auto launch = [&](auto kw_tag) {
        constexpr int KW = decltype(kw_tag)::value;
        depthwise_tile_kernel<T, KW><<<static_cast<unsigned>(blocks), threads, smem, st>>>(xp, wp, bp, zp, yp, tile, act);
      };
      if (s.kw == 7) launch(std::integral_constant<int, 7>{});
      else if (s.kw == 5) launch(std::integral_constant<int, 5>{});
      else launch(std::integral_constant<int, 3>{});
    } else if (rows) {
      d.cp = FastDiv(s.c / K);
      const int64_t blocks = (s.ow + R - 1) / R, items = s.n * s.oh * blocks * (s.c / K);
      const FastDiv bd(blocks);
      auto launch = [&](auto kw_tag) {
        constexpr int KW = decltype(kw_tag)::value;
        depthwise_rows_kernel<T, K, KW, R><<<waves_grid(items), kThreads, 0, st>>>(xp, wp, bp, zp, yp,
                                                                              static_cast<uint32_t>(items), d, bd, act);
      };
      if (s.kw == 7) launch(std::integral_constant<int, 7>{});
      else if (s.kw == 5) launch(std::integral_constant<int, 5>{});
      else launch(std::integral_constant<int, 3>{});
    } else if (packed) {
      d.cp = FastDiv(s.c / K);
      depthwise_kernel<T, K><<<waves_grid(total / K), kThreads, 0, st>>>(xp, wp, bp, zp, yp, static_cast<uint32_t>(total / K), d, act);
    } else {
      d.cp = FastDiv(s.c);
      depthwise_kernel<T, 1><<<waves_grid(total), kThreads, 0, st>>>(xp, wp, bp, zp, yp, static_cast<uint32_t>(total), d, act);
    }
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace sluice::cuda
