// The fused output tail: a model's last 2-D Resize (the x8 upsampling of segmentation logits) and
// every head the job stores from it, in one pass.  One thread per output pixel interpolates the
// pixel's channels from the small low-resolution input (it stays in L2) and writes what is asked:
// the logits in the stored layout (NCHW) and type, the argmax index, the softmax, the top-k values
// and indices.  The full-resolution tensor is never written in the compute type, transposed or
// converted; with argmax alone it never exists at all.
#include "engine/cuda/kernels.h"
#include "engine/cuda/kernels_common.cuh"
#include "engine/cuda/kernels_resize.cuh"

namespace sluice::cuda {
namespace {

struct TailArgs {
  ResizeShape s;           // logical NCHW dims: 2 and 3 resize
  FastDiv ow, oh;
  uint32_t c = 0, h = 0, w = 0, k = 0;
  uint32_t plane = 0;      // oh * ow
  bool nhwc = false;       // the input's layout
  bool select_last = false;
};

template <typename O>
__device__ __forceinline__ void store_float(void* base, size_t at, float v) {
  static_cast<O*>(base)[at] = from_f<O>(v);
}
__device__ __forceinline__ void store_as(DType t, void* base, size_t at, float v) {
  switch (t) {
    case DType::F16: store_float<__half>(base, at, v); break;
    case DType::BF16: store_float<__nv_bfloat16>(base, at, v); break;
    default: store_float<float>(base, at, v); break;
  }
}
__device__ __forceinline__ void store_index(DType t, void* base, size_t at, int64_t v) {
  switch (t) {
    case DType::U8: static_cast<uint8_t*>(base)[at] = static_cast<uint8_t>(v); break;
    case DType::I32: static_cast<int32_t*>(base)[at] = static_cast<int32_t>(v); break;
    default: static_cast<int64_t*>(base)[at] = v; break;
  }
}

// Is (va, ia) ranked before (vb, ib) for a largest-first pick?  Larger values first, ties to the
// lower index (ONNX TopK, and ArgMax without select_last_index); ib < 0 is "nothing yet".
__device__ __forceinline__ bool ranks_before(float va, int64_t ia, float vb, int64_t ib) {
  if (ib < 0) return true;
  if (va != vb) return va > vb;
  return ia < ib;
}

// T is the input's type, L the stored logits' (the other heads' types are read at run time: they
// are written once or k times a pixel, the logits once per channel).
template <typename T, typename L>
__global__ void tail_kernel(const T* __restrict__ x, uint32_t pixels, TailArgs a, TailOutputs o) {
  // Channel c of a low-resolution position sits at offset(y, x) + c * cstride.
  const size_t cstride = a.nhwc ? 1 : static_cast<size_t>(a.h) * a.w;
  auto offset = [&](int64_t yy, int64_t xx) {
    const size_t p = static_cast<size_t>(yy) * a.w + static_cast<size_t>(xx);
    return a.nhwc ? p * a.c : p;
  };
  for (uint32_t q = blockIdx.x * blockDim.x + threadIdx.x; q < pixels; q += gridDim.x * blockDim.x) {
    uint32_t ox, oy;
    const uint32_t n = a.oh.divmod(a.ow.divmod(q, &ox), &oy);
    const AxisTaps ty = axis_taps(oy, 2, a.s), tx = axis_taps(ox, 3, a.s);
    const T* xb = x + static_cast<size_t>(n) * a.c * a.h * a.w;
    // The four taps' channel-0 elements, found once a pixel; each channel then costs four loads.
    const T* p00 = xb + offset(ty.i0, tx.i0);
    const T* p10 = xb + offset(ty.i1, tx.i0);
    const T* p01 = xb + offset(ty.i0, tx.i1);
    const T* p11 = xb + offset(ty.i1, tx.i1);
    // The interpolated value of channel c at this pixel, summed as the resize kernels sum it.
    auto value = [&](uint32_t c) {
      const size_t at = c * cstride;
      return blend4(ty, tx, to_f(p00[at]), to_f(p10[at]), to_f(p01[at]), to_f(p11[at]));
    };
    const size_t pix = static_cast<size_t>(oy) * a.ow.d + ox;   // position within one output plane
    const size_t chan0 = static_cast<size_t>(n) * a.c * a.plane + pix;   // channel 0 of this pixel, NCHW
    if (o.logits || o.argmax || o.softmax) {
      float best = 0.f, mx = -INFINITY;
      int64_t best_i = -1;
      for (uint32_t c = 0; c < a.c; ++c) {
        const float v = value(c);
        if (o.logits) static_cast<L*>(o.logits)[chan0 + static_cast<size_t>(c) * a.plane] = from_f<L>(v);
        if (best_i < 0 || v > best || (a.select_last && v == best)) { best = v; best_i = c; }
        mx = fmaxf(mx, v);
      }
      if (o.argmax) store_index(o.argmax_type, o.argmax, static_cast<size_t>(n) * a.plane + pix, best_i);
      if (o.softmax) {
        // As the softmax kernel: the max first, then the sum of exp(v - max), then the scaled values.
        float sum = 0.f;
        for (uint32_t c = 0; c < a.c; ++c) sum += expf(value(c) - mx);
        const float inv = 1.f / sum;
        for (uint32_t c = 0; c < a.c; ++c)
          store_as(o.softmax_type, o.softmax, chan0 + static_cast<size_t>(c) * a.plane, expf(value(c) - mx) * inv);
      }
    }
    if (o.topk_values || o.topk_indices) {
      // Pick j is the best channel ranked after pick j - 1: no marks, no sort, k passes.
      float pv = 0.f;
      int64_t pi = -1;
      for (uint32_t j = 0; j < a.k; ++j) {
        float bv = 0.f;
        int64_t bi = -1;
        for (uint32_t c = 0; c < a.c; ++c) {
          const float v = value(c);
          if (pi >= 0 && !ranks_before(pv, pi, v, c)) continue;
          if (ranks_before(v, c, bv, bi)) { bv = v; bi = c; }
        }
        const size_t at = (static_cast<size_t>(n) * a.k + j) * a.plane + pix;
        if (o.topk_values) store_as(o.values_type, o.topk_values, at, bv);
        if (o.topk_indices) store_index(o.indices_type, o.topk_indices, at, bi < 0 ? 0 : bi);
        pv = bv;
        pi = bi;
      }
    }
  }
}

}  // namespace

void resize_tail(DType t, const void* x, const ResizeShape& s, bool nhwc, const TailOutputs& o, cudaStream_t st) {
  SLUICE_CHECK(s.rank == 4 && (s.mode == ResizeMode::Linear || s.mode == ResizeMode::Nearest) && s.in[0] == s.out[0] &&
                   s.in[1] == s.out[1],
               "resize_tail: not a 2-D linear or nearest resize of [N, C, H, W]");
  const int64_t pixels = s.out[0] * s.out[2] * s.out[3];
  if (pixels <= 0) return;
  SLUICE_CHECK(fits_int32(pixels) && fits_int32(s.out[2] * s.out[3]), "resize_tail: ", pixels, " output pixels are too many");
  TailArgs a;
  a.s = s;
  a.ow = FastDiv(s.out[3]);
  a.oh = FastDiv(s.out[2]);
  a.c = static_cast<uint32_t>(s.in[1]);
  a.h = static_cast<uint32_t>(s.in[2]);
  a.w = static_cast<uint32_t>(s.in[3]);
  a.k = static_cast<uint32_t>(o.k);
  a.plane = static_cast<uint32_t>(s.out[2] * s.out[3]);
  a.nhwc = nhwc;
  a.select_last = o.argmax_select_last;
  // Without logits, L is never used: the input's type stands in.
  dispatch_float(t, [&](auto tag) {
    using T = decltype(tag);
    dispatch_float(o.logits ? o.logits_type : t, [&](auto ltag) {
      using L = decltype(ltag);
      tail_kernel<T, L><<<waves_grid(pixels), kThreads, 0, st>>>(static_cast<const T*>(x), static_cast<uint32_t>(pixels), a, o);
    });
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace sluice::cuda
