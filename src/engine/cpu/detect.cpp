// sluice.Detections (model/detections.h): decode every candidate of a sample, then the greedy
// selection (with class-aware NMS for yolo) of model/detections.cpp, one sample per task.
#include <cstring>

#include "engine/cpu/kernel.h"
#include "model/detection_decode.h"
#include "model/detections.h"

namespace sluice::cpu {

namespace {

std::unique_ptr<Kernel> make_detections(const KernelInit& init) {
  std::vector<Shape> shapes;
  for (std::size_t i = 0; i < init.num_inputs(); ++i) {
    init.require_float(i);
    shapes.push_back(init.input(i).shape);
  }
  const DetectionLayout l = detection_layout(init.node.get_string("format", "auto"), shapes);
  const int64_t k = init.node.get_int("max_detections", 100);
  const float thr = init.node.get_float("score_threshold", 0.25f);
  const float iou = init.node.get_float("iou_threshold", 0.45f);
  const float width = static_cast<float>(init.node.get_int("width", 1));
  const float height = static_cast<float>(init.node.get_int("height", 1));
  init.require_dtype(init.output(0), DType::F32);
  init.require_dtype(init.output(1), DType::I32);
  if (init.output(0).shape != Shape{l.batch, k, 6}) init.fail("detections output ", shape_str(init.output(0).shape), " is not [B, K, 6]");
  return lambda_kernel([=](const KernelArgs& a) {
    const float* x0 = static_cast<const float*>(a.in[0]);
    const float* x1 = l.pair() ? static_cast<const float*>(a.in[1]) : nullptr;
    float* dets = static_cast<float*>(a.out[0]);
    int32_t* count = static_cast<int32_t*>(a.out[1]);
    const int64_t n = l.candidates, c = l.classes;
    a.pool.parallel_for(l.batch, [&](int64_t b, int) {
      std::vector<DetectionCandidate> cand(static_cast<std::size_t>(n));
      for (int64_t i = 0; i < n; ++i) {
        DetectionCandidate& d = cand[static_cast<std::size_t>(i)];
        if (l.kind == DetectionLayout::Kind::QuerySigmoid) {
          const int64_t q = i / c;
          const float* bx = x1 + (b * (n / c) + q) * 4;
          decode_query_sigmoid(x0[b * n + i], static_cast<int32_t>(i % c), [bx](int64_t j) { return bx[j]; }, width,
                               height, d.box, &d.score, &d.cls);
        } else if (l.kind == DetectionLayout::Kind::Detr) {
          const float* lg = x0 + (b * n + i) * (c + 1);
          const float* bx = x1 + (b * n + i) * 4;
          decode_detr([lg](int64_t j) { return lg[j]; }, [bx](int64_t j) { return bx[j]; }, c, width, height, d.box,
                      &d.score, &d.cls);
        } else if (l.kind == DetectionLayout::Kind::YoloFinal) {
          const float* p = x0 + (b * n + i) * 6;
          decode_final([p](int64_t j) { return p[j]; }, d.box, &d.score, &d.cls);
        } else if (l.kind == DetectionLayout::Kind::YoloChannelsFirst) {
          const float* p = x0 + b * (4 + c) * n + i;  // field j at p[j * n]
          decode_yolo([p, n](int64_t j) { return p[j * n]; }, c, false, d.box, &d.score, &d.cls);
        } else {
          const float* p = x0 + (b * n + i) * (5 + c);
          decode_yolo([p](int64_t j) { return p[j]; }, c, true, d.box, &d.score, &d.cls);
        }
      }
      const std::vector<int64_t> kept =
          select_detections(cand, thr, l.nms(), iou, k);
      float* out = dets + b * k * 6;
      std::memset(out, 0, static_cast<std::size_t>(k) * 6 * sizeof(float));
      for (std::size_t r = 0; r < kept.size(); ++r) {
        const DetectionCandidate& d = cand[static_cast<std::size_t>(kept[r])];
        float* row = out + r * 6;
        for (int j = 0; j < 4; ++j) row[j] = d.box[j];
        row[4] = d.score;
        row[5] = static_cast<float>(d.cls);
      }
      count[b] = static_cast<int32_t>(kept.size());
    });
  });
}

}  // namespace

void add_detect_kernels(KernelTable& t) { t["sluice.Detections"] = make_detections; }

}  // namespace sluice::cpu
