#include "model/detections.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"

namespace sluice {

namespace {

bool detr_fits(const std::vector<Shape>& in) {
  if (in.size() < 2 || in[0].size() != 3 || in[1].size() != 3) return false;
  return in[0][0] == in[1][0] && in[0][1] == in[1][1] && in[0][2] >= 2 && in[1][2] == 4 && in[0][1] >= 1;
}

// [B, 4+C, N] when the second axis is the shorter (N candidates outnumber 4+C rows), else [B, N, 6]
// final rows (an end-to-end export; a one-class v5 model of that shape needs the yolov5 format), else
// [B, N, 5+C].
bool yolo_fits(const std::string& format, const std::vector<Shape>& in, DetectionLayout::Kind* kind) {
  if (in.empty() || in[0].size() != 3) return false;
  const int64_t a = in[0][1], b = in[0][2];
  if (format == "yolov10" || format == "yolov5") {
    *kind = format == "yolov10" ? DetectionLayout::Kind::YoloFinal : DetectionLayout::Kind::YoloObjectness;
    // yolov5: the channels-first reading (N > 5+C on the last axis) excluded, as for yolo.
    return a >= 1 && (format == "yolov10" ? b == 6 : b >= 6 && !(a >= 5 && b > a));
  }
  if (a >= 5 && b > a) {
    *kind = DetectionLayout::Kind::YoloChannelsFirst;
    return true;
  }
  if (b == 6 && a >= 1) {
    *kind = DetectionLayout::Kind::YoloFinal;
    return true;
  }
  if (b >= 7 && a >= 1) {
    *kind = DetectionLayout::Kind::YoloObjectness;
    return true;
  }
  return false;
}

std::string shapes_text(const std::vector<Shape>& in) {
  std::string s;
  for (const auto& sh : in) s += (s.empty() ? "" : " and ") + shape_str(sh);
  return s.empty() ? "none" : s;
}

}  // namespace

const char* detection_kind_format(DetectionLayout::Kind k) {
  switch (k) {
    case DetectionLayout::Kind::Detr: return "detr";
    case DetectionLayout::Kind::YoloChannelsFirst: return "yolo";
    case DetectionLayout::Kind::YoloObjectness: return "yolov5";
    case DetectionLayout::Kind::QuerySigmoid: return "rtdetr";
    case DetectionLayout::Kind::YoloFinal: return "yolov10";
  }
  return "?";
}

DetectionLayout detection_layout(const std::string& format, const std::vector<Shape>& in) {
  DetectionLayout l;
  const bool detr = (format == "detr" || format == "auto") && detr_fits(in);
  // Sigmoid-scored queries have no "no object" class: C >= 1 rather than C+1 >= 2.
  const bool sigmoid = format == "rtdetr" && in.size() >= 2 && in[0].size() == 3 && in[1].size() == 3 &&
                       in[0][0] == in[1][0] && in[0][1] == in[1][1] && in[0][1] >= 1 && in[0][2] >= 1 && in[1][2] == 4;
  DetectionLayout::Kind yk{};
  const bool yolo = !detr && (format == "yolo" || format == "yolov5" || format == "yolov10" || format == "auto") &&
                    yolo_fits(format, in, &yk);
  if (format != "detr" && format != "rtdetr" && format != "yolo" && format != "yolov5" && format != "yolov10" &&
      format != "auto")
    throw UsageError(str("--detection-format '", format, "' is not one of detr, rtdetr, yolo, yolov5, yolov10, auto"));
  if (sigmoid) {
    l.kind = DetectionLayout::Kind::QuerySigmoid;
    l.batch = in[0][0];
    l.classes = in[0][2];
    l.candidates = in[0][1] * in[0][2];
  } else if (detr) {
    l.kind = DetectionLayout::Kind::Detr;
    l.batch = in[0][0];
    l.candidates = in[0][1];
    l.classes = in[0][2] - 1;
  } else if (yolo) {
    l.kind = yk;
    l.batch = in[0][0];
    const bool cf = yk == DetectionLayout::Kind::YoloChannelsFirst;
    l.candidates = cf ? in[0][2] : in[0][1];
    l.classes = cf ? in[0][1] - 4 : yk == DetectionLayout::Kind::YoloFinal ? 0 : in[0][2] - 5;  // yolov10: classes unknown
  } else {
    const char* detr_need = "two outputs [B, Q, C+1] (class logits, last = no object) and [B, Q, 4] (boxes)";
    const char* yolo_need = "one output [B, 4+C, N] (N > 4+C), [B, N, 5+C] or [B, N, 6] (final rows)";
    const char* v5_need = "one output [B, N, 5+C] (boxes, objectness, class scores)";
    const char* v10_need = "one output [B, N, 6] (x1, y1, x2, y2, score, class)";
    const char* rtdetr_need = "two outputs [B, Q, C] (class logits, sigmoid-scored) and [B, Q, 4] (boxes)";
    const std::string need = format == "detr"     ? std::string(detr_need)
                             : format == "rtdetr" ? std::string(rtdetr_need)
                             : format == "yolo"   ? std::string(yolo_need)
                             : format == "yolov5" ? std::string(v5_need)
                             : format == "yolov10" ? std::string(v10_need)
                                                  : str(detr_need, " (detr), or ", yolo_need, " (yolo)");
    throw InputError(str("--outputs detections --detection-format ", format, ": the model's outputs have shape(s) ",
                         shapes_text(in), "; the format needs ", need),
                     "pick the format the detector was exported in (--detection-format), or the output it reads (--model-output)");
  }
  return l;
}

float box_iou(const float* a, const float* b) {
  const float area_a = (a[2] - a[0]) * (a[3] - a[1]);
  const float area_b = (b[2] - b[0]) * (b[3] - b[1]);
  const float w = std::max(0.f, std::min(a[2], b[2]) - std::max(a[0], b[0]));
  const float h = std::max(0.f, std::min(a[3], b[3]) - std::max(a[1], b[1]));
  const float inter = w * h;
  const float uni = area_a + area_b - inter;
  return uni > 0.f ? inter / uni : 0.f;
}

std::vector<int64_t> select_detections(const std::vector<DetectionCandidate>& c, float score_threshold, bool nms,
                                       float iou_threshold, int64_t k) {
  std::vector<int64_t> order;
  for (int64_t i = 0; i < static_cast<int64_t>(c.size()); ++i)
    if (c[i].score > score_threshold) order.push_back(i);
  std::stable_sort(order.begin(), order.end(), [&](int64_t p, int64_t q) { return c[p].score > c[q].score; });
  std::vector<int64_t> kept;
  for (int64_t i : order) {
    if (static_cast<int64_t>(kept.size()) >= k) break;
    bool drop = false;
    if (nms)
      for (int64_t j : kept)
        if (c[j].cls == c[i].cls && box_iou(c[j].box, c[i].box) > iou_threshold) {
          drop = true;
          break;
        }
    if (!drop) kept.push_back(i);
  }
  return kept;
}

}  // namespace sluice
