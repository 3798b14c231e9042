// sluice.Detections on the CPU engine with hand-worked cases (the decode of each layout, the
// threshold, class-aware suppression, the K cap and zero rows), and the refusal of shapes that do
// not fit a format.
#include <gtest/gtest.h>

#include "model/detections.h"
#include "test_cpu_util.h"

using namespace sluice;
using namespace sluice::cputest;

namespace {

Node& detections(GraphBuilder& gb, std::vector<std::string> in, const std::string& format, int64_t batch, int64_t k,
                 float thr = 0.25f, float iou = 0.45f) {
  Node& n = gb.node("Detections", std::move(in), {f32("dets", {batch, k, 6}), typed("count", DType::I32, {batch})},
                    "sluice");
  n.attrs["format"] = Attribute::of_string(format);
  n.attrs["max_detections"] = Attribute::of_int(k);
  n.attrs["score_threshold"] = Attribute::of_float(thr);
  n.attrs["iou_threshold"] = Attribute::of_float(iou);
  n.attrs["width"] = Attribute::of_int(200);
  n.attrs["height"] = Attribute::of_int(100);
  gb.output("dets").output("count");
  return n;
}

TEST(Detections, YoloSuppressesOverlapsOfTheSameClassOnly) {
  // [1, 4+2, 8] channels first (N > 4+C tells the layout): candidate i is column i.
  //   0: box (10,10,20,20) class 0, score 0.9
  //   1: box (11,10,21,20) class 0, score 0.8 -> IoU with 0 is 90/110 > 0.45: suppressed
  //   2: box (11,10,21,20) class 1, score 0.7 -> another class: kept
  //   3: score 0.2, below the threshold; 4-7: score 0
  const std::vector<float> x = {
      15, 16, 16, 50, 0, 0, 0, 0,           // cx
      15, 15, 15, 50, 0, 0, 0, 0,           // cy
      10, 10, 10, 4, 1, 1, 1, 1,            // w
      10, 10, 10, 4, 1, 1, 1, 1,            // h
      0.9f, 0.8f, 0.1f, 0.2f, 0, 0, 0, 0,   // class 0
      0.1f, 0.2f, 0.7f, 0.1f, 0, 0, 0, 0,   // class 1
  };
  GraphBuilder gb({1, 6, 8});
  detections(gb, {"x"}, "yolo", 1, 3);
  const auto out = run_bytes(gb.g, x.data());
  EXPECT_EQ(as<int32_t>(out[1]), (std::vector<int32_t>{2}));
  EXPECT_EQ(as<float>(out[0]), (std::vector<float>{10, 10, 20, 20, 0.9f, 0, 11, 10, 21, 20, 0.7f, 1, 0, 0, 0, 0, 0, 0}));
}

TEST(Detections, YoloWithObjectnessMultipliesTheScoresAndKCapsTheList) {
  // [1, 3, 5+1]: far-apart boxes, scores obj * cls = 0.4, 0.72, 0.3.
  const std::vector<float> x = {10, 10, 4, 4, 0.5f, 0.8f,  //
                                50, 50, 4, 4, 0.9f, 0.8f,  //
                                90, 90, 4, 4, 1.0f, 0.3f};
  GraphBuilder gb({1, 3, 6});
  detections(gb, {"x"}, "yolov5", 1, 2);  // one class: [B, N, 6] reads as final rows unless asked
  const auto out = run_bytes(gb.g, x.data());
  EXPECT_EQ(as<int32_t>(out[1]), (std::vector<int32_t>{2}));
  const std::vector<float> d = as<float>(out[0]);
  EXPECT_FLOAT_EQ(d[4], 0.9f * 0.8f);
  EXPECT_FLOAT_EQ(d[0], 48);
  EXPECT_FLOAT_EQ(d[10], 0.5f * 0.8f);
}

TEST(Detections, Yolov10FinalRowsAreThresholdedAndSortedWithoutSuppression) {
  // [1, 4, 6] rows x1, y1, x2, y2, score, class (a class index as a float): rows 0 and 2 overlap
  // fully with one class and are both kept (the model has done its own selection); row 3 is below
  // the threshold.  Sorted by score, the K = 3 rows; the last row stays zero.
  const std::vector<float> x = {10, 10, 20, 20, 0.6f, 2,  //
                                50, 50, 60, 70, 0.9f, 0,  //
                                10, 10, 20, 20, 0.7f, 2,  //
                                0, 0, 5, 5, 0.1f, 1};
  for (const char* format : {"yolov10", "yolo", "auto"}) {
    SCOPED_TRACE(format);
    GraphBuilder gb({1, 4, 6});
    detections(gb, {"x"}, format, 1, 4);
    const auto out = run_bytes(gb.g, x.data());
    EXPECT_EQ(as<int32_t>(out[1]), (std::vector<int32_t>{3}));
    EXPECT_EQ(as<float>(out[0]), (std::vector<float>{50, 50, 60, 70, 0.9f, 0, 10, 10, 20, 20, 0.7f, 2,  //
                                                     10, 10, 20, 20, 0.6f, 2, 0, 0, 0, 0, 0, 0}));
  }
}

TEST(Detections, DetrTakesTheBestRealClassAndScalesBoxesToPixels) {
  // One query: logits over 2 classes + no-object; softmax gives (e^2, e^1, e^3) / sum: class 0
  // has 0.2447; the box (0.5, 0.5, 0.2, 0.4) of a 200 x 100 input is (80, 30, 120, 70).
  const std::vector<float> x = {2, 1, 3, 0.5f, 0.5f, 0.2f, 0.4f};
  GraphBuilder gb({1, 1, 7});
  gb.constant_i("s0", {1}, {0}).constant_i("e0", {1}, {3}).constant_i("s1", {1}, {3}).constant_i("e1", {1}, {7});
  gb.constant_i("ax", {1}, {2});
  gb.node("Slice", {"x", "s0", "e0", "ax"}, {f32("logits", {1, 1, 3})});
  gb.node("Slice", {"x", "s1", "e1", "ax"}, {f32("boxes", {1, 1, 4})});
  detections(gb, {"logits", "boxes"}, "detr", 1, 2, 0.2f);
  const auto out = run_bytes(gb.g, x.data());
  EXPECT_EQ(as<int32_t>(out[1]), (std::vector<int32_t>{1}));
  const std::vector<float> d = as<float>(out[0]);
  const double sum = std::exp(2.0) + std::exp(1.0) + std::exp(3.0);
  EXPECT_NEAR(d[4], std::exp(2.0) / sum, 1e-6);
  EXPECT_EQ(d[5], 0);
  EXPECT_NEAR(d[0], 80, 1e-4);
  EXPECT_NEAR(d[1], 30, 1e-4);
  EXPECT_NEAR(d[2], 120, 1e-4);
  EXPECT_NEAR(d[3], 70, 1e-4);
  for (int j = 6; j < 12; ++j) EXPECT_EQ(d[j], 0);
}

TEST(Detections, RtDetrScoresEveryQueryAndClassBySigmoid) {
  // Two queries x two classes, logits (2, -1 | 0, 3): candidates in score order (q1 c1) 0.9526,
  // (q0 c0) 0.8808, (q1 c0) 0.5, (q0 c1) 0.2689; K = 3 and the threshold 0.4 keep the first three.
  const std::vector<float> x = {2, -1, 0.5f, 0.5f, 0.2f, 0.2f,  //
                                0, 3, 0.25f, 0.5f, 0.1f, 0.4f};
  GraphBuilder gb({1, 2, 6});
  gb.constant_i("s0", {1}, {0}).constant_i("e0", {1}, {2}).constant_i("s1", {1}, {2}).constant_i("e1", {1}, {6});
  gb.constant_i("ax", {1}, {2});
  gb.node("Slice", {"x", "s0", "e0", "ax"}, {f32("logits", {1, 2, 2})});
  gb.node("Slice", {"x", "s1", "e1", "ax"}, {f32("boxes", {1, 2, 4})});
  detections(gb, {"logits", "boxes"}, "rtdetr", 1, 3, 0.4f);
  const auto out = run_bytes(gb.g, x.data());
  EXPECT_EQ(as<int32_t>(out[1]), (std::vector<int32_t>{3}));
  const std::vector<float> d = as<float>(out[0]);
  EXPECT_NEAR(d[4], 1 / (1 + std::exp(-3.0)), 1e-6);
  EXPECT_EQ(d[5], 1);
  EXPECT_NEAR(d[0], (0.25 - 0.05) * 200, 1e-4);  // query 1's box, 200 x 100 input
  EXPECT_NEAR(d[10], 1 / (1 + std::exp(-2.0)), 1e-6);
  EXPECT_EQ(d[11], 0);
  EXPECT_NEAR(d[16], 0.5, 1e-6);
  EXPECT_EQ(d[17], 0);
  EXPECT_NEAR(d[12], (0.25 - 0.05) * 200, 1e-4);  // (q1 c0): query 1's box again
}

TEST(Detections, ShapesThatDoNotFitAFormatAreRefusedNamingBoth) {
  try {
    detection_layout("detr", {{8, 1000}});
    FAIL() << "a classifier's [8, 1000] passed as DETR";
  } catch (const InputError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("[8,1000]"), std::string::npos) << m;
    EXPECT_NE(m.find("[B, Q, C+1]"), std::string::npos) << m;
  }
  EXPECT_THROW(detection_layout("yolo", {{8, 3, 4}}), InputError);
  EXPECT_EQ(detection_layout("auto", {{2, 84, 8400}}).kind, DetectionLayout::Kind::YoloChannelsFirst);
  EXPECT_EQ(detection_layout("auto", {{2, 25200, 85}}).kind, DetectionLayout::Kind::YoloObjectness);
  EXPECT_EQ(detection_layout("auto", {{2, 100, 92}, {2, 100, 4}}).kind, DetectionLayout::Kind::Detr);
  EXPECT_EQ(detection_layout("auto", {{2, 100, 92}, {2, 100, 4}}).classes, 91);
  // Sigmoid-scored queries only when asked: their shapes are DETR's minus the no-object class.
  EXPECT_EQ(detection_layout("rtdetr", {{2, 300, 80}, {2, 300, 4}}).kind, DetectionLayout::Kind::QuerySigmoid);
  EXPECT_EQ(detection_layout("rtdetr", {{2, 300, 80}, {2, 300, 4}}).candidates, 300 * 80);
  EXPECT_THROW(detection_layout("rtdetr", {{2, 84, 8400}}), InputError);
  // [B, N, 6]: final rows (YOLOv10) for yolo and auto; a one-class v5 model only when asked.
  EXPECT_EQ(detection_layout("auto", {{2, 300, 6}}).kind, DetectionLayout::Kind::YoloFinal);
  EXPECT_EQ(detection_layout("yolo", {{2, 300, 6}}).kind, DetectionLayout::Kind::YoloFinal);
  EXPECT_EQ(detection_layout("yolov10", {{2, 300, 6}}).candidates, 300);
  EXPECT_EQ(detection_layout("yolov5", {{2, 25200, 6}}).kind, DetectionLayout::Kind::YoloObjectness);
  EXPECT_EQ(detection_layout("yolov5", {{2, 25200, 6}}).classes, 1);
  EXPECT_EQ(detection_layout("yolo", {{2, 25200, 7}}).kind, DetectionLayout::Kind::YoloObjectness);
  try {
    detection_layout("yolov10", {{2, 84, 8400}});
    FAIL() << "a v8 prediction passed as final rows";
  } catch (const InputError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("[2,84,8400]"), std::string::npos) << m;
    EXPECT_NE(m.find("[B, N, 6] (x1, y1, x2, y2, score, class)"), std::string::npos) << m;
  }
  EXPECT_THROW(detection_layout("yolov5", {{2, 84, 8400}}), InputError);
}

}  // namespace
