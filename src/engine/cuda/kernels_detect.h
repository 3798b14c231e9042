#pragma once
// The CUDA side of sluice.Detections (model/detections.h).
#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"

namespace sluice::cuda {

struct DetectArgs {
  int kind = 0;              // DetectionLayout::Kind as an int: 0 detr, 1 yolo [B, 4+C, N], 2 yolo [B, N, 5+C], 3 rtdetr, 4 yolov10 [B, N, 6]
  // candidates: per sample (rtdetr: queries x classes)
  int64_t batch = 0, candidates = 0, classes = 0, k = 0;
  float score_threshold = 0.25f, iou_threshold = 0.45f;
  float width = 1.f, height = 1.f;  // detr: the input's size in pixels
};

// x0 (detr: logits; yolo: the prediction) and x1 (detr: boxes) in element type t; cand: float
// scratch [B, N, 6]; dets [B, K, 6] float whatever t is; count [B] int32.  Two launches: one thread per
// candidate decodes, then one block per sample selects (greedy, class-aware NMS for yolo).
void detections(DType t, const DetectArgs& a, const void* x0, const void* x1, float* cand, float* dets, int32_t* count,
                cudaStream_t s);

}  // namespace sluice::cuda
