// Static-batch models at another batch (model/batch_adapt.h): which graphs are re-specialized, why
// the others are not, and the shape of the sub-batched graph.
#include <gtest/gtest.h>

#include "core/error.h"
#include "model/batch_adapt.h"
#include "model/prepare.h"
#include "test_model_util.h"

using namespace sluice;
using sluice::test::GraphBuilder;
using sluice::test::count_ops;

namespace {

// x [1, 4, 3] -> Relu -> Reshape(target) -> y, with the target given.
Graph reshape_model(std::vector<int64_t> target) {
  GraphBuilder b;
  b.input("x", {1, 4, 3}).output("y");
  b.ints("t", std::move(target));
  b.node("Relu", {"x"}, {"r"});
  b.node("Reshape", {"r", "t"}, {"y"});
  b.g.topo_sort();
  return b.g;
}

Graph prepared(Graph g, int64_t batch, StaticBatch mode) {
  PrepareOptions o;
  o.batch_size = batch;
  o.sample_shape = {4, 3};
  o.static_batch = mode;
  return prepare_graph(std::move(g), o);
}

std::string respecialize_error(Graph g, int64_t batch) {
  try {
    prepared(std::move(g), batch, StaticBatch::Respecialize);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(BatchAdapt, ABatchInAReshapeTargetIsRewritten) {
  const Graph g = prepared(reshape_model({1, -1}), 5, StaticBatch::Respecialize);
  EXPECT_EQ(g.outputs[0].shape, (Shape{5, 12}));
  EXPECT_EQ(count_ops(g, "Concat"), 0);
  const Graph h = prepared(reshape_model({1, 12}), 3, StaticBatch::Respecialize);
  EXPECT_EQ(h.outputs[0].shape, (Shape{3, 12}));
}

TEST(BatchAdapt, AReshapeThatMergesTheBatchIsNotRespecializedButSubBatched) {
  // [1,4,3] -> [12]: the batch is folded into the only axis, and an output's rows are not samples.
  const std::string why = respecialize_error(reshape_model({12}), 4);
  EXPECT_NE(why.find("carries the batch merged with other axes"), std::string::npos) << why;
  // [1,4,3] -> [4,1,3]: the output's first axis is not the batch.
  const std::string why2 = respecialize_error(reshape_model({4, 1, 3}), 4);
  EXPECT_NE(why2.find("axis"), std::string::npos) << why2;
  // Sub-batches do not need the proof; the outputs must still have one row per sample, which [12] has
  // not.
  EXPECT_THROW(prepared(reshape_model({12}), 4, StaticBatch::Auto), InputError);
}

TEST(BatchAdapt, AClassTokenJoinedToABatchOfOneIsRepeatedForEverySample) {
  GraphBuilder b;
  b.input("x", {1, 4, 3}).output("y");
  b.floats("cls", {1, 1, 3}, {1.f, 2.f, 3.f});
  b.node("Concat", {"cls", "x"}, {"y"}).attrs["axis"] = Attribute::of_int(1);
  b.g.topo_sort();
  const Graph g = prepared(b.g, 3, StaticBatch::Respecialize);
  EXPECT_EQ(g.outputs[0].shape, (Shape{3, 5, 3}));
  EXPECT_EQ(count_ops(g, "Slice"), 0);
  ASSERT_EQ(count_ops(g, "Concat"), 1);
  for (const Node& n : g.nodes) {
    if (n.op != "Concat") continue;
    const Tensor* cls = g.constant(n.inputs[0]);
    ASSERT_NE(cls, nullptr);
    EXPECT_EQ(cls->shape, (Shape{3, 1, 3}));
    EXPECT_EQ(cls->as_float(), (std::vector<float>{1, 2, 3, 1, 2, 3, 1, 2, 3}));
  }
}

TEST(BatchAdapt, ConcatWithAConstantOfSeveralRowsThatLacksTheBatchIsSubBatched) {
  GraphBuilder b;
  b.input("x", {2, 4, 3}).output("y");
  b.floats("cls", {2, 1, 3}, {1.f, 2.f, 3.f, 4.f, 5.f, 6.f});
  b.node("Concat", {"cls", "x"}, {"y"}).attrs["axis"] = Attribute::of_int(1);
  b.g.topo_sort();
  const std::string why = respecialize_error(b.g, 4);
  EXPECT_NE(why.find("joins tensors that carry the batch with tensors that do not"), std::string::npos) << why;
  const Graph g = prepared(b.g, 4, StaticBatch::Auto);
  EXPECT_EQ(g.outputs[0].shape, (Shape{4, 5, 3}));
  EXPECT_EQ(count_ops(g, "Slice"), 2);                           // one per sub-batch
  EXPECT_EQ(count_ops(g, "Concat"), 2 + 1);                      // the model's, and the join
  EXPECT_EQ(g.constants.count("cls"), 1u);                       // shared, not copied
}

TEST(BatchAdapt, SubBatchesNeedAMultipleOfTheModelBatch) {
  Graph g = reshape_model({2, -1});
  g.inputs[0].shape = {2, 4, 3};
  EXPECT_EQ(prepared(g, 6, StaticBatch::SubBatch).outputs[0].shape, (Shape{6, 12}));
  EXPECT_EQ(prepared(g, 7, StaticBatch::Auto).outputs[0].shape, (Shape{7, 12}));  // re-specialized
  try {
    prepared(g, 7, StaticBatch::SubBatch);
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("multiple of 2"), std::string::npos) << e.what();
  }
}

TEST(BatchAdapt, ModeNamesRoundTrip) {
  for (StaticBatch s : {StaticBatch::Auto, StaticBatch::Respecialize, StaticBatch::SubBatch})
    EXPECT_EQ(static_batch_from_name(static_batch_name(s)), s);
  EXPECT_THROW(static_batch_from_name("sometimes"), UsageError);
}
