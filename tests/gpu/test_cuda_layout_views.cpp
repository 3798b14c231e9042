// Transposes between the two 4-D orders as views of channels-last tensors (ops_layout.cpp,
// SLUICE_CUDA_LAYOUT_VIEWS): a ConvNeXt block on odd spatial sizes (packed and unpacked channel
// counts) against the CPU engine at every precision, with the views on and off; which steps the
// builder makes of it (no device needed); and the zoo's ConvNeXt exports prepared as a job
// prepares them (model/fuse_layouts.cpp with it): no Transpose or LayerScale step left in a block.
#include <algorithm>

#include "gpu_test_util.h"
#include "support/zoo_model.h"

using namespace sluice;
using namespace sluice::gputest;
using sluice::testsupport::zoo_model;

namespace {

int count(const std::vector<std::string>& v, const std::string& k) { return static_cast<int>(std::count(v.begin(), v.end(), k)); }

// x [N, C, H, W] -> depthwise 7x7 (pad 3) -> Transpose (0, 2, 3, 1) -> LayerNormalization -> MatMul
// C -> 2C (+ bias) -> Relu -> MatMul 2C -> C (+ bias) -> Transpose (0, 3, 1, 2) -> Mul gamma [C, 1, 1]
// -> Add x -> depthwise 3x3 -> y: torchvision's CNBlock, read by the next block's convolution.
Graph block(int64_t n, int64_t c, int64_t h, int64_t w) {
  GraphBuilder b({n, c, h, w});
  const Shape nchw = {n, c, h, w}, nhwc = {n, h, w, c}, wide = {n, h, w, 2 * c};
  b.random_f("dw", {c, 1, 7, 7}, 1, -0.3f, 0.3f).random_f("dwb", {c}, 2);
  b.random_f("lng", {c}, 3, 0.5f, 1.5f).random_f("lnb", {c}, 4);
  b.random_f("w1", {c, 2 * c}, 5, -0.4f, 0.4f).random_f("b1", {2 * c}, 6);
  b.random_f("w2", {2 * c, c}, 7, -0.4f, 0.4f).random_f("b2", {c}, 8);
  b.random_f("gamma", {c, 1, 1}, 9, 0.2f, 1.f).random_f("dw2", {c, 1, 3, 3}, 10, -0.5f, 0.5f);
  Node& d = b.node("Conv", {"x", "dw", "dwb"}, {f32("d", nchw)});
  set_ints(d, "kernel_shape", {7, 7});
  set_ints(d, "pads", {3, 3, 3, 3});
  set_int(d, "group", c);
  set_ints(b.node("Transpose", {"d"}, {f32("dl", nhwc)}), "perm", {0, 2, 3, 1});
  set_float(b.node("LayerNormalization", {"dl", "lng", "lnb"}, {f32("ln", nhwc)}), "epsilon", 1e-6f);
  b.node("MatMul", {"ln", "w1"}, {f32("m1", wide)});
  b.node("Add", {"b1", "m1"}, {f32("a1", wide)});
  b.node("Relu", {"a1"}, {f32("r1", wide)});
  b.node("MatMul", {"r1", "w2"}, {f32("m2", nhwc)});
  b.node("Add", {"b2", "m2"}, {f32("a2", nhwc)});
  set_ints(b.node("Transpose", {"a2"}, {f32("br", nchw)}), "perm", {0, 3, 1, 2});
  b.node("Mul", {"gamma", "br"}, {f32("sc", nchw)});
  b.node("Add", {"sc", "x"}, {f32("s", nchw)});
  Node& d2 = b.node("Conv", {"s", "dw2"}, {f32("y", nchw)});
  set_ints(d2, "kernel_shape", {3, 3});
  set_ints(d2, "pads", {1, 1, 1, 1});
  set_int(d2, "group", c);
  b.output("y");
  return b.g;
}

class LayoutViews : public ::testing::TestWithParam<Precision> {};

}  // namespace

TEST(LayoutViewLowering, TheBlocksTransposesAreViewsOfTheChannelsLastTensors) {
  const Graph g = block(2, 24, 9, 7);
  const auto on = step_kinds(g, Precision::BF16);
  EXPECT_EQ(count(on, "Transpose"), 0);
  // The one layout change left is the NCHW graph output's.
  EXPECT_LE(count(on, "Layout"), 1);
  const auto off = step_kinds_with(g, Precision::BF16, "SLUICE_CUDA_LAYOUT_VIEWS", "0");
  EXPECT_EQ(count(off, "Transpose"), 2);
  EXPECT_GE(count(off, "Layout"), 2);
  // fp32 stays NCHW: the Transposes copy.
  EXPECT_EQ(count(step_kinds(g, Precision::FP32), "Transpose"), 2);
}

TEST_P(LayoutViews, AConvNextBlockMatchesTheCpuEngineWithAndWithoutTheViews) {
  for (const int64_t c : {24, 12}) {   // 8-channel packs, and the one-channel kernels
    SCOPED_TRACE(str(c, " channels"));
    const Graph g = block(3, c, 9, 7);
    expect_matches_cpu(g, GetParam());
    ScopedEnv copies("SLUICE_CUDA_LAYOUT_VIEWS", "0");
    expect_matches_cpu(g, GetParam());
  }
}

TEST(LayoutViewLowering, TheZoosConvNextBlocksKeepNoTransposeOrLayerScaleStep) {
  for (const std::string name : {"tv_convnext.torchscript", "tv_convnext.dynamo", "timm_convnext.torchscript",
                                 "timm_convnext.dynamo", "hf_convnext.torchscript"}) {
    SCOPED_TRACE(name);
    const Graph g = zoo_model(name);
    cuda::Builder b(g, Precision::BF16);
    b.lower_all();
    int depthwise = 0, layout = 0, mul = 0;
    std::vector<std::string> transposes;
    for (const auto& st : b.steps) {
      depthwise += st->kind == "Depthwise";
      layout += st->kind == "Layout";
      mul += st->kind == "Mul";
      if (st->kind == "Transpose") transposes.push_back(st->label());
    }
    std::printf("[ layouts ] %s: %d steps, %d Transpose, %d Layout, %d Mul, %d Depthwise\n", name.c_str(),
                static_cast<int>(b.steps.size()), static_cast<int>(transposes.size()), layout, mul, depthwise);
    EXPECT_GE(depthwise, 2);
    EXPECT_EQ(layout, 0);
    EXPECT_EQ(mul, 0);
    // The one Transpose left is the patch embedding's permutation of the image (model/fuse_patches.cpp).
    for (const auto& t : transposes) EXPECT_NE(t.find("/patch_move"), std::string::npos) << t;
  }
}

INSTANTIATE_TEST_SUITE_P(Precisions, LayoutViews,
                         ::testing::Values(Precision::FP32, Precision::TF32, Precision::FP16, Precision::BF16),
                         [](const ::testing::TestParamInfo<Precision>& i) { return std::string(precision_name(i.param)); });
