// sluice.Detections on the CUDA engine against the CPU engine: the DETR decode (softmax, best real
// class, boxes to pixels), RT-DETR's sigmoid over queries x classes, and the YOLO decode with
// class-aware NMS in both YOLO layouts, with thousands of overlapping candidates (the selection
// loop, its block-wide arg-max and the suppression all run) and a K that cuts the list.  At fp32
// the counts and every row agree (the decode is the same code, the IoU is rounded step by step on
// both).  At bf16 the rows are compared with the CPU's float decode of the same bf16 raw values:
// the step itself must add no rounding.
#include <cstdlib>
#include <filesystem>

#include "gpu_test_util.h"
#include "model/onnx_loader.h"
#include "model/prepare.h"

using namespace sluice;
using namespace sluice::gputest;

namespace {

Node& add_detections(GraphBuilder& b, std::vector<std::string> in, const std::string& format, int64_t batch, int64_t k,
                     float thr, float iou) {
  Node& n = b.node("Detections", std::move(in), {f32("dets", {batch, k, 6}), typed("count", DType::I32, {batch})}, "sluice");
  set_string(n, "format", format);
  set_int(n, "max_detections", k);
  set_float(n, "score_threshold", thr);
  set_float(n, "iou_threshold", iou);
  set_int(n, "width", 640);
  set_int(n, "height", 480);
  b.output("dets").output("count");
  return n;
}

CompareOptions unit_range() {
  CompareOptions c;
  c.lo = 0.f;  // boxes of positive size, scores in [0, 1]
  c.hi = 1.f;
  return c;
}

TEST(CudaDetections, YoloChannelsFirstWithNmsMatchesCpu) {
  GraphBuilder b({3, 4 + 5, 3000});
  add_detections(b, {"x"}, "yolo", 3, 100, 0.5f, 0.45f);
  expect_matches_cpu(b.g, Precision::FP32, unit_range());
}

TEST(CudaDetections, YoloWithObjectnessAndASmallKMatchesCpu) {
  GraphBuilder b({2, 2500, 5 + 7});
  add_detections(b, {"x"}, "yolo", 2, 7, 0.2f, 0.3f);
  expect_matches_cpu(b.g, Precision::FP32, unit_range());
}

TEST(CudaDetections, Yolov10FinalRowsMatchCpu) {
  // [2, 300, 6] final rows (x1, y1, x2, y2, score, class): class = floor(6 * u) of a sixth column
  // in [0, 1), kept as a float index; threshold, order and K without suppression.
  GraphBuilder b({2, 300, 6});
  b.constant_i("s0", {1}, {0}).constant_i("e0", {1}, {5}).constant_i("s1", {1}, {5}).constant_i("e1", {1}, {6});
  b.constant_i("ax", {1}, {2});
  b.constant_f("six", {1}, {6.f});
  b.node("Slice", {"x", "s0", "e0", "ax"}, {f32("fields", {2, 300, 5})});
  b.node("Slice", {"x", "s1", "e1", "ax"}, {f32("u", {2, 300, 1})});
  b.node("Mul", {"u", "six"}, {f32("u6", {2, 300, 1})});
  b.node("Floor", {"u6"}, {f32("cls", {2, 300, 1})});
  set_int(b.node("Concat", {"fields", "cls"}, {f32("rows", {2, 300, 6})}), "axis", 2);
  add_detections(b, {"rows"}, "yolov10", 2, 100, 0.3f, 0.45f);
  expect_matches_cpu(b.g, Precision::FP32, unit_range());
}

TEST(CudaDetections, DetrDecodeMatchesCpu) {
  // x [2, 300, 96]: class logits [.., 0:92) (91 classes + no object), boxes sigmoid([92, 96)).
  GraphBuilder b({2, 300, 96});
  b.constant_i("s0", {1}, {0}).constant_i("e0", {1}, {92}).constant_i("s1", {1}, {92}).constant_i("e1", {1}, {96});
  b.constant_i("ax", {1}, {2});
  b.node("Slice", {"x", "s0", "e0", "ax"}, {f32("raw_logits", {2, 300, 92})});
  b.constant_f("ten", {1}, {10.f});
  b.node("Mul", {"raw_logits", "ten"}, {f32("logits", {2, 300, 92})});  // spread the scores
  b.node("Slice", {"x", "s1", "e1", "ax"}, {f32("raw_boxes", {2, 300, 4})});
  b.node("Sigmoid", {"raw_boxes"}, {f32("boxes", {2, 300, 4})});
  add_detections(b, {"logits", "boxes"}, "detr", 2, 50, 0.05f, 0.45f);
  CompareOptions c;
  c.lo = -1.f;
  c.hi = 1.f;
  expect_matches_cpu(b.g, Precision::FP32, c);
}

TEST(CudaDetections, RtDetrSigmoidQueriesMatchCpu) {
  // x [2, 300, 84]: logits [.., 0:80) (sigmoid-scored), boxes sigmoid([80, 84)): 24,000 candidates.
  GraphBuilder b({2, 300, 84});
  b.constant_i("s0", {1}, {0}).constant_i("e0", {1}, {80}).constant_i("s1", {1}, {80}).constant_i("e1", {1}, {84});
  b.constant_i("ax", {1}, {2});
  b.constant_f("four", {1}, {4.f});
  b.node("Slice", {"x", "s0", "e0", "ax"}, {f32("raw_logits", {2, 300, 80})});
  b.node("Mul", {"raw_logits", "four"}, {f32("logits", {2, 300, 80})});
  b.node("Slice", {"x", "s1", "e1", "ax"}, {f32("raw_boxes", {2, 300, 4})});
  b.node("Sigmoid", {"raw_boxes"}, {f32("boxes", {2, 300, 4})});
  add_detections(b, {"logits", "boxes"}, "rtdetr", 2, 100, 0.9f, 0.45f);
  CompareOptions c;
  c.lo = -1.f;
  c.hi = 1.f;
  expect_matches_cpu(b.g, Precision::FP32, c);
}

// At bf16 the model's raw outputs are bf16 numbers, but the step adds no rounding of its own:
// the stored rows are the float decode and selection of those very values.  The engine's raw
// prediction here is bf16(bf16(x) * scale) (the Mul rounds its product to bf16; 640, 128 and 1 are
// exact in bf16), computed on the host and decoded by the CPU engine in float: every box and score
// must agree to float rounding (1e-6 of the 640 px range, 0.6 ms px).  Rows written in the compute
// type were off by up to 2 px (bf16 keeps 8 bits: steps of 4 px above 512) and scores by 2e-3.
TEST(CudaDetections, Bf16RowsAreTheFloatDecodeOfTheBf16RawOutputs) {
  constexpr int64_t kBatch = 2, kFields = 4 + 5, kN = 3000;
  std::vector<float> scale(kFields, 1.f);
  scale[0] = scale[1] = 640.f;
  scale[2] = scale[3] = 128.f;
  GraphBuilder b({kBatch, kFields, kN});
  b.constant_f("scale", {1, kFields, 1}, scale);
  b.node("Mul", {"x", "scale"}, {f32("pred", {kBatch, kFields, kN})});
  add_detections(b, {"pred"}, "yolo", kBatch, 100, 0.5f, 0.45f);
  GraphBuilder d({kBatch, kFields, kN});
  add_detections(d, {"x"}, "yolo", kBatch, 100, 0.5f, 0.45f);
  const Graph decode_only = d.g;
  CompareOptions c = unit_range();
  c.tol = 1e-6;
  expect_matches_reference(b.g, Precision::BF16, [&](const Tensor& x) {
    Tensor raw(DType::F32, x.shape);
    for (int64_t i = 0; i < x.numel(); ++i) {
      const float s = scale[static_cast<std::size_t>((i / kN) % kFields)];
      raw.data<float>()[i] = round_to(Precision::BF16, round_to(Precision::BF16, x.data<float>()[i]) * s);
    }
    return run_cpu(decode_only, raw);
  }, c);
}

// Whole prepared models with the heads prepare_graph puts behind them, at fp32: the tiny
// YOLO-style detector of tests/data/detect and the zoo's CLIP (a batch-1 export re-specialized to
// batch 3) with its normalised embedding.  (The zoo's random-weight DETR gives all its queries
// scores within 1e-7 of each other, so its row order is rounding; DetrDecodeMatchesCpu above
// spreads the scores instead.)
std::string repo_file(const std::string& rel) {
  const char* root = std::getenv("SLUICE_ROOT");
  return (std::filesystem::path(root ? root : SLUICE_SOURCE_DIR) / rel).string();
}

Graph prepared(const std::string& rel, int64_t size, OutputSpec spec) {
  PrepareOptions po;
  po.batch_size = 3;
  po.sample_shape = {3, size, size};
  po.outputs = {spec};
  return prepare_graph(load_onnx(repo_file(rel)), po);
}

TEST(CudaDetections, PreparedYoloDetectorMatchesCpu) {
  OutputSpec s;
  s.name = "detections";
  s.kind = OutputSpec::Kind::Detections;
  s.detection.format = "yolo";
  s.detection.score_threshold = 0.5f;
  expect_matches_cpu(prepared("tests/data/detect/yolo_v8.onnx", 64, s), Precision::FP32, unit_range());
}

TEST(CudaEmbedding, PreparedClipEmbeddingMatchesCpu) {
  OutputSpec s;
  s.name = "embedding";
  s.kind = OutputSpec::Kind::Embedding;
  CompareOptions c = unit_range();
  c.tol = 1e-4;
  expect_matches_cpu(prepared("tests/data/zoo/hf_clip_vision.torchscript.onnx", 32, s), Precision::FP32, c);
}

}  // namespace
