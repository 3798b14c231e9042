#pragma once
// The per-candidate decoding of sluice.Detections (model/detections.h), written once for the CPU
// engine and the CUDA kernel (compiled by nvcc as __host__ __device__).  Reads float values through
// `at(i)`, so each engine brings its own storage type.
#include <cmath>
#include <cstdint>

#ifdef __CUDACC__
#define SLUICE_HD __host__ __device__ __forceinline__
#else
#define SLUICE_HD inline
#endif

namespace sluice {

// DETR: logits row of C+1 values (stride 1), box row cx, cy, w, h in [0, 1] of the input.
// Softmax over all C+1, the best of the first C (lowest index on ties); corners in input pixels.
template <typename GetLogit, typename GetBox>
SLUICE_HD void decode_detr(GetLogit logit, GetBox box, int64_t classes, float width, float height, float* out_box,
                           float* score, int32_t* cls) {
  float mx = logit(0);
  for (int64_t c = 1; c <= classes; ++c) mx = fmaxf(mx, logit(c));
  float sum = 0.f, best = -1.f;
  int32_t at = 0;
  for (int64_t c = 0; c <= classes; ++c) {
    const float e = expf(logit(c) - mx);
    sum += e;
    if (c < classes && e > best) {
      best = e;
      at = static_cast<int32_t>(c);
    }
  }
  *score = best / sum;
  *cls = at;
  const float cx = box(0), cy = box(1), w = box(2), h = box(3);
  out_box[0] = (cx - 0.5f * w) * width;
  out_box[1] = (cy - 0.5f * h) * height;
  out_box[2] = (cx + 0.5f * w) * width;
  out_box[3] = (cy + 0.5f * h) * height;
}

// RT-DETR, Deformable DETR: candidate (query, class) of logit x scores sigmoid(x); the box is the
// query's, as DETR's.
template <typename GetBox>
SLUICE_HD void decode_query_sigmoid(float logit, int32_t cls, GetBox box, float width, float height, float* out_box,
                                    float* score, int32_t* out_cls) {
  *score = 1.f / (1.f + expf(-logit));
  *out_cls = cls;
  const float cx = box(0), cy = box(1), w = box(2), h = box(3);
  out_box[0] = (cx - 0.5f * w) * width;
  out_box[1] = (cy - 0.5f * h) * height;
  out_box[2] = (cx + 0.5f * w) * width;
  out_box[3] = (cy + 0.5f * h) * height;
}

// YOLO: value(j) is the candidate's j-th field (cx, cy, w, h in input pixels, then [objectness,]
// class scores).  Score: the best class score, times the objectness when there is one.
template <typename Get>
SLUICE_HD void decode_yolo(Get value, int64_t classes, bool objectness, float* out_box, float* score, int32_t* cls) {
  const int64_t first = objectness ? 5 : 4;
  float best = value(first);
  int32_t at = 0;
  for (int64_t c = 1; c < classes; ++c) {
    const float v = value(first + c);
    if (v > best) {
      best = v;
      at = static_cast<int32_t>(c);
    }
  }
  *score = objectness ? best * value(4) : best;
  *cls = at;
  const float cx = value(0), cy = value(1), w = value(2), h = value(3);
  out_box[0] = cx - 0.5f * w;
  out_box[1] = cy - 0.5f * h;
  out_box[2] = cx + 0.5f * w;
  out_box[3] = cy + 0.5f * h;
}

// YOLOv10-style final row: value(j) is field j of x1, y1, x2, y2 (input pixels), score, class.
template <typename Get>
SLUICE_HD void decode_final(Get value, float* out_box, float* score, int32_t* cls) {
  for (int j = 0; j < 4; ++j) out_box[j] = value(j);
  *score = value(4);
  *cls = static_cast<int32_t>(floorf(value(5) + 0.5f));  // a class index stored as a float
}

}  // namespace sluice
