// sluice.Detections on the GPU.  The decode is model/detection_decode.h, shared with the CPU
// engine, in float whatever the raw outputs' type; the rows are written in float (boxes of a 640 px
// input would lose 2 px to bf16); the selection takes, K times, the best candidate still eligible (score above the
// threshold, not taken, not suppressed; ties: the lower index) and then suppresses the candidates
// of its class that overlap it: the same greedy result as sorting first, without a sort.
#include "engine/cuda/kernels_common.cuh"
#include "engine/cuda/kernels_detect.h"
#include "model/detection_decode.h"

namespace sluice::cuda {

namespace {

constexpr int kSelectThreads = 512;
constexpr unsigned kAll = 0xffffffffu;

template <typename T>
__global__ void decode_kernel(DetectArgs a, const T* x0, const T* x1, float* cand) {
  const int64_t n = a.candidates, c = a.classes;
  SLUICE_GRID_STRIDE(idx, a.batch * n) {
    const int64_t b = idx / n, i = idx - b * n;
    float box[4], score;
    int32_t cls;
    if (a.kind == 3) {  // (query, class) pairs of [B, Q, C] logits
      const int64_t q = i / c;
      const T* bx = x1 + (b * (n / c) + q) * 4;
      decode_query_sigmoid(to_f(x0[idx]), static_cast<int32_t>(i % c), [bx](int64_t j) { return to_f(bx[j]); },
                           a.width, a.height, box, &score, &cls);
    } else if (a.kind == 0) {
      const T* lg = x0 + idx * (c + 1);
      const T* bx = x1 + idx * 4;
      decode_detr([lg](int64_t j) { return to_f(lg[j]); }, [bx](int64_t j) { return to_f(bx[j]); }, c, a.width, a.height,
                  box, &score, &cls);
    } else if (a.kind == 4) {  // final rows
      const T* p = x0 + idx * 6;
      decode_final([p](int64_t j) { return to_f(p[j]); }, box, &score, &cls);
    } else if (a.kind == 1) {
      const T* p = x0 + b * (4 + c) * n + i;
      decode_yolo([p, n](int64_t j) { return to_f(p[j * n]); }, c, false, box, &score, &cls);
    } else {
      const T* p = x0 + idx * (5 + c);
      decode_yolo([p](int64_t j) { return to_f(p[j]); }, c, true, box, &score, &cls);
    }
    float* o = cand + idx * 6;
    for (int j = 0; j < 4; ++j) o[j] = box[j];
    o[4] = score > a.score_threshold ? score : -INFINITY;  // -inf: not eligible
    o[5] = static_cast<float>(cls);
  }
}

// torchvision's box_iou in float, products rounded separately (no fused multiply-add) so the GPU
// decides each overlap as model/detections.cpp does.
__device__ __forceinline__ float iou_of(const float* p, const float* q) {
  const float area_p = __fmul_rn(p[2] - p[0], p[3] - p[1]);
  const float area_q = __fmul_rn(q[2] - q[0], q[3] - q[1]);
  const float w = fmaxf(0.f, fminf(p[2], q[2]) - fmaxf(p[0], q[0]));
  const float h = fmaxf(0.f, fminf(p[3], q[3]) - fmaxf(p[1], q[1]));
  const float inter = __fmul_rn(w, h);
  const float uni = __fsub_rn(__fadd_rn(area_p, area_q), inter);
  return uni > 0.f ? __fdiv_rn(inter, uni) : 0.f;
}

__device__ __forceinline__ bool better(float s, int64_t i, float bs, int64_t bi) {
  return s > bs || (s == bs && bi >= 0 && i < bi) || (bi < 0 && s > -INFINITY);
}

__global__ void select_kernel(DetectArgs a, float* cand, float* dets, int32_t* count) {
  const int64_t b = blockIdx.x, n = a.candidates;
  float* cs = cand + b * n * 6;
  float* out = dets + b * a.k * 6;
  __shared__ float warp_s[kSelectThreads / 32];
  __shared__ int64_t warp_i[kSelectThreads / 32];
  __shared__ float chosen[6];
  __shared__ int64_t chosen_i;
  const int lane = threadIdx.x & 31, warp = threadIdx.x / 32;
  int64_t kept = 0;
  for (; kept < a.k; ++kept) {
    float bs = -INFINITY;
    int64_t bi = -1;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      const float s = cs[i * 6 + 4];
      if (better(s, i, bs, bi)) { bs = s; bi = i; }
    }
    for (int o = 16; o > 0; o >>= 1) {
      const float os = __shfl_xor_sync(kAll, bs, o);
      const int64_t oi = __shfl_xor_sync(kAll, bi, o);
      if (oi >= 0 && better(os, oi, bs, bi)) { bs = os; bi = oi; }
    }
    if (lane == 0) { warp_s[warp] = bs; warp_i[warp] = bi; }
    __syncthreads();
    if (threadIdx.x == 0) {
      float s = -INFINITY;
      int64_t at = -1;
      for (int w = 0; w < kSelectThreads / 32; ++w)
        if (warp_i[w] >= 0 && better(warp_s[w], warp_i[w], s, at)) { s = warp_s[w]; at = warp_i[w]; }
      chosen_i = at;
      if (at >= 0) {
        for (int j = 0; j < 6; ++j) chosen[j] = cs[at * 6 + j];
        cs[at * 6 + 4] = -INFINITY;  // taken
        for (int j = 0; j < 6; ++j) out[kept * 6 + j] = chosen[j];
      }
    }
    __syncthreads();
    if (chosen_i < 0) break;
    if (a.kind == 1 || a.kind == 2) {  // yolo: class-aware suppression
      for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        float* ci = cs + i * 6;
        if (ci[4] > -INFINITY && ci[5] == chosen[5] && iou_of(chosen, ci) > a.iou_threshold) ci[4] = -INFINITY;
      }
    }
    __syncthreads();
  }
  for (int64_t j = kept * 6 + threadIdx.x; j < a.k * 6; j += blockDim.x) out[j] = 0.f;
  if (threadIdx.x == 0) count[b] = static_cast<int32_t>(kept);
}

}  // namespace

void detections(DType t, const DetectArgs& a, const void* x0, const void* x1, float* cand, float* dets, int32_t* count,
                cudaStream_t s) {
  if (a.batch == 0) return;
  dispatch_float(t, [&](auto tag) {
    using T = decltype(tag);
    decode_kernel<T><<<grid_for(a.batch * a.candidates), kThreads, 0, s>>>(a, static_cast<const T*>(x0),
                                                                           static_cast<const T*>(x1), cand);
  });
  select_kernel<<<static_cast<unsigned>(a.batch), kSelectThreads, 0, s>>>(a, cand, dets, count);
  CUDA_CHECK_LAUNCH();
}

}  // namespace sluice::cuda
