// prepare_graph: input binding, preprocessing, heads and the passes together.
#include <gtest/gtest.h>

#include <filesystem>

#include "core/error.h"
#include "model/onnx_loader.h"
#include "model/prepare.h"
#include "test_model_util.h"

using namespace sluice;
using sluice::test::GraphBuilder;
using sluice::test::count_ops;
using sluice::test::find_op;

namespace {

// A little segmentation net as exporters write it: dynamic batch, Conv + BN + Relu, a Resize whose
// size comes from a Shape subgraph, Identity on the way out.
Graph seg_model(Shape in_shape = {-1, 3, 8, 8}) {
  GraphBuilder b;
  b.input("images", std::move(in_shape)).output("out");
  b.floats("w", {5, 3, 3, 3}, test::ramp(135)).floats("cb", {5}, test::ramp(5, 2));
  b.floats("g", {5}, {1.f, 2.f, 1.f, 1.f, 0.5f}).floats("be", {5}, test::ramp(5, 3));
  b.floats("m", {5}, test::ramp(5, 4)).floats("v", {5}, {1.f, 1.f, 2.f, 1.f, 1.f});
  b.ints("hw_idx", {2, 3}).ints("s0", {0}).ints("s2", {2});
  auto& c = b.node("Conv", {"images", "w", "cb"}, {"c"});
  c.attrs["strides"] = Attribute::of_ints({2, 2});
  c.attrs["pads"] = Attribute::of_ints({1, 1, 1, 1});
  b.node("BatchNormalization", {"c", "g", "be", "m", "v"}, {"bn"});
  b.node("Relu", {"bn"}, {"r"});
  b.node("Shape", {"images"}, {"shape"});
  b.node("Gather", {"shape", "hw_idx"}, {"hw"});
  b.node("Slice", {"r_shape", "s0", "s2"}, {"nc"});
  b.node("Shape", {"r"}, {"r_shape"});
  b.node("Concat", {"nc", "hw"}, {"sizes"}).attrs["axis"] = Attribute::of_int(0);
  b.node("Resize", {"r", "", "", "sizes"}, {"up"}).attrs["mode"] = Attribute::of_string("linear");
  b.node("Identity", {"up"}, {"out"});
  b.g.topo_sort();
  return b.g;
}

PrepareOptions options(int64_t batch) {
  PrepareOptions o;
  o.batch_size = batch;
  o.sample_shape = {3, 8, 8};
  return o;
}

void expect_all_static(const Graph& g) {
  for (const auto& n : g.nodes)
    for (const auto& t : n.outputs) {
      const ValueInfo* v = g.value(t);
      ASSERT_NE(v, nullptr) << t;
      EXPECT_NE(v->dtype, DType::Undefined) << t;
      for (int64_t d : v->shape) EXPECT_GE(d, 0) << t;
    }
}

}  // namespace

TEST(PrepareGraph, BindsTheInputFoldsFusesAndKeepsModelOutputsWithoutHeads) {
  const Graph g = prepare_graph(seg_model(), options(4));
  ASSERT_EQ(g.inputs.size(), 1u);
  EXPECT_EQ(g.inputs[0].name, "input");
  EXPECT_EQ(g.inputs[0].shape, (Shape{4, 3, 8, 8}));
  ASSERT_EQ(g.outputs.size(), 1u);
  EXPECT_EQ(g.outputs[0].name, "out");
  EXPECT_EQ(g.outputs[0].shape, (Shape{4, 5, 8, 8}));
  EXPECT_EQ(g.outputs[0].dtype, DType::F32);
  // Conv+BN+Relu -> FusedConv(Relu); the Shape subgraph is gone; Resize writes the output directly.
  ASSERT_EQ(g.nodes.size(), 2u) << g.summary();
  EXPECT_EQ(g.nodes[0].op, "FusedConv");
  EXPECT_EQ(g.nodes[0].inputs[0], "input");
  EXPECT_EQ(g.nodes[0].get_string("activation", ""), "Relu");
  EXPECT_EQ(g.nodes[1].op, "Resize");
  EXPECT_EQ(g.nodes[1].outputs[0], "out");
  EXPECT_EQ(g.constant(g.nodes[1].inputs[3])->as_int64(), (std::vector<int64_t>{4, 5, 8, 8}));
  expect_all_static(g);
  EXPECT_EQ(g.constants.count("g"), 0u);  // the BN parameters are dead after folding
}

TEST(PrepareGraph, WithoutFusionTheBatchNormAndReluStay) {
  PrepareOptions o = options(2);
  o.fuse = false;
  const Graph g = prepare_graph(seg_model(), o);
  EXPECT_EQ(count_ops(g, "BatchNormalization"), 1);
  EXPECT_EQ(count_ops(g, "Relu"), 1);
  EXPECT_EQ(count_ops(g, "FusedConv"), 0);
  expect_all_static(g);
}

TEST(PrepareGraph, AFixedInputShapeThatDisagreesIsAnInputErrorWithBothShapes) {
  PrepareOptions o = options(4);
  o.sample_shape = {3, 9, 8};
  try {
    prepare_graph(seg_model({1, 3, 8, 8}), o);
    FAIL() << "no error";
  } catch (const InputError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("[1,3,8,8]"), std::string::npos) << m;
    EXPECT_NE(m.find("[4,3,9,8]"), std::string::npos) << m;
    EXPECT_NE(m.find("'images'"), std::string::npos) << m;
  }
  // The fixed shape that matches is fine, and so is another batch (model/batch_adapt.h).
  EXPECT_EQ(prepare_graph(seg_model({1, 3, 8, 8}), options(1)).inputs[0].shape, (Shape{1, 3, 8, 8}));
  EXPECT_EQ(prepare_graph(seg_model({1, 3, 8, 8}), options(4)).inputs[0].shape, (Shape{4, 3, 8, 8}));
}

TEST(PrepareGraph, Uint8InputGetsANormalizeNodeInFront) {
  PrepareOptions o = options(2);
  o.input_dtype = DType::U8;
  o.scale = 1.f / 255.f;
  o.mean = {0.5f, 0.4f, 0.3f};
  o.stddev = {0.2f, 0.2f, 0.2f};
  const Graph g = prepare_graph(seg_model(), o);
  EXPECT_EQ(g.inputs[0].dtype, DType::U8);
  ASSERT_EQ(g.nodes[0].op, "Normalize");
  EXPECT_EQ(g.nodes[0].domain, "sluice");
  EXPECT_EQ(g.nodes[0].inputs[0], "input");
  EXPECT_FLOAT_EQ(g.nodes[0].get_float("scale", 0.f), 1.f / 255.f);
  EXPECT_EQ(g.nodes[0].get_floats("mean"), o.mean);
  EXPECT_EQ(g.nodes[0].get_floats("std"), o.stddev);
  EXPECT_EQ(g.value(g.nodes[0].outputs[0])->dtype, DType::F32);
  EXPECT_EQ(g.nodes[1].inputs[0], g.nodes[0].outputs[0]);

  o.mean = {0.1f, 0.2f};  // two values for three channels
  EXPECT_THROW(prepare_graph(seg_model(), o), UsageError);
}

TEST(PrepareGraph, HeadsProduceTheSpecOutputsWithTheirTypes) {
  PrepareOptions o = options(2);
  OutputSpec logits{"logits", OutputSpec::Kind::Logits, DType::F16, 0};
  OutputSpec argmax{"argmax", OutputSpec::Kind::ArgMax, DType::Undefined, 0};  // automatic: uint8
  OutputSpec softmax{"softmax", OutputSpec::Kind::Softmax, DType::F32, 0};
  OutputSpec topk{"topk", OutputSpec::Kind::TopK, DType::BF16, 3};
  o.outputs = {logits, argmax, softmax, topk};
  const Graph g = prepare_graph(seg_model(), o);
  ASSERT_EQ(g.outputs.size(), 5u);
  auto out = [&](std::size_t i) { return g.outputs[i]; };
  EXPECT_EQ(out(0).name, "logits");
  EXPECT_EQ(out(0).dtype, DType::F16);
  EXPECT_EQ(out(0).shape, (Shape{2, 5, 8, 8}));
  EXPECT_EQ(out(1).name, "argmax");
  EXPECT_EQ(out(1).dtype, DType::U8);
  EXPECT_EQ(out(1).shape, (Shape{2, 8, 8}));
  EXPECT_EQ(out(2).name, "softmax");
  EXPECT_EQ(out(2).dtype, DType::F32);
  EXPECT_EQ(out(2).shape, (Shape{2, 5, 8, 8}));
  EXPECT_EQ(out(3).name, "topk_values");
  EXPECT_EQ(out(3).dtype, DType::BF16);
  EXPECT_EQ(out(3).shape, (Shape{2, 3, 8, 8}));
  EXPECT_EQ(out(4).name, "topk_indices");
  EXPECT_EQ(out(4).dtype, DType::I32);
  const Node* am = find_op(g, "ArgMaxCast");
  ASSERT_NE(am, nullptr);
  EXPECT_EQ(am->domain, "sluice");
  EXPECT_EQ(am->get_int("axis", -1), 1);
  EXPECT_EQ(am->get_int("to", 0), 2);
  EXPECT_EQ(find_op(g, "Softmax")->get_int("axis", -1), 1);
  EXPECT_EQ(find_op(g, "TopK")->get_int("axis", -1), 1);
  EXPECT_EQ(count_ops(g, "Identity"), 0);
  expect_all_static(g);
}

TEST(PrepareGraph, Float32LogitsAreTheModelOutputItselfAndBadSpecsAreRefused) {
  PrepareOptions o = options(1);
  o.outputs = {OutputSpec{"logits", OutputSpec::Kind::Logits, DType::F32, 0}};
  const Graph g = prepare_graph(seg_model(), o);
  EXPECT_EQ(count_ops(g, "Identity"), 0);
  EXPECT_EQ(find_op(g, "Resize")->outputs[0], "logits");
  o.outputs = {OutputSpec{"argmax", OutputSpec::Kind::ArgMax, DType::F32, 0}};
  EXPECT_THROW(prepare_graph(seg_model(), o), UsageError);
  o.outputs = {OutputSpec{"topk", OutputSpec::Kind::TopK, DType::F32, 6}};  // only 5 classes
  EXPECT_THROW(prepare_graph(seg_model(), o), InputError);
}

TEST(PrepareGraph, ModelsWithSeveralInputsOrDataDependentShapeOpsAreRefused) {
  GraphBuilder two;
  two.input("a", {1, 2}).input("b", {1, 2}).output("y");
  two.node("Add", {"a", "b"}, {"y"});
  PrepareOptions o;
  o.sample_shape = {2};
  EXPECT_THROW(prepare_graph(two.g, o), InputError);

  GraphBuilder f;  // NonZero's output shape depends on the data
  f.input("x", {-1, 2}).output("y");
  f.node("NonZero", {"x"}, {"y"});
  try {
    prepare_graph(f.g, o);
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("NonZero"), std::string::npos) << e.what();
  }
}

TEST(PrepareGraph, TheQuickstartModelPreparesToStaticShapes) {
  const std::string path = std::string(SLUICE_SOURCE_DIR) + "/jobs/models/quickstart.onnx";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " is not there";
  PrepareOptions o;
  o.batch_size = 3;
  o.sample_shape = {3, 64, 64};
  o.outputs = {OutputSpec{"logits", OutputSpec::Kind::Logits, DType::F32, 0},
               OutputSpec{"argmax", OutputSpec::Kind::ArgMax, DType::Undefined, 0}};
  const Graph g = prepare_graph(load_onnx(path), o);
  EXPECT_EQ(g.outputs[0].shape, (Shape{3, 8, 64, 64}));
  EXPECT_EQ(g.outputs[1].shape, (Shape{3, 64, 64}));
  EXPECT_EQ(g.outputs[1].dtype, DType::U8);
  EXPECT_GE(count_ops(g, "FusedConv"), 3);
  for (const char* op : {"Shape", "Gather", "Identity", "Constant", "BatchNormalization", "Unsqueeze"})
    EXPECT_EQ(count_ops(g, op), 0) << op;
  expect_all_static(g);
}
