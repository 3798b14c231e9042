// Kernels that move elements without arithmetic: strided copies (Transpose, Slice, Expand, Tile),
// the NCHW <-> channels-last transpose, padding and the atrous rearrangements.  They work on raw
// element sizes so one instantiation serves every dtype of that width.  Index arithmetic is 32-bit
// with precomputed divisors where the sizes allow (FastDiv), 64-bit otherwise.
#include <algorithm>
#include <cstdlib>
#include <type_traits>

#include "engine/cuda/kernels.h"
#include "engine/cuda/kernels_common.cuh"

namespace sluice::cuda {
namespace {

// ---- strided copy ----------------------------------------------------------------------------------

template <typename U>
__global__ void strided_copy_kernel64(const U* x, U* y, int64_t n, CopyShape s) {
  SLUICE_GRID_STRIDE(i, n) {
    int64_t rem = i, off = 0;
    for (int d = s.rank - 1; d >= 0; --d) {
      const int64_t q = rem / s.out[d];
      const int64_t idx = rem - q * s.out[d];
      rem = q;
      off += (s.in_dim[d] == 1 ? 0 : idx % s.in_dim[d]) * s.in_stride[d];
    }
    y[i] = x[off];
  }
}

struct Copy32 {
  int rank = 0;
  FastDiv out[kMaxRank], in_dim[kMaxRank];
  int32_t in_stride[kMaxRank] = {};   // in elements; negative for reversed slices
};

// K consecutive outputs of the innermost dim per thread (K > 1 only when that dim is copied
// contiguously and every pack starts 16-byte aligned on both sides).
template <typename U, int K>
__global__ void strided_copy_kernel(const U* x, U* y, uint32_t packs, Copy32 s) {
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < packs; i += gridDim.x * blockDim.x) {
    uint32_t rem = i * K;
    int32_t off = 0;
    for (int d = s.rank - 1; d >= 0; --d) {
      uint32_t idx;
      rem = s.out[d].divmod(rem, &idx);
      if (s.in_dim[d].d != s.out[d].d) s.in_dim[d].divmod(idx, &idx);
      off += static_cast<int32_t>(idx) * s.in_stride[d];
    }
    if (K == 1) y[i] = x[off];
    else reinterpret_cast<Pack<U, K>*>(y)[i] = *reinterpret_cast<const Pack<U, K>*>(x + off);
  }
}

// ---- patch embeddings' permutation through shared memory -------------------------------------------
// x [N, C, Hp, p, Wp, q] -> y [N, Hp, Wp, C, p, q]: the Transpose (0, 2, 4, 1, 3, 5) that cuts an
// image into patches (fuse_patches.cpp).  The general copy spends its time on six divisions per
// element and reads q-element runs from C x p rows per output patch (DINOv2's q = 14 bf16 elements
// ran at 9 % of the copy rate).  Here one block takes `chunk` patches of one patch row: it reads the
// C x p image rows they cover as contiguous runs, places them in shared memory in the output order
// and writes them out as one contiguous run.  Units are words of the widest size that divides a
// patch row's bytes (4 bytes for 14 bf16), so the index arithmetic is per word, not per element.
struct PatchDims {
  FastDiv run, qw, p;         // run = chunk x qw words of one image row; qw words in a patch row
  uint32_t c = 0, h = 0, ww = 0, hp = 0, wp = 0, chunk = 0;   // ww = words in an image row
};

template <typename U>
__global__ void patchify_kernel(const U* __restrict__ x, U* __restrict__ y, PatchDims d) {
  extern __shared__ uint4 patch_smem[];
  U* tile = reinterpret_cast<U*>(patch_smem);
  const uint32_t n = blockIdx.z, py = blockIdx.y, px0 = blockIdx.x * d.chunk;
  const uint32_t rows = d.c * d.p.d, total = rows * d.run.d, qw = d.qw.d, per_patch = rows * qw;
  const U* src = x + (static_cast<size_t>(n) * d.c * d.h + static_cast<size_t>(py) * d.p.d) * d.ww + px0 * qw;
  for (uint32_t i = threadIdx.x; i < total; i += blockDim.x) {
    uint32_t j, ky, kx;
    const uint32_t r = d.run.divmod(i, &j);      // r = c x p + ky over the block's image rows
    const uint32_t c = d.p.divmod(r, &ky);
    const uint32_t px = d.qw.divmod(j, &kx);
    tile[px * per_patch + (c * d.p.d + ky) * qw + kx] = src[(static_cast<size_t>(c) * d.h + ky) * d.ww + j];
  }
  __syncthreads();
  U* dst = y + ((static_cast<size_t>(n) * d.hp + py) * d.wp + px0) * per_patch;
  for (uint32_t i = threadIdx.x; i < total; i += blockDim.x) dst[i] = tile[i];
}

constexpr std::size_t kPatchTileBytes = 24 * 1024;

// Launches patchify_kernel when `shape` is that permutation (no broadcast) and the sizes fit; false
// leaves the copy to the general kernel.  SLUICE_CUDA_PATCHIFY=0 keeps the general one.
bool launch_patchify(std::size_t es, const void* x, void* y, const CopyShape& s, cudaStream_t st) {
  if (!switch_on("SLUICE_CUDA_PATCHIFY") || !fast_kernels() || !is_patch_permutation(s)) return false;
  const int64_t n = s.out[0], hp = s.out[1], wp = s.out[2], c = s.out[3], p = s.out[4], q = s.out[5];
  const int64_t w = wp * q, h = hp * p;
  if (n * c * h * w <= 0 || n > 65535 || hp > 65535) return false;
  std::size_t word = 16;   // the widest word that divides a patch row and both addresses
  while (word > 1 && ((static_cast<std::size_t>(q) * es) % word != 0 || reinterpret_cast<uintptr_t>(x) % word != 0 ||
                      reinterpret_cast<uintptr_t>(y) % word != 0))
    word /= 2;
  const int64_t qw = q * static_cast<int64_t>(es) / static_cast<int64_t>(word);   // words in a patch row
  const int64_t words_total = n * c * h * w * static_cast<int64_t>(es) / static_cast<int64_t>(word);
  const std::size_t patch_bytes = static_cast<std::size_t>(c * p * q) * es;
  if (!fits_int32(words_total) || patch_bytes > kPatchTileBytes) return false;
  int64_t chunk = 1;   // the most patches of a row whose tile fits, dividing the row evenly
  for (int64_t k = wp; k >= 1; --k)
    if (wp % k == 0 && static_cast<std::size_t>(k) * patch_bytes <= kPatchTileBytes) { chunk = k; break; }
  PatchDims d;
  d.qw = FastDiv(qw);
  d.run = FastDiv(chunk * qw);
  d.p = FastDiv(p);
  d.c = static_cast<uint32_t>(c);
  d.h = static_cast<uint32_t>(h);
  d.ww = static_cast<uint32_t>(wp * qw);
  d.hp = static_cast<uint32_t>(hp);
  d.wp = static_cast<uint32_t>(wp);
  d.chunk = static_cast<uint32_t>(chunk);
  const dim3 grid(static_cast<unsigned>(wp / chunk), static_cast<unsigned>(hp), static_cast<unsigned>(n));
  const std::size_t smem = static_cast<std::size_t>(chunk) * patch_bytes;
  const auto go = [&](auto tag) {
    using U = decltype(tag);
    patchify_kernel<U><<<grid, kThreads, smem, st>>>(static_cast<const U*>(x), static_cast<U*>(y), d);
  };
  switch (word) {
    case 1: go(uint8_t{}); break;
    case 2: go(uint16_t{}); break;
    case 4: go(uint32_t{}); break;
    case 8: go(uint2{}); break;
    default: go(uint4{}); break;
  }
  return true;
}

template <typename U>
void launch_strided_copy(const void* xv, void* yv, int64_t n, const CopyShape& shape, cudaStream_t st) {
  const U* x = static_cast<const U*>(xv);
  U* y = static_cast<U*>(yv);
  int64_t reach = 0;   // the largest |offset| read
  for (int d = 0; d < shape.rank; ++d) reach += (std::min(shape.out[d], shape.in_dim[d]) - 1) * std::abs(shape.in_stride[d]);
  if (!fast_kernels() || !fits_int32(n) || !fits_int32(reach)) {
    strided_copy_kernel64<U><<<grid_for(n), kThreads, 0, st>>>(x, y, n, shape);
    return;
  }
  Copy32 c;
  c.rank = shape.rank;
  for (int d = 0; d < shape.rank; ++d) {
    c.out[d] = FastDiv(shape.out[d]);
    c.in_dim[d] = FastDiv(shape.in_dim[d]);
    c.in_stride[d] = static_cast<int32_t>(shape.in_stride[d]);
  }
  constexpr int K = kVec<U>;
  const int last = shape.rank - 1;
  bool packs = K > 1 && shape.in_stride[last] == 1 && shape.in_dim[last] == shape.out[last] && shape.out[last] % K == 0 &&
               aligned16(x) && aligned16(y);
  for (int d = 0; d < last && packs; ++d) packs = shape.in_stride[d] % K == 0;
  if (packs) strided_copy_kernel<U, K><<<waves_grid(n / K), kThreads, 0, st>>>(x, y, static_cast<uint32_t>(n / K), c);
  else strided_copy_kernel<U, 1><<<waves_grid(n), kThreads, 0, st>>>(x, y, static_cast<uint32_t>(n), c);
}

// ---- 2-D block copies in one launch ------------------------------------------------------------------

struct Blocks16 {
  int count = 0;
  const uint4* src[kMaxCopyBlocks] = {};
  uint4* dst[kMaxCopyBlocks] = {};
  uint32_t src_pitch[kMaxCopyBlocks] = {}, dst_pitch[kMaxCopyBlocks] = {};   // in 16-byte units
  FastDiv width[kMaxCopyBlocks];                                             // units per row
  uint32_t first[kMaxCopyBlocks + 1] = {};   // the first unit of each block; first[count] = total
};

// One 16-byte unit per thread and step; the block of a unit is found by a scan of the prefix table
// (a few entries, in the kernel's parameters).
__global__ void copy_blocks_kernel(Blocks16 b) {
  const uint32_t total = b.first[b.count];
  for (uint32_t u = blockIdx.x * blockDim.x + threadIdx.x; u < total; u += gridDim.x * blockDim.x) {
    int k = 0;
    while (u >= b.first[k + 1]) ++k;
    uint32_t col;
    const uint32_t row = b.width[k].divmod(u - b.first[k], &col);
    b.dst[k][static_cast<size_t>(row) * b.dst_pitch[k] + col] = b.src[k][static_cast<size_t>(row) * b.src_pitch[k] + col];
  }
}

// ---- transpose of the last two dims (NCHW <-> NHWC) -------------------------------------------------
// y[b][c][r] = x[b][r][c].  A 32x32 tile goes through shared memory so that both the reads and the
// writes are coalesced rows; values are staged as 32-bit (or 64-bit) words, one per bank, with the
// row padded by one word against bank conflicts on the column-wise reads.
constexpr int kTile = 32, kTileRows = 8;

template <typename U>
__global__ void transpose_kernel(const U* __restrict__ x, U* __restrict__ y, uint32_t rows, uint32_t cols) {
  using W = typename std::conditional<sizeof(U) <= 4, uint32_t, uint64_t>::type;
  __shared__ W tile[kTile][kTile + 1];
  const size_t plane = static_cast<size_t>(rows) * cols;
  const U* xb = x + blockIdx.z * plane;
  U* yb = y + blockIdx.z * plane;
  const uint32_t c = blockIdx.x * kTile + threadIdx.x;
  const uint32_t r0 = blockIdx.y * kTile;
#pragma unroll
  for (int j = 0; j < kTile; j += kTileRows) {
    const uint32_t r = r0 + threadIdx.y + j;
    if (r < rows && c < cols) tile[threadIdx.y + j][threadIdx.x] = static_cast<W>(xb[static_cast<size_t>(r) * cols + c]);
  }
  __syncthreads();
  const uint32_t r = r0 + threadIdx.x;   // the output row is the input column
  const uint32_t c0 = blockIdx.x * kTile;
#pragma unroll
  for (int j = 0; j < kTile; j += kTileRows) {
    const uint32_t cc = c0 + threadIdx.y + j;
    if (cc < cols && r < rows) yb[static_cast<size_t>(cc) * rows + r] = static_cast<U>(tile[threadIdx.x][threadIdx.y + j]);
  }
}

// ---- padding ---------------------------------------------------------------------------------------

__device__ __forceinline__ int64_t pad_source(int64_t j, int64_t len, PadMode mode) {
  if (j >= 0 && j < len) return j;
  switch (mode) {
    case PadMode::Constant: return -1;
    case PadMode::Edge: return j < 0 ? 0 : len - 1;
    case PadMode::Wrap: return ((j % len) + len) % len;
    case PadMode::Reflect: {
      if (len == 1) return 0;
      const int64_t period = 2 * (len - 1);
      int64_t m = ((j % period) + period) % period;
      return m < len ? m : period - m;
    }
  }
  return -1;
}

template <typename U>
__global__ void pad_kernel(const U* x, U* y, int64_t n, PadShape s, U value) {
  SLUICE_GRID_STRIDE(i, n) {
    int64_t rem = i, off = 0, stride = 1;
    bool inside = true;
    for (int d = s.rank - 1; d >= 0; --d) {
      const int64_t q = rem / s.out[d];
      const int64_t idx = rem - q * s.out[d];
      rem = q;
      const int64_t j = pad_source(idx - s.begin[d], s.in[d], s.mode);
      if (j < 0) inside = false;
      off += j * stride;
      stride *= s.in[d];
    }
    y[i] = inside ? x[off] : value;
  }
}

// ---- space to depth with zero padding (the strided stem's input) -----------------------------------

struct S2D32 {
  FastDiv c2, ow, oh, ss, s;
  int32_t c = 0, h = 0, w = 0, step = 1, pad_top = 0, pad_left = 0;
};

// One thread per output element, in the output's memory order (so the writes are coalesced); the
// reads of neighbouring threads fall in the same few input rows, which L1 serves.
template <typename U>
__global__ void space_to_depth_kernel(const U* __restrict__ x, U* __restrict__ y, uint32_t total, S2D32 d, bool nhwc) {
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
    uint32_t rem = i, ch, u, v;
    if (nhwc) {
      rem = d.c2.divmod(rem, &ch);
      rem = d.ow.divmod(rem, &v);
      rem = d.oh.divmod(rem, &u);
    } else {
      rem = d.ow.divmod(rem, &v);
      rem = d.oh.divmod(rem, &u);
      rem = d.c2.divmod(rem, &ch);
    }
    const uint32_t n = rem;
    uint32_t ij, j;
    const uint32_t ci = d.ss.divmod(ch, &ij);
    const uint32_t bi = d.s.divmod(ij, &j);
    const int32_t r = static_cast<int32_t>(u) * d.step + static_cast<int32_t>(bi) - d.pad_top;
    const int32_t col = static_cast<int32_t>(v) * d.step + static_cast<int32_t>(j) - d.pad_left;
    U val = U(0);
    if (ci < static_cast<uint32_t>(d.c) && r >= 0 && r < d.h && col >= 0 && col < d.w)   // ci >= c: a zero channel
      val = x[((static_cast<size_t>(n) * d.c + ci) * d.h + r) * d.w + col];
    y[i] = val;
  }
}

// ---- Atrous convolution by space-to-batch ---------------------------------------------------------

// Sizes in units of U: for channels-last tensors c counts vectors of several channels.
struct AtrousDims {
  FastDiv c, ws, hs, n, d;
  uint32_t h, w;
};

// One thread per unit of the batched tensor, in its memory order: [d, d, n, c, hs, ws] or
// [d, d, n, hs, ws, c].  Both directions walk the batched side so the channels-last case reads and
// writes whole rows of channels; the batched side is the larger one (its padding), and every space
// position belongs to exactly one batched position.
template <typename U>
__global__ void atrous_kernel(const U* __restrict__ src, U* __restrict__ dst, uint32_t total, AtrousDims s, bool nhwc,
                              bool to_batch) {
  const uint32_t step = gridDim.x * blockDim.x;
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += step) {
    uint32_t rem = i, c, u, v, n, sub;
    if (nhwc) {
      rem = s.c.divmod(rem, &c);
      rem = s.ws.divmod(rem, &v);
      rem = s.hs.divmod(rem, &u);
    } else {
      rem = s.ws.divmod(rem, &v);
      rem = s.hs.divmod(rem, &u);
      rem = s.c.divmod(rem, &c);
    }
    sub = s.n.divmod(rem, &n);   // sub-image r * d + t
    uint32_t t;
    const uint32_t r = s.d.divmod(sub, &t);
    const uint32_t h = r + s.d.d * u, w = t + s.d.d * v;
    const bool inside = h < s.h && w < s.w;
    const size_t at = nhwc ? ((static_cast<size_t>(n) * s.h + h) * s.w + w) * s.c.d + c
                           : ((static_cast<size_t>(n) * s.c.d + c) * s.h + h) * s.w + w;
    if (to_batch) dst[i] = inside ? src[at] : U{};
    else if (inside) dst[at] = src[i];
  }
}

template <typename I>
struct AtrousDims64 {
  I n, c, h, w, d, hs, ws;
};

// The same with 64-bit indices, for tensors of 2^31 units or more.
template <typename U, typename I>
__global__ void atrous_kernel64(const U* __restrict__ src, U* __restrict__ dst, I total, AtrousDims64<I> s, bool nhwc,
                              bool to_batch) {
  const I step = static_cast<I>(gridDim.x) * blockDim.x;
  for (I i = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += step) {
    I rem = i, c, u, v;
    if (nhwc) {
      c = rem % s.c; rem /= s.c;
      v = rem % s.ws; rem /= s.ws;
      u = rem % s.hs; rem /= s.hs;
    } else {
      v = rem % s.ws; rem /= s.ws;
      u = rem % s.hs; rem /= s.hs;
      c = rem % s.c; rem /= s.c;
    }
    const I n = rem % s.n;
    rem /= s.n;
    const I h = rem / s.d + s.d * u, w = rem % s.d + s.d * v;
    const bool inside = h < s.h && w < s.w;
    const I at = nhwc ? ((n * s.h + h) * s.w + w) * s.c + c : ((n * s.c + c) * s.h + h) * s.w + w;
    if (to_batch) dst[i] = inside ? src[at] : U{};
    else if (inside) dst[at] = src[i];
  }
}

template <typename U>
void launch_atrous(const void* src, void* dst, int64_t c_units, const AtrousShape& a, bool to_batch, cudaStream_t st) {
  const int64_t hs = (a.h + a.d - 1) / a.d, ws = (a.w + a.d - 1) / a.d;
  const int64_t total = a.d * a.d * a.n * c_units * hs * ws;
  if (total <= 0) return;
  if (!fast_kernels() || !fits_int32(total) || !fits_int32(a.n * c_units * a.h * a.w)) {
    const AtrousDims64<uint64_t> d{static_cast<uint64_t>(a.n), static_cast<uint64_t>(c_units), static_cast<uint64_t>(a.h),
                                   static_cast<uint64_t>(a.w), static_cast<uint64_t>(a.d), static_cast<uint64_t>(hs),
                                   static_cast<uint64_t>(ws)};
    atrous_kernel64<U, uint64_t><<<grid_for(total), kThreads, 0, st>>>(static_cast<const U*>(src), static_cast<U*>(dst),
                                                                      static_cast<uint64_t>(total), d, a.nhwc, to_batch);
    CUDA_CHECK_LAUNCH();
    return;
  }
  AtrousDims d{FastDiv(c_units), FastDiv(ws), FastDiv(hs), FastDiv(a.n), FastDiv(a.d), static_cast<uint32_t>(a.h),
               static_cast<uint32_t>(a.w)};
  atrous_kernel<U><<<waves_grid(total), kThreads, 0, st>>>(static_cast<const U*>(src), static_cast<U*>(dst),
                                                          static_cast<uint32_t>(total), d, a.nhwc, to_batch);
  CUDA_CHECK_LAUNCH();
}

void atrous(std::size_t es, const void* src, void* dst, const AtrousShape& a, bool to_batch, cudaStream_t st) {
  SLUICE_CHECK(a.d >= 1 && a.n >= 0 && a.c >= 0 && a.h >= 0 && a.w >= 0, "atrous rearrangement: bad shape");
  // Channels-last rows of channels move as vectors of up to 16 bytes when sizes and addresses allow.
  std::size_t unit = es;
  if (a.nhwc) {
    const auto aligned = [&](std::size_t v) {
      return (static_cast<std::size_t>(a.c) * es) % v == 0 && reinterpret_cast<uintptr_t>(src) % v == 0 &&
             reinterpret_cast<uintptr_t>(dst) % v == 0;
    };
    for (std::size_t v = 16; v > es; v /= 2)
      if (aligned(v)) { unit = v; break; }
  }
  const int64_t c_units = a.c * static_cast<int64_t>(es) / static_cast<int64_t>(unit);
  switch (unit) {
    case 1: launch_atrous<uint8_t>(src, dst, c_units, a, to_batch, st); break;
    case 2: launch_atrous<uint16_t>(src, dst, c_units, a, to_batch, st); break;
    case 4: launch_atrous<uint32_t>(src, dst, c_units, a, to_batch, st); break;
    case 8: launch_atrous<uint2>(src, dst, c_units, a, to_batch, st); break;
    case 16: launch_atrous<uint4>(src, dst, c_units, a, to_batch, st); break;
    default: SLUICE_THROW("atrous rearrangement: element size ", es, " is not supported");
  }
}

}  // namespace

bool is_patch_permutation(const CopyShape& s) {
  if (s.rank != 6) return false;
  for (int d = 0; d < 6; ++d)
    if (s.in_dim[d] != s.out[d]) return false;
  const int64_t hp = s.out[1], wp = s.out[2], c = s.out[3], p = s.out[4], q = s.out[5];
  const int64_t w = wp * q, h = hp * p;
  return s.in_stride[5] == 1 && s.in_stride[4] == w && s.in_stride[2] == q && s.in_stride[1] == p * w &&
         s.in_stride[3] == h * w && s.in_stride[0] == c * h * w;
}

void strided_copy(std::size_t elem_size, const void* x, void* y, const CopyShape& shape, cudaStream_t s) {
  int64_t n = 1;
  for (int d = 0; d < shape.rank; ++d) n *= shape.out[d];
  if (n <= 0) return;
  if (launch_patchify(elem_size, x, y, shape, s)) {
    CUDA_CHECK_LAUNCH();
    return;
  }
  dispatch_size(elem_size, [&](auto tag) { launch_strided_copy<decltype(tag)>(x, y, n, shape, s); });
  CUDA_CHECK_LAUNCH();
}

bool copy_blocks16(const CopyBlock* blocks, int count, cudaStream_t s) {
  if (!fast_kernels() || count < 1 || count > kMaxCopyBlocks) return false;
  Blocks16 b;
  int64_t total = 0;
  for (int i = 0; i < count; ++i) {
    const CopyBlock& k = blocks[i];
    const auto multiple = [](std::size_t v) { return v % 16 == 0; };
    if (!aligned16(k.src) || !aligned16(k.dst) || !multiple(k.width) || (k.height > 1 && (!multiple(k.src_pitch) || !multiple(k.dst_pitch))))
      return false;
    const int64_t units = static_cast<int64_t>(k.width / 16) * static_cast<int64_t>(k.height);
    if (!fits_int32(total + units) || !fits_int32(static_cast<int64_t>(k.src_pitch / 16)) ||
        !fits_int32(static_cast<int64_t>(k.dst_pitch / 16)))
      return false;
    b.src[b.count] = static_cast<const uint4*>(k.src);
    b.dst[b.count] = static_cast<uint4*>(k.dst);
    b.src_pitch[b.count] = static_cast<uint32_t>(k.src_pitch / 16);
    b.dst_pitch[b.count] = static_cast<uint32_t>(k.dst_pitch / 16);
    b.width[b.count] = FastDiv(std::max<int64_t>(1, static_cast<int64_t>(k.width / 16)));
    b.first[b.count] = static_cast<uint32_t>(total);
    if (units > 0) {
      total += units;
      ++b.count;
    }
  }
  b.first[b.count] = static_cast<uint32_t>(total);
  if (total == 0) return true;
  copy_blocks_kernel<<<waves_grid(total), kThreads, 0, s>>>(b);
  CUDA_CHECK_LAUNCH();
  return true;
}

void transpose_last2(std::size_t elem_size, const void* x, void* y, int64_t batch, int64_t rows, int64_t cols,
                     cudaStream_t s) {
  if (batch * rows * cols <= 0) return;
  SLUICE_CHECK(batch <= 65535 && fits_int32(rows) && fits_int32(cols), "transpose: ", batch, " planes of ", rows, "x", cols,
               " exceed the kernel's grid");
  const dim3 grid(static_cast<unsigned>((cols + kTile - 1) / kTile), static_cast<unsigned>((rows + kTile - 1) / kTile),
                  static_cast<unsigned>(batch));
  SLUICE_CHECK(grid.y <= 65535, "transpose: ", rows, " rows exceed the kernel's grid");
  dispatch_size(elem_size, [&](auto tag) {
    using U = decltype(tag);
    transpose_kernel<U><<<grid, dim3(kTile, kTileRows), 0, s>>>(static_cast<const U*>(x), static_cast<U*>(y),
                                                                static_cast<uint32_t>(rows), static_cast<uint32_t>(cols));
  });
  CUDA_CHECK_LAUNCH();
}

void pad(std::size_t elem_size, const void* x, void* y, const PadShape& shape, cudaStream_t s) {
  int64_t n = 1;
  for (int d = 0; d < shape.rank; ++d) n *= shape.out[d];
  if (n <= 0) return;
  dispatch_size(elem_size, [&](auto tag) {
    using U = decltype(tag);
    pad_kernel<U><<<grid_for(n), kThreads, 0, s>>>(static_cast<const U*>(x), static_cast<U*>(y), n, shape,
                                                   static_cast<U>(shape.value_bits));
  });
  CUDA_CHECK_LAUNCH();
}

void space_to_depth(std::size_t elem_size, const void* x, void* y, const SpaceToDepthShape& sh, cudaStream_t st) {
  const int64_t c2 = sh.c_out > 0 ? sh.c_out : sh.c * sh.s * sh.s, total = sh.n * c2 * sh.oh * sh.ow;
  if (total <= 0) return;
  SLUICE_CHECK(fits_int32(total) && fits_int32(sh.n * sh.c * sh.h * sh.w) && fits_int32(sh.oh * sh.s + sh.h),
               "space to depth: ", total, " elements exceed the kernel's 32-bit indices");
  S2D32 d;
  d.c2 = FastDiv(c2);
  d.ow = FastDiv(sh.ow);
  d.oh = FastDiv(sh.oh);
  d.ss = FastDiv(sh.s * sh.s);
  d.s = FastDiv(sh.s);
  d.c = static_cast<int32_t>(sh.c);
  d.h = static_cast<int32_t>(sh.h);
  d.w = static_cast<int32_t>(sh.w);
  d.step = static_cast<int32_t>(sh.s);
  d.pad_top = static_cast<int32_t>(sh.pad_top);
  d.pad_left = static_cast<int32_t>(sh.pad_left);
  dispatch_size(elem_size, [&](auto tag) {
    using U = decltype(tag);
    space_to_depth_kernel<U><<<waves_grid(total), kThreads, 0, st>>>(static_cast<const U*>(x), static_cast<U*>(y),
                                                                      static_cast<uint32_t>(total), d, sh.nhwc);
  });
  CUDA_CHECK_LAUNCH();
}

void space_to_batch(std::size_t elem_size, const void* x, void* xb, const AtrousShape& shape, cudaStream_t s) {
  atrous(elem_size, x, xb, shape, true, s);
}

void batch_to_space(std::size_t elem_size, const void* yb, void* y, const AtrousShape& shape, cudaStream_t s) {
  atrous(elem_size, yb, y, shape, false, s);
}

}  // namespace sluice::cuda
