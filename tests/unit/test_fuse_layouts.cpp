// cancel_transposes, fold_layer_scales, drop_empty_pads and sequence_image_views
// (model/fuse_layouts.cpp): a ConvNeXt block as torchvision, timm (1x1 convolutions as the MLP) and
// DINOv2 (LayerScale over tokens) write it, transpose chains that compose into another permutation,
// Swin's pads of nothing, and Segformer's Mix-FFN between the sequence and image layouts;
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
  setenv("SLUICE_SEQUENCE_VIEWS", passes ? "1" : "0", 1);
  setenv("SLUICE_FUSE_CONV_GELU", passes ? "1" : "0", 1);
  PrepareOptions o;
  o.batch_size = 3;
  o.sample_shape = sample;
  Prepared p{prepare_graph(model, o), {}};
  unsetenv("SLUICE_CANCEL_TRANSPOSES");
  unsetenv("SLUICE_FOLD_SCALE");
  unsetenv("SLUICE_DROP_EMPTY_PADS");
  unsetenv("SLUICE_SEQUENCE_VIEWS");
  unsetenv("SLUICE_FUSE_CONV_GELU");
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

namespace {

// Transposes of rank `rank` in g.
int transposes_of_rank(const Graph& g, std::size_t rank) {
  int k = 0;
  for (const Node& n : g.nodes)
    if (n.op == "Transpose" && n.get_ints("perm").size() == rank) ++k;
  return k;
}

}  // namespace

TEST(FuseLayouts, SegformersSequenceImageChangesBecomeFourDimensionalTransposesAndItsGeluTheConvolutions) {
  // transformers' SegformerMixFFN on a 4 x 5 grid of 6 channels: Linear 6 -> 12, transpose(1, 2)
  // and view [N, 12, 4, 5], depthwise 3x3, flatten(2) and transpose(1, 2), Gelu, Linear 12 -> 6.
  GraphBuilder b;
  b.input("x", {-1, 20, 6}).output("y");
  b.floats("w1", {6, 12}, ramp(72, 1)).floats("b1", {12}, ramp(12, 2));
  b.floats("dw", {12, 1, 3, 3}, ramp(108, 3)).floats("dwb", {12}, ramp(12, 4));
  b.floats("w2", {12, 6}, ramp(72, 5)).floats("b2", {6}, ramp(6, 6));
  b.ints("img", {3, 12, 4, 5}).ints("seq", {3, 12, -1});
  b.node("MatMul", {"x", "w1"}, {"m1"});
  b.node("Add", {"b1", "m1"}, {"a1"});
  transpose(b, "a1", "t1", {0, 2, 1});
  b.node("Reshape", {"t1", "img"}, {"i1"});
  Node& dw = b.node("Conv", {"i1", "dw", "dwb"}, {"d"});
  dw.attrs["kernel_shape"] = Attribute::of_ints({3, 3});
  dw.attrs["pads"] = Attribute::of_ints({1, 1, 1, 1});
  dw.attrs["group"] = Attribute::of_int(12);
  b.node("Reshape", {"d", "seq"}, {"r2"});
  transpose(b, "r2", "s2", {0, 2, 1});
  b.node("Gelu", {"s2"}, {"g"});
  b.node("MatMul", {"g", "w2"}, {"m2"});
  b.node("Add", {"m2", "b2"}, {"y"});
  const Prepared with = run(b.g, {20, 6}, true), without = run(b.g, {20, 6}, false);
  EXPECT_EQ(transposes_of_rank(without.g, 3), 2);
  EXPECT_EQ(transposes_of_rank(with.g, 3), 0);
  EXPECT_EQ(transposes_of_rank(with.g, 4), 2);
  bool to_image = false, to_sequence = false;
  for (const Node& n : with.g.nodes) {
    if (n.op != "Transpose") continue;
    to_image |= n.get_ints("perm") == std::vector<int64_t>{0, 3, 1, 2};
    to_sequence |= n.get_ints("perm") == std::vector<int64_t>{0, 2, 3, 1};
  }
  EXPECT_TRUE(to_image);
  EXPECT_TRUE(to_sequence);
  // The Gelu after the views back to the sequence is the depthwise convolution's activation.
  EXPECT_EQ(count_ops(without.g, "Gelu"), 1);
  EXPECT_EQ(count_ops(with.g, "Gelu"), 0);
  ASSERT_EQ(count_ops(with.g, "FusedConv"), 1);
  for (const Node& n : with.g.nodes)
    if (n.op == "FusedConv") EXPECT_EQ(n.get_string("activation", ""), "Gelu");
  ASSERT_EQ(with.y.size(), without.y.size());
  EXPECT_LE(relative_difference(with.y, without.y), 1e-6);
}

TEST(FuseLayouts, AGeluWhoseConvolutionHasAnotherReaderOrAnActivationStays) {
  GraphBuilder b;
  b.input("x", {-1, 4, 5, 6}).output("y").output("z");
  b.floats("w", {4, 4, 1, 1}, ramp(16, 1)).floats("w2", {4, 4, 1, 1}, ramp(16, 2));
  b.node("Conv", {"x", "w"}, {"c"}).attrs["kernel_shape"] = Attribute::of_ints({1, 1});
  b.node("Gelu", {"c"}, {"g"});
  b.node("Add", {"g", "c"}, {"y"});   // c read twice: the Gelu stays
  b.node("Conv", {"x", "w2"}, {"c2"}).attrs["kernel_shape"] = Attribute::of_ints({1, 1});
  b.node("Relu", {"c2"}, {"r2"});     // FusedConv with Relu: the Gelu after it stays
  transpose(b, "r2", "t2", {0, 2, 3, 1});
  b.node("Gelu", {"t2"}, {"g2"}).attrs["approximate"] = Attribute::of_string("tanh");
  b.node("Neg", {"g2"}, {"z"});
  const Prepared with = run(b.g, {4, 5, 6}, true), without = run(b.g, {4, 5, 6}, false);
  EXPECT_EQ(count_ops(with.g, "Gelu"), 2);
  ASSERT_EQ(with.y.size(), without.y.size());
  EXPECT_EQ(relative_difference(with.y, without.y), 0.0);
}

TEST(FuseLayouts, ATanhGeluBehindAConvolutionsTransposeIsItsActivation) {
  GraphBuilder b;
  b.input("x", {-1, 4, 5, 6}).output("y");
  b.floats("w", {4, 4, 3, 3}, ramp(144, 1)).floats("bias", {4}, ramp(4, 2));
  Node& c = b.node("Conv", {"x", "w", "bias"}, {"c"});
  c.attrs["kernel_shape"] = Attribute::of_ints({3, 3});
  c.attrs["pads"] = Attribute::of_ints({1, 1, 1, 1});
  transpose(b, "c", "t", {0, 2, 3, 1});
  b.node("Gelu", {"t"}, {"y"}).attrs["approximate"] = Attribute::of_string("tanh");
  // The Gelu is the graph output: it stays (the output keeps its producer's name).
  const Prepared kept = run(b.g, {4, 5, 6}, true);
  EXPECT_EQ(count_ops(kept.g, "Gelu"), 1);
  b.g.outputs.clear();
  b.node("Relu", {"y"}, {"out"});
  b.output("out");
  const Prepared with = run(b.g, {4, 5, 6}, true), without = run(b.g, {4, 5, 6}, false);
  EXPECT_EQ(count_ops(with.g, "Gelu"), 0);
  for (const Node& n : with.g.nodes)
    if (n.op == "FusedConv") EXPECT_EQ(n.get_string("activation", ""), "GeluTanh");
  ASSERT_EQ(with.y.size(), without.y.size());
  EXPECT_LE(relative_difference(with.y, without.y), 1e-6);
}

TEST(FuseLayouts, ATransposeThatIsNoSequenceImageChangeStays) {
  // Transpose (0, 2, 1) read by two nodes, and a Reshape that does not split the last axis.
  GraphBuilder b;
  b.input("x", {-1, 20, 6}).output("y").output("z");
  transpose(b, "x", "t", {0, 2, 1});
  b.ints("img", {3, 6, 4, 5}).ints("other", {3, 3, 2, 20});
  b.node("Reshape", {"t", "img"}, {"y"});
  b.node("Relu", {"t"}, {"t2"});
  b.node("Reshape", {"t2", "other"}, {"z"});
  const Prepared with = run(b.g, {20, 6}, true);
  EXPECT_EQ(transposes_of_rank(with.g, 3), 1);
  EXPECT_EQ(transposes_of_rank(with.g, 4), 0);
}
