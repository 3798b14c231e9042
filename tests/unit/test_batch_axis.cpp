// The batch-axis check (model/batch_axis.h): models whose outputs keep one row per sample on axis 0
// pass; models that move the batch, reduce over it or mix samples along it are refused, even when
// the shapes alone look right.
#include <gtest/gtest.h>

#include "core/error.h"
#include "model/batch_axis.h"
#include "test_model_util.h"
#include "support/graph_builder.h"

namespace sluice {
namespace {

using testsupport::f32;
using testsupport::GraphBuilder;
using testsupport::set_int;
using testsupport::set_ints;
using testsupport::typed;

constexpr int64_t B = 4;

std::string refusal(const Graph& g, int64_t batch = B) { return test::batch_refusal(g, batch); }

TEST(BatchAxis, ConvFlattenGemmKeepsTheBatch) {
  GraphBuilder b({B, 3, 4, 4});
  b.random_f("w", {2, 3, 1, 1}, 1).random_f("fc", {32, 5}, 2);
  b.node("Conv", {"x", "w"}, {f32("c", {B, 2, 4, 4})});
  set_int(b.node("Flatten", {"c"}, {f32("f", {B, 32})}), "axis", 1);
  b.node("Gemm", {"f", "fc"}, {f32("y", {B, 5})});
  b.output("y");
  EXPECT_EQ(refusal(b.g), "");
}

TEST(BatchAxis, ATransposeOfASquareTensorIsRefusedThoughItsShapeLooksRight) {
  GraphBuilder b({B, B});
  set_ints(b.node("Transpose", {"x"}, {f32("y", {B, B})}), "perm", {1, 0});
  b.output("y");
  EXPECT_NE(refusal(b.g).find("holds the batch on axis 1"), std::string::npos) << refusal(b.g);
}

TEST(BatchAxis, TwoTransposesThatCancelPass) {
  GraphBuilder b({B, 3, 5});
  set_ints(b.node("Transpose", {"x"}, {f32("t", {3, B, 5})}), "perm", {1, 0, 2});
  set_ints(b.node("Transpose", {"t"}, {f32("y", {B, 3, 5})}), "perm", {1, 0, 2});
  b.output("y");
  EXPECT_EQ(refusal(b.g), "");
}

TEST(BatchAxis, ReducingOverTheBatchIsRefusedAndOverOtherAxesPasses) {
  GraphBuilder bad({B, 3, 4});
  bad.constant_i("axes", {1}, {0});
  bad.node("ReduceMean", {"x", "axes"}, {f32("y", {1, 3, 4})});
  bad.output("y");
  EXPECT_NE(refusal(bad.g).find("reduces over the batch axis"), std::string::npos) << refusal(bad.g);

  GraphBuilder good({B, 3, 4});
  good.constant_i("axes", {1}, {2});
  set_int(good.node("ReduceMean", {"x", "axes"}, {f32("y", {B, 3})}), "keepdims", 0);
  good.output("y");
  EXPECT_EQ(refusal(good.g), "");
}

TEST(BatchAxis, ASoftmaxOverTheBatchMixesSamples) {
  GraphBuilder b({B, 10});
  set_int(b.node("Softmax", {"x"}, {f32("y", {B, 10})}), "axis", 0);
  b.output("y");
  EXPECT_NE(refusal(b.g).find("across samples"), std::string::npos) << refusal(b.g);
}

TEST(BatchAxis, ReshapesKeepTheBatchOnlyWhenItStaysItsOwnAxis) {
  GraphBuilder good({B, 3, 4});
  good.constant_i("s", {3}, {1, B, 12});
  good.node("Reshape", {"x", "s"}, {f32("r", {1, B, 12})});
  good.constant_i("s2", {2}, {B, 12});
  good.node("Reshape", {"r", "s2"}, {f32("y", {B, 12})});
  good.output("y");
  EXPECT_EQ(refusal(good.g), "");

  // The batch merged with another axis keeps samples apart but cannot be an output: rows of y are
  // not samples.
  GraphBuilder merged({B, 3, 4});
  merged.constant_i("s", {2}, {B * 3, 4});
  merged.node("Reshape", {"x", "s"}, {f32("y", {B * 3, 4})});
  merged.output("y");
  EXPECT_NE(refusal(merged.g).find("holds the batch merged with other axes"), std::string::npos) << refusal(merged.g);

  // [B, 3, 4] -> [3, B, 4] is no transpose: row b of the result holds pieces of several samples.
  GraphBuilder bad({B, 3, 4});
  bad.constant_i("s", {3}, {3, B, 4});
  bad.node("Reshape", {"x", "s"}, {f32("y", {3, B, 4})});
  bad.output("y");
  EXPECT_NE(refusal(bad.g).find("merges or splits the batch axis"), std::string::npos) << refusal(bad.g);
}

// Sequence-first multi-head attention as torch's TorchScript exporter writes nn.MultiheadAttention
// at a fixed batch: the batch merged with the heads ([S, B x H, D]), then with the sequence ([S x B, E]).
GraphBuilder heads_model(int64_t softmax_axis) {
  constexpr int64_t S = 5, H = 2, D = 3, E = H * D;
  GraphBuilder b({B, S, E});
  b.constant_i("heads", {3}, {S, B * H, D}).constant_i("rows", {2}, {S * B, E}).constant_i("seq", {3}, {S, B, E});
  set_ints(b.node("Transpose", {"x"}, {f32("sbe", {S, B, E})}), "perm", {1, 0, 2});
  b.node("Reshape", {"sbe", "heads"}, {f32("shd", {S, B * H, D})});
  set_ints(b.node("Transpose", {"shd"}, {f32("q", {B * H, S, D})}), "perm", {1, 0, 2});
  set_ints(b.node("Transpose", {"shd"}, {f32("kt", {B * H, D, S})}), "perm", {1, 2, 0});
  b.node("MatMul", {"q", "kt"}, {f32("scores", {B * H, S, S})});
  set_int(b.node("Softmax", {"scores"}, {f32("p", {B * H, S, S})}), "axis", softmax_axis);
  b.node("MatMul", {"p", "q"}, {f32("o", {B * H, S, D})});
  set_ints(b.node("Transpose", {"o"}, {f32("o2", {S, B * H, D})}), "perm", {1, 0, 2});
  b.node("Reshape", {"o2", "rows"}, {f32("flat", {S * B, E})});
  b.node("Reshape", {"flat", "seq"}, {f32("back", {S, B, E})});
  set_ints(b.node("Transpose", {"back"}, {f32("y", {B, S, E})}), "perm", {1, 0, 2});
  b.output("y");
  return b;
}

TEST(BatchAxis, TheBatchMergedWithHeadsKeepsSamplesApartUntilItHasItsOwnAxisAgain) {
  EXPECT_EQ(refusal(heads_model(-1).g), "");
  // The same softmax over the merged axis would mix the samples.
  EXPECT_NE(refusal(heads_model(0).g).find("across samples"), std::string::npos) << refusal(heads_model(0).g);
}

TEST(BatchAxis, TwoTensorsWithTheBatchMergedInDifferentWaysAreNotCombined) {
  // [B, 2, 3] -> [B x 2, 3] holds (sample, i) in row 2b + i; via [2, B, 3] it is row B i + b.
  GraphBuilder b({B, 2, 3});
  b.constant_i("s", {2}, {2 * B, 3});
  b.node("Reshape", {"x", "s"}, {f32("a", {2 * B, 3})});
  set_ints(b.node("Transpose", {"x"}, {f32("t", {2, B, 3})}), "perm", {1, 0, 2});
  b.node("Reshape", {"t", "s"}, {f32("c", {2 * B, 3})});
  b.node("Add", {"a", "c"}, {f32("y", {2 * B, 3})});
  b.output("y");
  EXPECT_NE(refusal(b.g).find("merged with other axes in different ways"), std::string::npos) << refusal(b.g);
}

TEST(BatchAxis, ConcatAndGatherAlongTheBatchAreRefused) {
  GraphBuilder cat({B, 2});
  set_int(cat.node("Concat", {"x", "x"}, {f32("y", {2 * B, 2})}), "axis", 0);
  cat.output("y");
  EXPECT_NE(refusal(cat.g).find("along the batch axis"), std::string::npos) << refusal(cat.g);

  GraphBuilder gather({B, 2});
  gather.constant_i("i", {B}, {3, 2, 1, 0});
  gather.node("Gather", {"x", "i"}, {f32("y", {B, 2})});
  gather.output("y");
  EXPECT_NE(refusal(gather.g).find("selects along the batch axis"), std::string::npos) << refusal(gather.g);
}

TEST(BatchAxis, MatMulByWeightsKeepsTheBatch) {
  GraphBuilder b({B, 6});
  b.random_f("w", {6, 3}, 3);
  b.node("MatMul", {"x", "w"}, {f32("y", {B, 3})});
  b.output("y");
  EXPECT_EQ(refusal(b.g), "");
}

TEST(BatchAxis, SubBatchesOfOneThatAreAddedTogetherMixTwoSamples) {
  // Two windows of one sample each stay single samples through any op, but adding one to the other
  // gives every row of the output two samples' data.
  GraphBuilder b({2, 3});
  b.constant_i("s0", {1}, {0}).constant_i("s1", {1}, {1}).constant_i("s2", {1}, {2}).constant_i("a0", {1}, {0});
  b.node("Slice", {"x", "s0", "s1", "a0"}, {f32("p0", {1, 3})});
  b.node("Slice", {"x", "s1", "s2", "a0"}, {f32("p1", {1, 3})});
  b.node("Relu", {"p0"}, {f32("r0", {1, 3})});
  b.node("Relu", {"p1"}, {f32("r1", {1, 3})});
  b.node("Add", {"r0", "r1"}, {f32("m", {1, 3})});
  set_int(b.node("Concat", {"m", "r1"}, {f32("y", {2, 3})}), "axis", 0);
  b.output("y");
  Graph joined = b.g;
  joined.nodes.back().inputs = {"r0", "r1"};  // the two sub-batches in order: the batch again
  EXPECT_EQ(refusal(joined, 2), "");
  EXPECT_NE(refusal(b.g, 2).find("combines rows of different samples"), std::string::npos) << refusal(b.g, 2);
}

TEST(BatchAxis, IndicesFromTheInputIntoAConstantTableKeepTheBatch) {
  // An embedding lookup: the batch of indices selects rows of a weight table, one per sample.
  GraphBuilder b({B, 5});
  b.random_f("table", {10, 8}, 4);
  set_int(b.node("Cast", {"x"}, {typed("ids", DType::I64, {B, 5})}), "to", 7);
  b.node("Gather", {"table", "ids"}, {f32("y", {B, 5, 8})});
  b.output("y");
  EXPECT_EQ(refusal(b.g), "");
}

}  // namespace
}  // namespace sluice
