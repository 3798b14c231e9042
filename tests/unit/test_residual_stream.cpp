// Which values the CUDA engine keeps in fp32 under fp16/bf16 (engine/residual_stream.h): the
// residual sums of transformer blocks and the LayerNorms they feed, never a bias add, a
// convolutional network's residual or what a convolution reads; on hand-built blocks and on the
// zoo's exports.
#include <gtest/gtest.h>


#include "engine/residual_stream.h"
#include "support/graph_builder.h"
#include "support/zoo_model.h"

using namespace sluice;
using testsupport::f32;
using testsupport::GraphBuilder;
using testsupport::zoo_model;

namespace {

const Shape kTokens = {2, 5, 8};

// Two pre-LayerNorm blocks: h0 = x + pos; h1 = h0 + (LN(h0) W1 + b1); h2 = h1 + LN(h1) W2 * gamma;
// y = LN(h2).
GraphBuilder pre_norm_blocks() {
  GraphBuilder b(kTokens);
  b.random_f("pos", {1, 5, 8}, 1).random_f("w1", {8, 8}, 2).random_f("b1", {8}, 3).random_f("w2", {8, 8}, 4);
  b.random_f("gamma", {8}, 5).random_f("g", {8}, 6).random_f("beta", {8}, 7);
  b.node("Add", {"x", "pos"}, {f32("h0", kTokens)});
  b.node("LayerNormalization", {"h0", "g", "beta"}, {f32("n0", kTokens)});
  b.node("MatMul", {"n0", "w1"}, {f32("m1", kTokens)});
  b.node("Add", {"m1", "b1"}, {f32("a1", kTokens)});
  b.node("Add", {"h0", "a1"}, {f32("h1", kTokens)});
  b.node("LayerNormalization", {"h1", "g", "beta"}, {f32("n1", kTokens)});
  b.node("MatMul", {"n1", "w2"}, {f32("m2", kTokens)});
  b.node("Mul", {"m2", "gamma"}, {f32("s2", kTokens)});
  b.node("Add", {"h1", "s2"}, {f32("h2", kTokens)});
  b.node("LayerNormalization", {"h2", "g", "beta"}, {f32("y", kTokens)});
  b.output("y");
  return b;
}

}  // namespace

TEST(ResidualStream, HoldsTheResidualSumsOfPreNormBlocksAndTheBiasAndLayerScaleEndingTheirBranches) {
  // a1 (the branch's bias Add) and s2 (a LayerScale Mul) are read only by the residual Adds.
  const std::set<std::string> s = residual_stream(pre_norm_blocks().g);
  EXPECT_EQ(s, (std::set<std::string>{"h0", "h1", "h2", "a1", "s2"}));
}

TEST(ResidualStream, ALayerNormWhoseOutputIsAddedIntoTheStreamJoinsIt) {
  // CLIP's pre-LayerNorm: its output is both the first residual and what the first block normalizes.
  GraphBuilder b(kTokens);
  b.random_f("w", {8, 8}, 2).random_f("g", {8}, 6);
  b.node("LayerNormalization", {"x", "g"}, {f32("pre", kTokens)});
  b.node("LayerNormalization", {"pre", "g"}, {f32("n0", kTokens)});
  b.node("MatMul", {"n0", "w"}, {f32("m", kTokens)});
  b.node("Add", {"pre", "m"}, {f32("h1", kTokens)});
  b.node("LayerNormalization", {"h1", "g"}, {f32("y", kTokens)});
  b.output("y");
  EXPECT_EQ(residual_stream(b.g), (std::set<std::string>{"pre", "h1"}));
}

TEST(ResidualStream, AnAddThatFeedsNoLayerNormOrWhoseSumAConvolutionReadsStaysInTheComputeType) {
  // A ResNet block: conv, add the shortcut, Relu, conv.
  const Shape img = {2, 4, 6, 6};
  GraphBuilder b(img);
  b.random_f("w", {4, 4, 3, 3}, 1);
  Node& c1 = b.node("Conv", {"x", "w"}, {f32("c", img)});
  testsupport::set_ints(c1, "pads", {1, 1, 1, 1});
  b.node("Add", {"c", "x"}, {f32("s", img)});
  b.node("Relu", {"s"}, {f32("r", img)});
  Node& c2 = b.node("Conv", {"r", "w"}, {f32("y", img)});
  testsupport::set_ints(c2, "pads", {1, 1, 1, 1});
  b.output("y");
  EXPECT_TRUE(residual_stream(b.g).empty());

  // A ConvNeXt-style stage: the sum goes to the next block's convolution as well as to a LayerNorm.
  GraphBuilder v(img);
  v.random_f("w", {4, 4, 3, 3}, 1).random_f("g", {6}, 2);
  Node& d = v.node("Conv", {"x", "w"}, {f32("c", img)});
  testsupport::set_ints(d, "pads", {1, 1, 1, 1});
  v.node("Add", {"x", "c"}, {f32("s", img)});
  Node& e = v.node("Conv", {"s", "w"}, {f32("t", img)});
  testsupport::set_ints(e, "pads", {1, 1, 1, 1});
  v.node("LayerNormalization", {"s", "g"}, {f32("n", img)});
  v.output("t").output("n");
  EXPECT_TRUE(residual_stream(v.g).empty());

  // A bias added before a LayerNorm is no residual either.
  GraphBuilder m(kTokens);
  m.random_f("w", {8, 8}, 1).random_f("bias", {8}, 2).random_f("g", {8}, 3);
  m.node("MatMul", {"x", "w"}, {f32("mm", kTokens)});
  m.node("Add", {"mm", "bias"}, {f32("a", kTokens)});
  m.node("LayerNormalization", {"a", "g"}, {f32("y", kTokens)});
  m.output("y");
  EXPECT_TRUE(residual_stream(m.g).empty());
}

TEST(ResidualStream, FindsEveryLayerNormInputOfTheZoosVisionTransformersAndNothingInItsConvNets) {
  for (const std::string name : {"tv_vit.dynamo", "timm_deit.dynamo", "timm_dinov2.dynamo", "hf_vit.torchscript"}) {
    SCOPED_TRACE(name);
    const Graph g = zoo_model(name);
    const std::set<std::string> s = residual_stream(g);
    int norms = 0;
    for (const Node& n : g.nodes) {
      if (n.op == "LayerNormalization") {
        ++norms;
        EXPECT_TRUE(s.count(n.input(0))) << n.describe() << " reads '" << n.input(0) << "', which is not kept in fp32";
      }
      for (const auto& out : n.outputs)
        if (s.count(out)) EXPECT_TRUE(n.op == "Add" || n.op == "Mul" || n.op == "LayerNormalization") << n.describe();
    }
    EXPECT_GE(norms, 3);
  }
  for (const std::string name : {"hf_resnet.dynamo", "tv_deeplab_head.dynamo", "tv_regnet.dynamo", "tv_efficientnet.dynamo",
                                  "tv_convnext.dynamo"}) {
    SCOPED_TRACE(name);
    const Graph g = zoo_model(name);
    const std::set<std::string> s = residual_stream(g);
    for (const Node& n : g.nodes)
      if (n.op == "Conv" || n.op == "FusedConv")
        for (const auto& in : n.inputs) EXPECT_FALSE(s.count(in)) << n.describe() << " reads '" << in << "'";
    if (name != "tv_convnext.dynamo") EXPECT_TRUE(s.empty()) << s.size() << " values, the first '" << *s.begin() << "'";
  }
}
