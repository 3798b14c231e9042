// The graph structure survives serialization (what rank 0 broadcasts to the other ranks).
#include <gtest/gtest.h>

#include "core/error.h"
#include "model/serialize.h"

using namespace sluice;

TEST(SerializeStructure, RoundTripsNodesAttributesAndValues) {
  Graph g;
  g.source = "m.onnx";
  g.opset = 17;
  g.inputs.push_back(ValueInfo{"input", DType::F32, {4, 3, 8, 8}});
  g.outputs.push_back(ValueInfo{"argmax", DType::U8, {4, 8, 8}});
  Node n;
  n.name = "conv0";
  n.op = "FusedConv";
  n.domain = "sluice";
  n.inputs = {"input", "w", "", "z"};
  n.outputs = {"y"};
  n.attrs["strides"] = Attribute::of_ints({2, 2});
  n.attrs["activation"] = Attribute::of_string("Clip");
  n.attrs["clip_max"] = Attribute::of_float(6.5f);
  n.attrs["group"] = Attribute::of_int(3);
  n.attrs["mean"] = Attribute::of_floats({0.5f, 0.25f});
  Attribute t;
  t.kind = Attribute::Kind::Tensor;
  t.t = std::make_shared<Tensor>(Tensor::from<int64_t>(DType::I64, {2}, {7, -9}));
  n.attrs["value"] = t;
  g.nodes.push_back(n);
  g.values["y"] = ValueInfo{"y", DType::F32, {4, 5, 4, 4}};
  g.constants["w"] = Tensor(DType::F32, {5, 3, 3, 3});  // not carried: the weights travel separately

  Graph h = deserialize_structure(serialize_structure(g));
  EXPECT_EQ(h.source, "m.onnx");
  EXPECT_EQ(h.opset, 17);
  ASSERT_EQ(h.nodes.size(), 1u);
  const Node& m = h.nodes[0];
  EXPECT_EQ(m.op, "FusedConv");
  EXPECT_EQ(m.domain, "sluice");
  EXPECT_EQ(m.inputs, n.inputs);
  EXPECT_EQ(m.get_ints("strides"), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(m.get_string("activation", ""), "Clip");
  EXPECT_FLOAT_EQ(m.get_float("clip_max", 0), 6.5f);
  EXPECT_EQ(m.get_int("group", 0), 3);
  EXPECT_EQ(m.get_floats("mean"), (std::vector<float>{0.5f, 0.25f}));
  EXPECT_EQ(m.attrs.at("value").t->as_int64(), (std::vector<int64_t>{7, -9}));
  EXPECT_EQ(h.values.at("y").shape, (Shape{4, 5, 4, 4}));
  EXPECT_EQ(h.outputs[0].dtype, DType::U8);
  EXPECT_TRUE(h.constants.empty());
}

TEST(SerializeStructure, RejectsTruncatedBytes) {
  Graph g;
  g.nodes.push_back(Node{"n", "Relu", "", {"x"}, {"y"}, {}});
  std::string b = serialize_structure(g);
  EXPECT_THROW(deserialize_structure(b.substr(0, b.size() - 3)), Error);
  EXPECT_THROW(deserialize_structure("garbage!"), Error);
}
