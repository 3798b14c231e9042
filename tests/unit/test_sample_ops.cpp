// The batch axis through DepthToSpace, SpaceToDepth, GatherElements, ScatterElements and GridSample
// (model/batch_trace.cpp): along other axes they keep the batch, along it they are refused, and a
// static-batch model of them is re-specialized to another batch (its constant indices and grids
// repeated per sample).  Their values are checked against ONNX Runtime in
// tests/python/test_ops_sampling.py and on the GPU in tests/gpu/test_cuda_sampling_ops.cpp.
#include <gtest/gtest.h>

#include "core/error.h"
#include "model/batch_axis.h"
#include "model/prepare.h"
#include "support/graph_builder.h"
#include "test_model_util.h"

namespace sluice {
namespace {

using testsupport::f32;
using testsupport::set_int;
using testsupport::set_string;
using testsupport::typed;

constexpr int64_t B = 3;

std::string refusal(const Graph& g, int64_t batch = B) { return test::batch_refusal(g, batch); }

TEST(SampleOpsBatch, DepthToSpaceAndSpaceToDepthKeepTheBatch) {
  testsupport::GraphBuilder b({B, 8, 3, 5});
  set_int(b.node("DepthToSpace", {"x"}, {f32("d", {B, 2, 6, 10})}), "blocksize", 2);
  set_int(b.node("SpaceToDepth", {"d"}, {f32("y", {B, 8, 3, 5})}), "blocksize", 2);
  b.output("y");
  EXPECT_EQ(refusal(b.g), "");
}

TEST(SampleOpsBatch, GatherElementsWithTopKIndicesKeepsTheBatch) {
  testsupport::GraphBuilder b({B, 11, 4});
  b.constant_i("k", {1}, {5});
  Node& t = b.node("TopK", {"x", "k"}, {f32("v", {B, 5, 4}), typed("i", DType::I64, {B, 5, 4})});
  set_int(t, "axis", 1);
  set_int(b.node("GatherElements", {"x", "i"}, {f32("y", {B, 5, 4})}), "axis", 1);
  b.output("y");
  EXPECT_EQ(refusal(b.g), "");
}

TEST(SampleOpsBatch, GatherAndScatterElementsAlongTheBatchAreRefused) {
  testsupport::GraphBuilder g({B, 5});
  g.constant_i("i", {B, 5}, std::vector<int64_t>(B * 5, 1));
  set_int(g.node("GatherElements", {"x", "i"}, {f32("y", {B, 5})}), "axis", 0);
  g.output("y");
  EXPECT_NE(refusal(g.g).find("selects along the batch axis"), std::string::npos) << refusal(g.g);

  testsupport::GraphBuilder s({B, 5});
  s.constant_i("i", {1, 5}, {0, 1, 2, 0, 1}).random_f("u", {1, 5}, 3);
  set_int(s.node("ScatterElements", {"x", "i", "u"}, {f32("y", {B, 5})}), "axis", 0);
  s.output("y");
  EXPECT_NE(refusal(s.g).find("scatters along the batch axis"), std::string::npos) << refusal(s.g);
}

TEST(SampleOpsBatch, ConstantIndicesShorterThanTheBatchAreRefused) {
  testsupport::GraphBuilder g({B, 5});
  g.constant_i("i", {1, 5}, {0, 1, 2, 3, 4});
  set_int(g.node("GatherElements", {"x", "i"}, {f32("y", {1, 5})}), "axis", 1);
  g.output("y");
  EXPECT_NE(refusal(g.g).find("changes the batch axis' length"), std::string::npos) << refusal(g.g);
}

TEST(SampleOpsBatch, GridSampleWithAGridFromTheDataKeepsTheBatchAndOffAxisZeroIsRefused) {
  testsupport::GraphBuilder b({B, 2, 4, 6});
  b.node("Transpose", {"x"}, {f32("g", {B, 4, 6, 2})}).attrs["perm"] = Attribute::of_ints({0, 2, 3, 1});
  b.node("GridSample", {"x", "g"}, {f32("y", {B, 2, 4, 6})});
  b.output("y");
  EXPECT_EQ(refusal(b.g), "");

  testsupport::GraphBuilder bad({B, 3, 3, 2});
  bad.node("Transpose", {"x"}, {f32("g", {3, B, 3, 2})}).attrs["perm"] = Attribute::of_ints({1, 0, 2, 3});
  bad.random_f("img", {3, 2, 5, 5}, 4);
  bad.node("GridSample", {"img", "g"}, {f32("s", {3, 2, B, 3})});
  bad.node("Transpose", {"s"}, {f32("y", {B, 2, 3, 3})}).attrs["perm"] = Attribute::of_ints({2, 1, 0, 3});
  bad.output("y");
  EXPECT_NE(refusal(bad.g, B).find("GridSample"), std::string::npos) << refusal(bad.g, B);
}

Graph prepared(Graph g, int64_t batch, Shape sample) {
  PrepareOptions o;
  o.batch_size = batch;
  o.sample_shape = std::move(sample);
  o.static_batch = StaticBatch::Respecialize;
  return prepare_graph(std::move(g), o);
}

TEST(SampleOpsBatchAdapt, ABatchOneModelWithAConstantGridAndIndicesIsRespecialized) {
  test::GraphBuilder b;
  b.input("x", {1, 2, 4, 5}).output("y").output("z").output("w");
  std::vector<float> grid;
  for (int i = 0; i < 12; ++i) grid.push_back(-1.1f + 0.2f * static_cast<float>(i));
  b.floats("grid", {1, 2, 3, 2}, grid);
  b.g.constants["idx"] = Tensor::from(DType::I64, {1, 2, 3, 5}, std::vector<int64_t>(30, 2));
  b.node("GridSample", {"x", "grid"}, {"y"}).attrs["align_corners"] = Attribute::of_int(1);
  b.node("GatherElements", {"x", "idx"}, {"z"}).attrs["axis"] = Attribute::of_int(2);
  b.node("DepthToSpace", {"x"}, {"w"}).attrs["blocksize"] = Attribute::of_int(1);
  b.g.topo_sort();
  const Graph g = prepared(b.g, 4, {2, 4, 5});
  EXPECT_EQ(g.outputs[0].shape, (Shape{4, 2, 2, 3}));
  EXPECT_EQ(g.outputs[1].shape, (Shape{4, 2, 3, 5}));
  EXPECT_EQ(g.outputs[2].shape, (Shape{4, 2, 4, 5}));
  EXPECT_EQ(test::count_ops(g, "Concat"), 0);  // not sub-batched
}

}  // namespace
}  // namespace sluice
