// cancel_transposes, fold_layer_scales and drop_empty_pads (model/fuse_layouts.cpp): a ConvNeXt
// block as torchvision, timm (1x1 convolutions as the MLP) and DINOv2 (LayerScale over tokens)
// write it, transpose chains that compose into another permutation, and Swin's pads of nothing;
// which nodes remain, and that the CPU engine gives the same outputs with and without the passes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "engine/engine.h"
#include "model/prepare.h"
#include "test_cpu_run.h"
#include "test_model_util.h"

using namespace sluice;
using sluice::test::count_ops;
using sluice::test::GraphBuilder;
using sluice::test::cpu_first_output;
using sluice::test::ramp;
using sluice::test::relative_difference;

namespace {

struct Prepared {
  Graph g;
  std::vector<float> y;
};

// g prepared at batch 3 with the two passes on or off, and its first output on a ramp input.
Prepared run(const Graph& model, const Shape& sample, bool passes) {
  setenv("SLUICE_CANCEL_TRANSPOSES", passes ? "1" : "0", 1);
  setenv("SLUICE_FOLD_SCALE", passes ? "1" : "0", 1);
  setenv("SLUICE_DROP_EMPTY_PADS", passes ? "1" : "0", 1);
  PrepareOptions o;
  o.batch_size = 3;
  o.sample_shape = sample;
  Prepared p{prepare_graph(model, o), {}};
  unsetenv("SLUICE_CANCEL_TRANSPOSES");
  unsetenv("SLUICE_FOLD_SCALE");
  unsetenv("SLUICE_DROP_EMPTY_PADS");
  p.y = cpu_first_output(p.g);
  return p;
}

Node& transpose(GraphBuilder& b, const std::string& x, const std::string& y, std::vector<int64_t> perm) {
  Node& t = b.node("Transpose", {x}, {y});
  t.attrs["perm"] = Attribute::of_ints(std::move(perm));
  return t;
}

void layernorm(GraphBuilder& b, const std::string& x, const std::string& y, int64_t c, uint32_t seed) {
  b.floats(y + "_g", {c}, ramp(static_cast<std::size_t>(c), seed)).floats(y + "_b", {c}, ramp(static_cast<std::size_t>(c), seed + 1));
  b.node("LayerNormalization", {x, y + "_g", y + "_b"}, {y}).attrs["epsilon"] = Attribute::of_float(1e-6f);
}

// torchvision's ConvNeXt: x [B, 3, 16, 12] -> 4x4/4 stem (a patch GEMM) and its LayerNorm2d ->
// one CNBlock on 8 channels: depthwise 3x3, permute, LayerNorm, Linear 8->16, Gelu, Linear 16->8,
// permute back, gamma [8, 1, 1] times the branch, plus the block's input.
GraphBuilder convnext_block() {
  GraphBuilder b;
  b.input("x", {-1, 3, 16, 12}).output("y");
  b.floats("stem_w", {8, 3, 4, 4}, ramp(384, 1)).floats("stem_b", {8}, ramp(8, 2));
  Node& stem = b.node("Conv", {"x", "stem_w", "stem_b"}, {"s"});
  stem.attrs["kernel_shape"] = Attribute::of_ints({4, 4});
  stem.attrs["strides"] = Attribute::of_ints({4, 4});
  transpose(b, "s", "s_last", {0, 2, 3, 1});
  layernorm(b, "s_last", "s_norm", 8, 3);
  transpose(b, "s_norm", "h", {0, 3, 1, 2});
  b.floats("dw_w", {8, 1, 3, 3}, ramp(72, 4)).floats("dw_b", {8}, ramp(8, 5));
  Node& dw = b.node("Conv", {"h", "dw_w", "dw_b"}, {"d"});
  dw.attrs["kernel_shape"] = Attribute::of_ints({3, 3});
  dw.attrs["pads"] = Attribute::of_ints({1, 1, 1, 1});
  dw.attrs["group"] = Attribute::of_int(8);
  transpose(b, "d", "d_last", {0, 2, 3, 1});
  layernorm(b, "d_last", "d_norm", 8, 6);
  b.floats("fc1_w", {8, 16}, ramp(128, 7)).floats("fc1_b", {16}, ramp(16, 8));
  b.floats("fc2_w", {16, 8}, ramp(128, 9)).floats("fc2_b", {8}, ramp(8, 10));
  b.node("MatMul", {"d_norm", "fc1_w"}, {"m1"});
  b.node("Add", {"fc1_b", "m1"}, {"a1"});   // the bias first, as TorchScript writes it
  b.node("Gelu", {"a1"}, {"g1"});
  b.node("MatMul", {"g1", "fc2_w"}, {"m2"});
  b.node("Add", {"fc2_b", "m2"}, {"a2"});
  transpose(b, "a2", "branch", {0, 3, 1, 2});
  b.floats("gamma", {8, 1, 1}, ramp(8, 11));
  b.node("Mul", {"gamma", "branch"}, {"scaled"});
  b.node("Add", {"scaled", "h"}, {"y"});
  return b;
}

}  // namespace

TEST(FuseLayouts, TorchvisionsConvNextBlockLosesItsLayerScaleAndTheStemsLayoutRoundTrip) {
  const GraphBuilder b = convnext_block();
  const Prepared with = run(b.g, {3, 16, 12}, true), without = run(b.g, {3, 16, 12}, false);
  EXPECT_EQ(count_ops(with.g, "Mul"), 0);
  EXPECT_EQ(count_ops(without.g, "Mul"), 1);
  // Without: the patch permutation, the patch GEMM's Transpose back to channels-first, the stem's
  // two and the block's two.  With: the Transpose (0, 2, 1), the grid Reshape and the stem's
  // Transpose (0, 2, 3, 1) are one Reshape of the product.
  EXPECT_EQ(count_ops(without.g, "Transpose"), 6);
  EXPECT_EQ(count_ops(with.g, "Transpose"), 4);
  EXPECT_EQ(count_ops(with.g, "MatMul"), 3);
  ASSERT_EQ(with.y.size(), without.y.size());
  EXPECT_LE(relative_difference(with.y, without.y), 1e-5);
}

TEST(FuseLayouts, ALayerScaleAfterAOneByOneConvolutionFoldsAndTheConvolutionTakesTheResidual) {
  // timm's ConvNeXt with conv_mlp: fc2 is a 1x1 Conv, gamma [1, C, 1, 1] multiplies its output.
  GraphBuilder b;
  b.input("x", {-1, 6, 5, 7}).output("y");
  b.floats("w", {6, 6, 1, 1}, ramp(36, 1)).floats("bias", {6}, ramp(6, 2)).floats("gamma", {1, 6, 1, 1}, ramp(6, 3));
  b.node("Conv", {"x", "w", "bias"}, {"c"}).attrs["kernel_shape"] = Attribute::of_ints({1, 1});
  b.node("Mul", {"c", "gamma"}, {"m"});
  b.node("Add", {"m", "x"}, {"y"});
  const Prepared with = run(b.g, {6, 5, 7}, true), without = run(b.g, {6, 5, 7}, false);
  EXPECT_EQ(count_ops(with.g, "Mul"), 0);
  EXPECT_EQ(count_ops(with.g, "FusedConv"), 1);
  EXPECT_EQ(count_ops(with.g, "Add"), 0);
  EXPECT_EQ(count_ops(without.g, "Mul"), 1);
  EXPECT_LE(relative_difference(with.y, without.y), 1e-5);
}

TEST(FuseLayouts, ALayerScaleOverTokensFoldsIntoTheProjection) {
  // DINOv2: x + gamma * (h W + b) over [B, T, C] tokens, gamma [C]; a scalar gamma folds as well.
  for (const bool scalar : {false, true}) {
    SCOPED_TRACE(scalar ? "scalar gamma" : "gamma [C]");
    GraphBuilder b;
    b.input("x", {-1, 5, 12}).output("y");
    b.floats("w", {12, 12}, ramp(144, 1)).floats("bias", {12}, ramp(12, 2));
    if (scalar) b.floats("gamma", {}, {0.37f});
    else b.floats("gamma", {12}, ramp(12, 3));
    b.node("MatMul", {"x", "w"}, {"p"});
    b.node("Add", {"p", "bias"}, {"q"});
    b.node("Mul", {"q", "gamma"}, {"m"});
    b.node("Add", {"x", "m"}, {"y"});
    const Prepared with = run(b.g, {5, 12}, true), without = run(b.g, {5, 12}, false);
    EXPECT_EQ(count_ops(with.g, "Mul"), 0);
    EXPECT_EQ(count_ops(without.g, "Mul"), 1);
    EXPECT_LE(relative_difference(with.y, without.y), 1e-5);
  }
}

TEST(FuseLayouts, ScalesThatAreNotPerColumnOrProductsReadTwiceStay) {
  // gamma varying along the tokens, not the columns; and a product whose biased value is read twice.
  GraphBuilder b;
  b.input("x", {-1, 5, 12}).output("y").output("z");
  b.floats("w", {12, 12}, ramp(144, 1)).floats("bias", {12}, ramp(12, 2)).floats("rows", {5, 1}, ramp(5, 3));
  b.floats("gamma", {12}, ramp(12, 4));
  b.node("MatMul", {"x", "w"}, {"p"});
  b.node("Add", {"p", "bias"}, {"q"});
  b.node("Mul", {"q", "rows"}, {"y"});
  b.node("MatMul", {"x", "w"}, {"p2"});
  b.node("Add", {"p2", "bias"}, {"q2"});
  b.node("Mul", {"q2", "gamma"}, {"m2"});
  b.node("Add", {"m2", "q2"}, {"z"});
  const Prepared with = run(b.g, {5, 12}, true);
  EXPECT_EQ(count_ops(with.g, "Mul"), 2);
}

TEST(FuseLayouts, TwoTransposesComposeIntoOneAndAnIdentityPairIntoAView) {
  // (0, 2, 1, 3) then (0, 1, 3, 2) is (0, 2, 3, 1); (0, 2, 3, 1) then (0, 3, 1, 2) is nothing.
  GraphBuilder b;
  b.input("x", {-1, 4, 5, 6}).output("y");
  transpose(b, "x", "t1", {0, 2, 1, 3});
  transpose(b, "t1", "t2", {0, 1, 3, 2});
  b.node("Relu", {"t2"}, {"r"});
  transpose(b, "r", "t3", {0, 2, 3, 1});
  transpose(b, "t3", "y", {0, 3, 1, 2});
  const Prepared with = run(b.g, {4, 5, 6}, true), without = run(b.g, {4, 5, 6}, false);
  EXPECT_EQ(count_ops(without.g, "Transpose"), 4);
  EXPECT_EQ(count_ops(with.g, "Transpose"), 1);
  const Node* t = sluice::test::find_op(with.g, "Transpose");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->get_ints("perm"), (std::vector<int64_t>{0, 2, 3, 1}));
  ASSERT_EQ(with.y.size(), without.y.size());
  EXPECT_EQ(relative_difference(with.y, without.y), 0.0);
}

TEST(FuseLayouts, ASplitBetweenTransposesThatDoNotCancelBecomesAReshapeAndOneTranspose) {
  // [B, 6, 20] -> (0, 2, 1) -> [B, 20, 6] -> Reshape [B, 4, 5, 6] -> (0, 3, 2, 1): one permutation
  // of the split input.  A Transpose that moves the batch is left alone.
  GraphBuilder b;
  b.input("x", {-1, 6, 20}).output("y").output("z");
  transpose(b, "x", "t1", {0, 2, 1});
  b.ints("split", {0, 4, 5, 6});
  b.node("Reshape", {"t1", "split"}, {"r"});
  transpose(b, "r", "y", {0, 3, 2, 1});
  b.node("Relu", {"x"}, {"x2"});
  transpose(b, "x2", "u", {1, 0, 2});
  transpose(b, "u", "z", {1, 0, 2});
  const Prepared with = run(b.g, {6, 20}, true), without = run(b.g, {6, 20}, false);
  EXPECT_EQ(count_ops(without.g, "Transpose"), 4);
  EXPECT_EQ(count_ops(with.g, "Transpose"), 3);
  ASSERT_EQ(with.y.size(), without.y.size());
  EXPECT_EQ(relative_difference(with.y, without.y), 0.0);
}

TEST(FuseLayouts, APadOfNothingIsRemovedAndARealPadStays) {
  // Swin's F.pad to a multiple of the window, at a size that needs none, then one that pads W by 1.
  GraphBuilder b;
  b.input("x", {-1, 4, 6, 5}).output("y");
  b.ints("none", {0, 0, 0, 0, 0, 0, 0, 0}).ints("some", {0, 0, 0, 0, 0, 0, 0, 1});
  b.node("Pad", {"x", "none"}, {"p"});
  b.node("Relu", {"p"}, {"r"});
  b.node("Pad", {"r", "some"}, {"y"});
  const Prepared with = run(b.g, {4, 6, 5}, true), without = run(b.g, {4, 6, 5}, false);
  EXPECT_EQ(count_ops(without.g, "Pad"), 2);
  EXPECT_EQ(count_ops(with.g, "Pad"), 1);
  ASSERT_EQ(with.y.size(), without.y.size());
  EXPECT_EQ(relative_difference(with.y, without.y), 0.0);
}
