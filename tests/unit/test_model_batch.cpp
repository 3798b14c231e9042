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
using sluice::test::find_op;

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

namespace {

// x [1, 4, 3] -> Reshape [-1] -> Gather(axis 0, offsets) -> y: torch.export's spelling of as_strided.
Graph as_strided_model(Shape shape, std::vector<int64_t> offsets) {
  GraphBuilder b;
  b.input("x", {1, 4, 3}).output("y");
  b.ints("flat", {-1});
  b.g.constants["offsets"] = Tensor::from(DType::I64, std::move(shape), offsets);
  b.node("Relu", {"x"}, {"r"});
  b.node("Reshape", {"r", "flat"}, {"f"});
  b.node("Gather", {"f", "offsets"}, {"y"}).attrs["axis"] = Attribute::of_int(0);
  b.g.topo_sort();
  return b.g;
}

}  // namespace

TEST(BatchAdapt, AnAsStridedGatherOfTheWholeTensorInOrderIsAReshape) {
  std::vector<int64_t> offsets(12);
  for (int64_t i = 0; i < 12; ++i) offsets[static_cast<std::size_t>(i)] = i;
  const Graph g = prepared(as_strided_model({1, 12, 1}, offsets), 5, StaticBatch::Respecialize);
  EXPECT_EQ(g.outputs[0].shape, (Shape{5, 12, 1}));
  EXPECT_EQ(count_ops(g, "Gather"), 0);
  EXPECT_EQ(count_ops(g, "Concat"), 0);
}

TEST(BatchAdapt, AnAsStridedGatherWithinTheSampleBecomesAGatherAlongItsRows) {
  // The per-sample [4, 3] read transposed: y[0, c, r] = x[0, r, c], offset r x 3 + c.
  std::vector<int64_t> offsets;
  for (int64_t c = 0; c < 3; ++c)
    for (int64_t r = 0; r < 4; ++r) offsets.push_back(r * 3 + c);
  const Graph g = prepared(as_strided_model({1, 3, 4}, offsets), 3, StaticBatch::Respecialize);
  EXPECT_EQ(g.outputs[0].shape, (Shape{3, 3, 4}));
  const Node* gather = find_op(g, "Gather");
  ASSERT_NE(gather, nullptr);
  EXPECT_EQ(gather->get_int("axis", 0), 1);
  EXPECT_EQ(g.constant(gather->inputs[1])->shape, (Shape{3, 4}));
}

TEST(BatchAdapt, AnAsStridedGatherWithoutTheBatchInItsIndicesStaysSubBatched) {
  // Indices [2, 6]: their first axis is not the sample's, so the rows of y do not follow the batch.
  std::vector<int64_t> offsets = {0, 2, 4, 6, 8, 10, 1, 3, 5, 7, 9, 11};
  const std::string why = respecialize_error(as_strided_model({2, 6}, offsets), 3);
  EXPECT_NE(why.find("selects along the batch axis"), std::string::npos) << why;
}

TEST(BatchAdapt, AQueryThatDoesNotDependOnTheInputIsRepeatedForEverySample) {
  // transformers 4's attention at batch 1: k [B x heads, S, d] from the input, q [heads, Q, d] from
  // learned embeddings only (DETR's decoder queries); q does not broadcast over B x heads.
  GraphBuilder b;
  b.input("x", {1, 4, 3}).output("y");
  b.ints("heads", {2, 4, 3});  // [1 x 2, 4, 3] after a Tile of x to two heads' worth
  b.ints("two", {1, 2, 1});
  b.ints("back", {1, 2, 5, 4});
  b.floats("q", {2, 5, 3}, sluice::test::ramp(30));
  b.node("Tile", {"x", "two"}, {"x2"});  // [1, 8, 3]
  b.node("Reshape", {"x2", "heads"}, {"k"});
  b.node("Transpose", {"k"}, {"kt"}).attrs["perm"] = Attribute::of_ints({0, 2, 1});
  b.node("MatMul", {"q", "kt"}, {"s"});  // [2, 5, 4]
  b.node("Softmax", {"s"}, {"p"}).attrs["axis"] = Attribute::of_int(-1);
  b.node("Reshape", {"p", "back"}, {"y"});
  b.g.topo_sort();
  PrepareOptions o;
  o.batch_size = 3;
  o.sample_shape = {4, 3};
  o.static_batch = StaticBatch::Respecialize;
  const Graph g = prepare_graph(b.g, o);
  EXPECT_EQ(g.outputs[0].shape, (Shape{3, 2, 5, 4}));
  EXPECT_EQ(count_ops(g, "Tile"), 2);  // the model's own, and q's repeat
  EXPECT_EQ(count_ops(g, "Slice"), 0);
}

TEST(BatchAdapt, ABatchOneReshapeWithTwoReadingsTakesTheOneThatProvesTheGraph) {
  // [1, 12] -> [1, 1, 12] puts the batch on axis 0 or 1; a sequence-first layout [L = 1, N, C] then
  // moves axis 1 to the front, so only the second reading keeps the outputs' batch on axis 0.
  GraphBuilder b;
  b.input("x", {1, 4, 3}).output("y");
  b.ints("flat", {1, 12});
  b.ints("seq", {1, 1, 12});
  b.node("Reshape", {"x", "flat"}, {"f"});
  b.node("Reshape", {"f", "seq"}, {"s"});
  b.node("Transpose", {"s"}, {"y"}).attrs["perm"] = Attribute::of_ints({1, 0, 2});
  b.g.topo_sort();
  const Graph g = prepared(b.g, 3, StaticBatch::Respecialize);
  EXPECT_EQ(g.outputs[0].shape, (Shape{3, 1, 12}));
  EXPECT_EQ(count_ops(g, "Slice"), 0);
}
