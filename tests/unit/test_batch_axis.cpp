// The batch-axis check (model/batch_axis.h): models whose outputs keep one row per sample on axis 0
// pass; models that move the batch, reduce over it or mix samples along it are refused, even when
// the shapes alone look right.
#include <gtest/gtest.h>

#include "core/error.h"
#include "model/batch_axis.h"
#include "support/graph_builder.h"

namespace sluice {
namespace {

using testsupport::f32;
using testsupport::GraphBuilder;
using testsupport::set_int;
using testsupport::set_ints;

constexpr int64_t B = 4;

std::string refusal(const Graph& g) {
  try {
    check_batch_axis(g, B);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

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

  GraphBuilder bad({B, 3, 4});
  bad.constant_i("s", {2}, {B * 3, 4});
  bad.node("Reshape", {"x", "s"}, {f32("y", {B * 3, 4})});
  bad.output("y");
  EXPECT_NE(refusal(bad.g).find("merges the batch axis"), std::string::npos) << refusal(bad.g);
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

}  // namespace
}  // namespace sluice
