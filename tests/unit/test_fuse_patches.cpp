// fuse_patch_convolutions: a convolution whose kernel equals its stride on a few channels (a patch
// embedding) becomes a permutation and one MatMul, the model's own flatten-and-transpose after it
// disappears; a strided stem (7x7/2) becomes a stride-1 convolution on space-to-depth input; and
// the outputs equal the convolution's (CPU engine, against the graph without the pass).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "engine/engine.h"
#include "model/onnx_loader.h"
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

// g prepared at batch 3 with or without the pass, and its first output on a ramp input.
Prepared run(const Graph& model, const Shape& sample, bool patches, const char* pass = "SLUICE_PATCH_GEMM") {
  setenv(pass, patches ? "1" : "0", 1);
  PrepareOptions o;
  o.batch_size = 3;
  o.sample_shape = sample;
  Prepared p{prepare_graph(model, o), {}};
  unsetenv(pass);
  p.y = cpu_first_output(p.g);
  return p;
}

// x [B, 3, 8, 12] -> Conv 4x4/4 (5 filters, bias) -> [B, 5, 2, 3] -> then `tail`.
GraphBuilder patch_model(bool tokens) {
  GraphBuilder b;
  b.input("x", {-1, 3, 8, 12}).output("y");
  b.floats("w", {5, 3, 4, 4}, ramp(240, 1)).floats("bias", {5}, ramp(5, 2));
  Node& c = b.node("Conv", {"x", "w", "bias"}, {"c"});
  c.attrs["kernel_shape"] = Attribute::of_ints({4, 4});
  c.attrs["strides"] = Attribute::of_ints({4, 4});
  if (tokens) {  // the ViT spelling: flatten the grid, channels last
    b.ints("flat", {0, 5, -1});
    b.node("Reshape", {"c", "flat"}, {"f"});
    b.node("Transpose", {"f"}, {"y"}).attrs["perm"] = Attribute::of_ints({0, 2, 1});
  } else {
    b.node("Relu", {"c"}, {"r"});
    b.node("MaxPool", {"r"}, {"y"}).attrs["kernel_shape"] = Attribute::of_ints({2, 3});
  }
  return b;
}

}  // namespace

TEST(FusePatches, APatchEmbeddingBecomesOneMatMulAndItsTokenLayoutIsKept) {
  const GraphBuilder b = patch_model(true);
  const Prepared with = run(b.g, {3, 8, 12}, true), without = run(b.g, {3, 8, 12}, false);
  EXPECT_EQ(count_ops(with.g, "Conv"), 0);
  EXPECT_EQ(count_ops(with.g, "MatMul"), 1);
  // The permutation of the input is the one Transpose left: the model's own went with the grid.
  EXPECT_EQ(count_ops(with.g, "Transpose"), 1);
  EXPECT_EQ(count_ops(without.g, "Conv"), 1);
  ASSERT_EQ(with.y.size(), without.y.size());
  EXPECT_LE(relative_difference(with.y, without.y), 1e-5);
}

TEST(FusePatches, AGridReadByOtherOpsIsWrittenBackInChannelsFirstOrder) {
  // Conv + Relu is a FusedConv and stays a convolution; a bare patch Conv read by a pool gets its
  // grid back.
  GraphBuilder fused = patch_model(false);
  EXPECT_EQ(count_ops(run(fused.g, {3, 8, 12}, true).g, "MatMul"), 0);

  GraphBuilder b;
  b.input("x", {-1, 3, 8, 12}).output("y");
  b.floats("w", {5, 3, 4, 4}, ramp(240, 3));
  Node& c = b.node("Conv", {"x", "w"}, {"c"});
  c.attrs["kernel_shape"] = Attribute::of_ints({4, 4});
  c.attrs["strides"] = Attribute::of_ints({4, 4});
  b.node("GlobalAveragePool", {"c"}, {"p"});
  b.node("Sigmoid", {"c"}, {"s"});
  b.node("Mul", {"s", "p"}, {"y"});
  const Prepared with = run(b.g, {3, 8, 12}, true), without = run(b.g, {3, 8, 12}, false);
  EXPECT_EQ(count_ops(with.g, "Conv"), 0);
  ASSERT_EQ(with.y.size(), without.y.size());
  EXPECT_LE(relative_difference(with.y, without.y), 1e-5);
}

TEST(FusePatches, OverlappingOrPaddedOrWideConvolutionsStayConvolutions) {
  auto model = [](int64_t channels, int64_t stride, int64_t pad) {
    GraphBuilder b;
    b.input("x", {-1, channels, 8, 8}).output("y");
    b.floats("w", {4, channels, 4, 4}, ramp(static_cast<std::size_t>(64 * channels), 1));
    Node& c = b.node("Conv", {"x", "w"}, {"y"});
    c.attrs["kernel_shape"] = Attribute::of_ints({4, 4});
    c.attrs["strides"] = Attribute::of_ints({stride, stride});
    c.attrs["pads"] = Attribute::of_ints({pad, pad, pad, pad});
    return b;
  };
  EXPECT_EQ(count_ops(run(model(3, 2, 0).g, {3, 8, 8}, true).g, "Conv"), 1);    // overlapping
  EXPECT_EQ(count_ops(run(model(3, 4, 1).g, {3, 8, 8}, true).g, "Conv"), 1);    // padded
  EXPECT_EQ(count_ops(run(model(64, 4, 0).g, {64, 8, 8}, true).g, "Conv"), 1);  // many channels
}

TEST(FusePatches, EveryZooVisionTransformerStemBecomesAMatMul) {
  for (const char* name : {"tv_vit.dynamo", "timm_deit.torchscript", "timm_dinov2.dynamo", "hf_vit.torchscript",
                           "hf_clip_vision.dynamo"}) {
    const std::string path = std::string(SLUICE_SOURCE_DIR) + "/tests/data/zoo/" + name + ".onnx";
    ASSERT_TRUE(std::filesystem::exists(path)) << path;
    Graph g = load_onnx(path);
    const Shape sample(g.inputs.at(0).shape.begin() + 1, g.inputs.at(0).shape.end());
    const Prepared with = run(g, sample, true), without = run(g, sample, false);
    EXPECT_EQ(count_ops(with.g, "Conv"), 0) << name;
    EXPECT_LE(count_ops(with.g, "Transpose"), count_ops(without.g, "Transpose")) << name;
    ASSERT_EQ(with.y.size(), without.y.size()) << name;
    EXPECT_LE(relative_difference(with.y, without.y), 1e-5) << name;
  }
}

namespace {

// x [B, 3, H, W] -> Conv k x k / s, pads p (+ Relu: a FusedConv) -> y.
GraphBuilder stem_model(int64_t k, int64_t s, int64_t p, bool relu, int64_t filters = 6) {
  GraphBuilder b;
  b.input("x", {-1, 3, 29, 34}).output("y");
  b.floats("w", {filters, 3, k, k}, ramp(static_cast<std::size_t>(filters * 3 * k * k), 4)).floats("bias", {filters}, ramp(6, 5));
  Node& c = b.node("Conv", {"x", "w", "bias"}, {relu ? "c" : "y"});
  c.attrs["kernel_shape"] = Attribute::of_ints({k, k});
  c.attrs["strides"] = Attribute::of_ints({s, s});
  c.attrs["pads"] = Attribute::of_ints({p, p, p, p});
  if (relu) b.node("Relu", {"c"}, {"y"});
  return b;
}

}  // namespace

TEST(FusePatches, AStridedStemBecomesAStrideOneConvolutionOnSpaceToDepthInput) {
  // ResNet's 7x7/2 pad 3 (fused with its ReLU), Segformer's 7x7/4 pad 3, and one without pads, on
  // odd sizes so that the padding to a multiple of the stride differs per side.
  struct Case { int64_t k, s, p; bool relu; };
  for (const Case c : {Case{7, 2, 3, true}, Case{7, 4, 3, false}, Case{5, 2, 0, false}}) {
    const GraphBuilder b = stem_model(c.k, c.s, c.p, c.relu);
    const Prepared with = run(b.g, {3, 29, 34}, true, "SLUICE_STEM_S2D");
    const Prepared without = run(b.g, {3, 29, 34}, false, "SLUICE_STEM_S2D");
    // 3 x 2 x 2 = 12 channels get 4 zero channels (a second Pad) up to 16; 3 x 4 x 4 = 48 need none.
    EXPECT_EQ(count_ops(with.g, "Pad"), c.s == 2 ? 2 : 1) << c.k << "/" << c.s;
    for (const Node& n : with.g.nodes)
      if (n.op == "Conv" || n.op == "FusedConv") {
        EXPECT_EQ(n.get_ints("strides"), (std::vector<int64_t>{1, 1})) << c.k << "/" << c.s;
        EXPECT_EQ(n.get_ints("kernel_shape"), (std::vector<int64_t>{(c.k + c.s - 1) / c.s, (c.k + c.s - 1) / c.s}));
        EXPECT_EQ(with.g.constant(n.inputs[1])->shape[1], c.s == 2 ? 16 : 48) << c.k << "/" << c.s;
      }
    EXPECT_EQ(count_ops(with.g, "FusedConv"), c.relu ? 1 : 0);
    ASSERT_EQ(with.y.size(), without.y.size());
    EXPECT_LE(relative_difference(with.y, without.y), 1e-5) << c.k << "/" << c.s;
  }
  {  // SLUICE_STEM_S2D_PAD=0: the 12 channels as they are, one Pad, the same result
    setenv("SLUICE_STEM_S2D_PAD", "0", 1);
    const GraphBuilder b = stem_model(7, 2, 3, true);
    const Prepared with = run(b.g, {3, 29, 34}, true, "SLUICE_STEM_S2D");
    const Prepared without = run(b.g, {3, 29, 34}, false, "SLUICE_STEM_S2D");
    unsetenv("SLUICE_STEM_S2D_PAD");
    EXPECT_EQ(count_ops(with.g, "Pad"), 1);
    EXPECT_LE(relative_difference(with.y, without.y), 1e-5);
  }
  // A 3x3/2 stem and a 7x7/1 convolution stay as they are.
  EXPECT_EQ(count_ops(run(stem_model(3, 2, 1, false).g, {3, 29, 34}, true, "SLUICE_STEM_S2D").g, "Pad"), 0);
  EXPECT_EQ(count_ops(run(stem_model(7, 1, 3, false).g, {3, 29, 34}, true, "SLUICE_STEM_S2D").g, "Pad"), 0);
}
