#pragma once
// sluice.Detections: a detector's raw outputs to a fixed-size list of boxes per sample.
//
//   inputs   detr: class logits [B, Q, C+1] (the last class is "no object") and boxes [B, Q, 4]
//                  (cx, cy, w, h as fractions of the input);
//            rtdetr: class logits [B, Q, C] scored by sigmoid (RT-DETR, Deformable DETR) and boxes
//                  [B, Q, 4] as detr's;
//            yolo: one [B, 4+C, N] (cx, cy, w, h in input pixels, then C class scores: the
//                  ultralytics v8+ export), [B, N, 5+C] with C >= 2 (boxes, objectness, class
//                  scores: v5-style) or [B, N, 6] (final rows, as yolov10);
//            yolov5: [B, N, 5+C], one class included;
//            yolov10: [B, N, 6] final rows x1, y1, x2, y2 in input pixels, score, class (YOLOv10's
//                  and other end-to-end exports, already free of duplicates)
//   attrs    format ("detr" | "rtdetr" | "yolo" | "yolov5" | "yolov10" | "auto"), score_threshold, iou_threshold, max_detections (K),
//            width, height (the input's size in pixels: DETR's boxes are scaled by it)
//   outputs  detections [B, K, 6] float (x1, y1, x2, y2 in input pixels, score, class), sorted by
//            score (ties: the lower candidate first), rows past the count zero; count [B] int32
//
// Each candidate's score and class: detr: softmax over C+1, the best of the first C; rtdetr: every
// (query, class) pair is a candidate, score sigmoid(logit) (transformers' focal-loss post-processing:
// the top K over queries x classes); yolo: the best
// class score (times the objectness in the [B, N, 5+C] layout); yolov10: the row's own.  Candidates whose score exceeds the
// threshold are taken in score order; yolo drops any that overlap an already kept box of the same
// class by IoU > iou_threshold (greedy class-aware NMS, as torchvision.ops.batched_nms); detr,
// rtdetr and yolov10 keep them all (as transformers' post-processing; yolov10's model has done its own selection).  The CPU and CUDA engines share this contract.
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace sluice {

struct DetectionLayout {
  enum class Kind { Detr, YoloChannelsFirst, YoloObjectness, QuerySigmoid, YoloFinal };
  Kind kind = Kind::Detr;
  int64_t batch = 0, candidates = 0, classes = 0;  // QuerySigmoid: candidates = queries x classes
  bool nms() const { return kind == Kind::YoloChannelsFirst || kind == Kind::YoloObjectness; }
  // Whether the node reads two outputs (class logits and boxes).
  bool pair() const { return kind == Kind::Detr || kind == Kind::QuerySigmoid; }
};

// The layout the input shapes give for `format`; InputError naming the shapes found and the ones
// the format needs when they do not fit.
DetectionLayout detection_layout(const std::string& format, const std::vector<Shape>& inputs);

// The format name that resolves to exactly this layout again (the attribute prepare writes).
const char* detection_kind_format(DetectionLayout::Kind k);

// One candidate, decoded.
struct DetectionCandidate {
  float box[4];  // x1, y1, x2, y2
  float score;
  int32_t cls;
};

// Greedy selection: candidates with score > threshold in score order (ties by index), at most k,
// and with nms the class-aware suppression above.  Returns the indices chosen.  The CPU engine's
// kernel and the tests' reference; the CUDA kernel implements the same rule.
std::vector<int64_t> select_detections(const std::vector<DetectionCandidate>& cands, float score_threshold,
                                       bool nms, float iou_threshold, int64_t k);

// The IoU the suppression uses (torchvision's box_iou, in float).
float box_iou(const float* a, const float* b);

}  // namespace sluice
