// remove_identities, fold_batchnorm, fuse_convolutions and eliminate_dead_nodes on small graphs.
#include <gtest/gtest.h>

#include <cmath>

#include "model/passes.h"
#include "test_model_util.h"

using namespace sluice;
using sluice::test::GraphBuilder;
using sluice::test::count_ops;
using sluice::test::find_op;

TEST(RemoveIdentities, BypassesInnerIdentitiesAndKeepsOutputNames) {
  GraphBuilder b;
  b.input("x", {1, 2}).output("out");
  b.node("Relu", {"x"}, {"a"});
  b.node("Identity", {"a"}, {"a2"});
  b.node("Sigmoid", {"a2"}, {"s"});
  b.node("Identity", {"s"}, {"out"});
  Graph g = b.g;
  remove_identities(g);
  ASSERT_EQ(g.nodes.size(), 2u);
  EXPECT_EQ(g.nodes[1].op, "Sigmoid");
  EXPECT_EQ(g.nodes[1].inputs[0], "a");     // reads the Relu directly
  EXPECT_EQ(g.nodes[1].outputs[0], "out");  // the graph output keeps its name
  EXPECT_EQ(g.outputs[0].name, "out");
}

TEST(RemoveIdentities, KeepsAnIdentityFromTheGraphInputToAnOutput) {
  GraphBuilder b;
  b.input("x", {3}).output("y");
  b.node("Identity", {"x"}, {"y"});
  Graph g = b.g;
  remove_identities(g);
  EXPECT_EQ(g.nodes.size(), 1u);
}

namespace {

// x [1,2,3,3] -> Conv (1x1, 3 output channels, bias) -> BN -> Relu -> y
GraphBuilder conv_bn_graph() {
  GraphBuilder b;
  b.input("x", {1, 2, 3, 3}).output("y");
  b.floats("w", {3, 2, 1, 1}, {1.f, 2.f, -1.f, 0.5f, 0.f, 3.f});
  b.floats("bias", {3}, {0.1f, -0.2f, 0.3f});
  b.floats("gamma", {3}, {2.f, 0.5f, -1.f});
  b.floats("beta", {3}, {0.f, 1.f, 2.f});
  b.floats("mean", {3}, {1.f, -1.f, 0.5f});
  b.floats("var", {3}, {4.f, 0.25f, 1.f});
  b.node("Conv", {"x", "w", "bias"}, {"c"});
  b.node("BatchNormalization", {"c", "gamma", "beta", "mean", "var"}, {"bn"}).attrs["epsilon"] = Attribute::of_float(0.f);
  b.node("Relu", {"bn"}, {"y"});
  return b;
}

}  // namespace

TEST(FoldBatchNorm, FoldsIntoTheConvolutionWeightsAndBias) {
  Graph g = conv_bn_graph().g;
  fold_batchnorm(g);
  ASSERT_EQ(count_ops(g, "BatchNormalization"), 0);
  const Node* conv = find_op(g, "Conv");
  ASSERT_NE(conv, nullptr);
  EXPECT_EQ(conv->outputs[0], "bn");  // the BN's output name lives on
  const std::vector<float> w = g.constant(conv->inputs[1])->as_float();
  const std::vector<float> bias = g.constant(conv->inputs[2])->as_float();
  // a = gamma / sqrt(var): 1, 1, -1;  w' = w * a;  b' = (b - mean) * a + beta
  EXPECT_EQ(w, (std::vector<float>{1.f, 2.f, -1.f, 0.5f, -0.f, -3.f}));
  EXPECT_FLOAT_EQ(bias[0], (0.1f - 1.f) * 1.f + 0.f);
  EXPECT_FLOAT_EQ(bias[1], (-0.2f + 1.f) * 1.f + 1.f);
  EXPECT_FLOAT_EQ(bias[2], (0.3f - 0.5f) * -1.f + 2.f);
  // The original weights are untouched (they could be shared).
  EXPECT_EQ(g.constant("w")->as_float()[5], 3.f);
}

TEST(FoldBatchNorm, AddsABiasWhenTheConvHasNone) {
  GraphBuilder b = conv_bn_graph();
  b.g.nodes[0].inputs.resize(2);
  Graph g = b.g;
  fold_batchnorm(g);
  const Node* conv = find_op(g, "Conv");
  ASSERT_EQ(conv->inputs.size(), 3u);
  EXPECT_EQ(g.constant(conv->inputs[2])->as_float(), (std::vector<float>{-1.f, 2.f, 2.5f}));
}

TEST(FoldBatchNorm, LeavesABatchNormWhoseConvOutputIsSharedOrMissing) {
  GraphBuilder b = conv_bn_graph();
  b.output("c");  // the conv output is also a graph output
  Graph g = b.g;
  fold_batchnorm(g);
  EXPECT_EQ(count_ops(g, "BatchNormalization"), 1);

  GraphBuilder s;  // BN on a graph input: stays for the kernel
  s.input("x", {1, 3, 2, 2}).output("y");
  for (auto n : {"g", "b", "m", "v"}) s.floats(n, {3}, {1.f, 1.f, 1.f});
  s.node("BatchNormalization", {"x", "g", "b", "m", "v"}, {"y"});
  Graph g2 = s.g;
  fold_batchnorm(g2);
  EXPECT_EQ(count_ops(g2, "BatchNormalization"), 1);
}

namespace {

GraphBuilder residual_graph(const std::string& act) {
  GraphBuilder b;
  b.input("x", {1, 4, 8, 8}).output("y");
  b.floats("w1", {4, 4, 3, 3}, std::vector<float>(144, 0.1f)).floats("b1", {4}, {0.f, 0.f, 0.f, 0.f});
  b.floats("w2", {4, 4, 1, 1}, std::vector<float>(16, 0.1f));
  b.floats("lo", {}, {0.f}).floats("hi", {}, {6.f});
  b.node("Relu", {"x"}, {"r"});  // the residual branch
  auto& c = b.node("Conv", {"x", "w1", "b1"}, {"c"});
  c.attrs["pads"] = Attribute::of_ints({1, 1, 1, 1});
  c.name = "conv1";
  b.node("Add", {"c", "r"}, {"s"});
  if (act == "Clip") b.node("Clip", {"s", "lo", "hi"}, {"a"});
  else if (act == "LeakyRelu") b.node("LeakyRelu", {"s"}, {"a"}).attrs["alpha"] = Attribute::of_float(0.2f);
  else b.node(act, {"s"}, {"a"});
  b.node("Conv", {"a", "w2"}, {"y"});
  return b;
}

}  // namespace

TEST(FuseConvolutions, ConvAddReluBecomesOneFusedConv) {
  Graph g = residual_graph("Relu").g;
  fuse_convolutions(g);
  ASSERT_EQ(count_ops(g, "FusedConv"), 1) << g.summary();
  EXPECT_EQ(count_ops(g, "Add"), 0);
  EXPECT_EQ(count_ops(g, "Relu"), 1);  // the residual branch's own Relu stays
  const Node* f = find_op(g, "FusedConv");
  EXPECT_EQ(f->domain, "sluice");
  EXPECT_EQ(f->name, "conv1");
  EXPECT_EQ(f->inputs, (std::vector<std::string>{"x", "w1", "b1", "r"}));
  EXPECT_EQ(f->outputs, (std::vector<std::string>{"a"}));
  EXPECT_EQ(f->get_string("activation", "?"), "Relu");
  EXPECT_EQ(f->get_ints("pads"), (std::vector<int64_t>{1, 1, 1, 1}));
  // The last Conv has nothing after it and stays a plain Conv; order is still topological.
  EXPECT_EQ(g.nodes.back().op, "Conv");
  infer_shapes(g);
  EXPECT_EQ(g.value("a")->shape, (Shape{1, 4, 8, 8}));
}

TEST(FuseConvolutions, ClipAndLeakyReluCarryTheirParameters) {
  Graph g = residual_graph("Clip").g;
  fuse_convolutions(g);
  const Node* f = find_op(g, "FusedConv");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->get_string("activation", ""), "Clip");
  EXPECT_EQ(f->get_float("clip_min", -1.f), 0.f);
  EXPECT_EQ(f->get_float("clip_max", -1.f), 6.f);

  Graph l = residual_graph("LeakyRelu").g;
  fuse_convolutions(l);
  f = find_op(l, "FusedConv");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->get_string("activation", ""), "LeakyRelu");
  EXPECT_FLOAT_EQ(f->get_float("alpha", 0.f), 0.2f);

  Graph s = residual_graph("Sigmoid").g;  // not fusable: the Add alone is fused
  fuse_convolutions(s);
  f = find_op(s, "FusedConv");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->get_string("activation", "?"), "");
  EXPECT_EQ(f->outputs[0], "s");
  EXPECT_EQ(count_ops(s, "Sigmoid"), 1);
}

TEST(FuseConvolutions, NoFusionWhenIntermediatesAreSharedOrShapesDiffer) {
  GraphBuilder b = residual_graph("Relu");
  b.output("s");  // the Add's output is a graph output: only Conv + nothing
  Graph g = b.g;
  fuse_convolutions(g);
  const Node* f = find_op(g, "FusedConv");
  // Conv + Add still fuse (the conv output has one consumer), but the Relu must stay.
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->outputs[0], "s");
  EXPECT_EQ(f->get_string("activation", "?"), "");

  GraphBuilder c = residual_graph("Relu");
  c.output("c");  // the conv output itself is wanted
  Graph g2 = c.g;
  fuse_convolutions(g2);
  EXPECT_EQ(count_ops(g2, "FusedConv"), 0);

  // A per-channel runtime tensor [1,4,1,1] broadcast by the Add is not a residual.
  GraphBuilder d;
  d.input("x", {1, 4, 8, 8}).input("bias", {1, 4, 1, 1}).output("y");
  d.floats("w", {4, 4, 1, 1}, std::vector<float>(16, 1.f));
  d.node("Conv", {"x", "w"}, {"c"});
  d.node("Add", {"c", "bias"}, {"y"});
  Graph g3 = d.g;
  fuse_convolutions(g3);
  EXPECT_EQ(count_ops(g3, "FusedConv"), 0);
}

TEST(EliminateDeadNodes, DropsUnusedBranchesAndConstants) {
  GraphBuilder b;
  b.input("x", {2, 2}).output("y");
  b.floats("used", {1}, {1.f}).floats("unused", {1}, {2.f});
  b.node("Add", {"x", "used"}, {"y"});
  b.node("Mul", {"x", "unused"}, {"dead1"});
  b.node("Relu", {"dead1"}, {"dead2"});
  Graph g = b.g;
  eliminate_dead_nodes(g);
  ASSERT_EQ(g.nodes.size(), 1u);
  EXPECT_EQ(g.nodes[0].op, "Add");
  EXPECT_TRUE(g.is_constant("used"));
  EXPECT_FALSE(g.is_constant("unused"));
  EXPECT_EQ(g.inputs.size(), 1u);
}
