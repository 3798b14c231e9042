// fold_constants and infer_shapes on small graphs built in code.
#include <gtest/gtest.h>

#include "core/error.h"
#include "model/passes.h"
#include "test_model_util.h"

using namespace sluice;
using sluice::test::GraphBuilder;
using sluice::test::count_ops;

namespace {

Node& with_int(Node& n, const std::string& k, int64_t v) { n.attrs[k] = Attribute::of_int(v); return n; }
Node& with_ints(Node& n, const std::string& k, std::vector<int64_t> v) { n.attrs[k] = Attribute::of_ints(std::move(v)); return n; }
Node& with_str(Node& n, const std::string& k, std::string v) { n.attrs[k] = Attribute::of_string(std::move(v)); return n; }

// The shape of `name` after infer_shapes.
Shape shape_of(const Graph& g, const std::string& name) {
  const ValueInfo* v = g.value(name);
  return v ? v->shape : Shape{-99};
}

}  // namespace

// The TorchScript exporter computes Resize's target size at run time from the input's shape:
// Shape -> Gather -> Cast -> Mul -> Floor -> Cast -> Unsqueeze -> Concat with a Slice of the shape.
TEST(FoldConstants, ResizeSizeSubgraphFoldsOnceTheInputShapeIsStatic) {
  GraphBuilder b;
  b.input("x", {2, 3, 10, 8}).output("y");
  b.ints("idx_h", {2}, true).ints("idx_w", {3}, true).ints("zero", {0}).ints("two", {2}).ints("ax0", {0});
  b.floats("scale", {}, {1.5f});
  b.node("Shape", {"x"}, {"s"});
  b.node("Slice", {"s", "zero", "two"}, {"nc"});
  for (std::string d : {"h", "w"}) {
    with_int(b.node("Gather", {"s", "idx_" + d}, {d + "0"}), "axis", 0);
    with_int(b.node("Cast", {d + "0"}, {d + "f"}), "to", 1);
    b.node("Mul", {d + "f", "scale"}, {d + "m"});
    b.node("Floor", {d + "m"}, {d + "fl"});
    with_int(b.node("Cast", {d + "fl"}, {d + "i"}), "to", 7);
    b.node("Unsqueeze", {d + "i", "ax0"}, {d + "u"});
  }
  with_int(b.node("Concat", {"nc", "hu", "wu"}, {"sizes"}), "axis", 0);
  with_str(b.node("Resize", {"x", "", "", "sizes"}, {"y"}), "mode", "linear");
  Graph g = b.g;
  fold_constants(g);
  ASSERT_EQ(g.nodes.size(), 1u) << g.summary();
  EXPECT_EQ(g.nodes[0].op, "Resize");
  ASSERT_TRUE(g.is_constant("sizes"));
  EXPECT_EQ(g.constant("sizes")->as_int64(), (std::vector<int64_t>{2, 3, 15, 12}));
  infer_shapes(g);
  EXPECT_EQ(shape_of(g, "y"), (Shape{2, 3, 15, 12}));
  EXPECT_EQ(g.outputs[0].shape, (Shape{2, 3, 15, 12}));
  EXPECT_EQ(g.outputs[0].dtype, DType::F32);
}

TEST(FoldConstants, LeavesRuntimeDataAndDynamicShapesAlone) {
  GraphBuilder b;
  b.input("x", {-1, 4}).output("y").output("n");
  b.node("Relu", {"x"}, {"y"});
  b.node("Shape", {"x"}, {"n"});
  Graph g = b.g;
  fold_constants(g);
  EXPECT_EQ(g.nodes.size(), 2u);  // the batch is unknown, so Shape cannot fold
  EXPECT_FALSE(g.is_constant("n"));
}

TEST(FoldConstants, EvaluatesShapeArithmeticOps) {
  GraphBuilder b;
  b.input("x", {1}).output("out");
  b.ints("shape", {2, 3}).ints("start", {0}, true).ints("limit", {5}, true).ints("delta", {2}, true);
  b.ints("a", {1, 5, 3}).ints("c", {3, 5, 3}).ints("perm_src", {1, 2, 3, 4, 5, 6});
  auto& cos = b.node("ConstantOfShape", {"shape"}, {"ones"});
  cos.attrs["value"].kind = Attribute::Kind::Tensor;
  cos.attrs["value"].t = std::make_shared<Tensor>(Tensor::from(DType::I64, {1}, std::vector<int64_t>{7}));
  b.node("Range", {"start", "limit", "delta"}, {"r"});               // [0, 2, 4]
  b.node("Equal", {"a", "c"}, {"eq"});                              // [0, 1, 1]
  b.node("Where", {"eq", "a", "r"}, {"w"});                         // [0, 5, 3]
  b.node("Expand", {"w", "shape"}, {"e"});                          // [[0,5,3],[0,5,3]]
  b.node("Reshape", {"perm_src", "shape"}, {"m"});
  with_ints(b.node("Transpose", {"m"}, {"t"}), "perm", {1, 0});     // [[1,4],[2,5],[3,6]]
  b.node("Div", {"perm_src", "delta"}, {"half"});                   // integer division truncates
  b.node("Sub", {"e", "ones"}, {"d"});
  b.node("Identity", {"x"}, {"out"});
  Graph g = b.g;
  fold_constants(g);
  EXPECT_EQ(g.nodes.size(), 1u);
  EXPECT_EQ(g.constant("ones")->as_int64(), (std::vector<int64_t>(6, 7)));
  EXPECT_EQ(g.constant("r")->as_int64(), (std::vector<int64_t>{0, 2, 4}));
  EXPECT_EQ(g.constant("eq")->dtype, DType::Bool);
  EXPECT_EQ(g.constant("eq")->as_int64(), (std::vector<int64_t>{0, 1, 1}));
  EXPECT_EQ(g.constant("w")->as_int64(), (std::vector<int64_t>{0, 5, 3}));
  EXPECT_EQ(g.constant("e")->shape, (Shape{2, 3}));
  EXPECT_EQ(g.constant("t")->shape, (Shape{3, 2}));
  EXPECT_EQ(g.constant("t")->as_int64(), (std::vector<int64_t>{1, 4, 2, 5, 3, 6}));
  EXPECT_EQ(g.constant("half")->as_int64(), (std::vector<int64_t>{0, 1, 1, 2, 2, 3}));
  EXPECT_EQ(g.constant("d")->as_int64(), (std::vector<int64_t>{-7, -2, -4, -7, -2, -4}));
}

TEST(FoldConstants, SliceWithNegativeStepAndGatherOfConstants) {
  GraphBuilder b;
  b.input("x", {1}).output("x2");
  b.ints("v", {10, 11, 12, 13, 14}).ints("st", {-1}).ints("en", {-100}).ints("ax", {0}).ints("sp", {-2});
  b.ints("ix", {4, -5});
  b.node("Slice", {"v", "st", "en", "ax", "sp"}, {"rev"});  // [14, 12, 10]
  b.node("Gather", {"v", "ix"}, {"gi"});                     // [14, 10]
  b.node("Identity", {"x"}, {"x2"});
  Graph g = b.g;
  fold_constants(g);
  EXPECT_EQ(g.constant("rev")->as_int64(), (std::vector<int64_t>{14, 12, 10}));
  EXPECT_EQ(g.constant("gi")->as_int64(), (std::vector<int64_t>{14, 10}));
}

TEST(InferShapes, ConvolutionsAndPools) {
  GraphBuilder b;
  b.input("x", {2, 4, 17, 16}).output("c").output("ct").output("mp").output("ap").output("gp").output("same");
  b.floats("w", {6, 2, 3, 3}, std::vector<float>(108, 0.f));
  b.floats("wt", {4, 3, 4, 4}, std::vector<float>(192, 0.f));
  auto& c = b.node("Conv", {"x", "w"}, {"c"});
  with_int(c, "group", 2);
  with_ints(c, "strides", {2, 2});
  with_ints(c, "pads", {1, 1, 1, 1});
  with_ints(c, "dilations", {2, 1});
  auto& ct = b.node("ConvTranspose", {"x", "wt"}, {"ct"});
  with_ints(ct, "strides", {2, 2});
  with_ints(ct, "pads", {1, 1, 1, 1});
  auto& mp = b.node("MaxPool", {"x"}, {"mp"});
  with_ints(mp, "kernel_shape", {3, 3});
  with_ints(mp, "strides", {2, 2});
  with_int(mp, "ceil_mode", 1);
  auto& ap = b.node("AveragePool", {"x"}, {"ap"});
  with_ints(ap, "kernel_shape", {2, 2});
  with_ints(ap, "strides", {2, 2});
  b.node("GlobalAveragePool", {"x"}, {"gp"});
  auto& same = b.node("Conv", {"x", "w"}, {"same"});
  with_int(same, "group", 2);
  with_ints(same, "strides", {2, 2});
  with_str(same, "auto_pad", "SAME_UPPER");
  Graph g = b.g;
  infer_shapes(g);
  EXPECT_EQ(shape_of(g, "c"), (Shape{2, 6, 8, 8}));    // H: (17+2-5)/2+1, W: (16+2-3)/2+1
  EXPECT_EQ(shape_of(g, "ct"), (Shape{2, 3, 34, 32}));  // 2*(17-1)+4-2, 2*(16-1)+4-2
  EXPECT_EQ(shape_of(g, "mp"), (Shape{2, 4, 8, 8}));    // ceil((17-3)/2)+1 = 8, ceil(13/2)+1 = 8
  EXPECT_EQ(shape_of(g, "ap"), (Shape{2, 4, 8, 8}));
  EXPECT_EQ(shape_of(g, "gp"), (Shape{2, 4, 1, 1}));
  EXPECT_EQ(shape_of(g, "same"), (Shape{2, 6, 9, 8}));
}

TEST(InferShapes, DataMovementAndReductions) {
  GraphBuilder b;
  b.input("x", {2, 3, 4, 5}).input("v", {2, 7}).output("fl").output("rs").output("tr").output("sq").output("us")
      .output("cc").output("pd").output("sl").output("ga").output("am").output("tk").output("rm").output("gm")
      .output("mm").output("sm").output("cs").output("rz");
  b.ints("shape", {0, -1, 10}).ints("ax1", {1}).ints("ax02", {0, -1}).ints("pads", {0, 0, 1, 2, 0, 0, 3, 4});
  b.ints("st", {1}).ints("en", {-1}).ints("ax3", {3}).ints("idx", {0, 2, 2, 1}).ints("k", {2}).ints("ax23", {2, 3});
  b.floats("wg", {7, 6}, std::vector<float>(42, 0.f)).floats("wm", {5, 9}, std::vector<float>(45, 0.f));
  b.floats("scales", {4}, {1.f, 1.f, 2.f, 1.5f});
  with_int(b.node("Flatten", {"x"}, {"fl"}), "axis", 2);
  b.node("Reshape", {"x", "shape"}, {"rs"});
  with_ints(b.node("Transpose", {"x"}, {"tr"}), "perm", {0, 2, 3, 1});
  b.node("Unsqueeze", {"x", "ax02"}, {"us"});
  b.node("Squeeze", {"us", "ax02"}, {"sq"});
  with_int(b.node("Concat", {"x", "x"}, {"cc"}), "axis", -1);
  b.node("Pad", {"x", "pads"}, {"pd"});
  b.node("Slice", {"x", "st", "en", "ax3"}, {"sl"});
  with_int(b.node("Gather", {"x", "idx"}, {"ga"}), "axis", 1);
  with_int(with_int(b.node("ArgMax", {"x"}, {"am"}), "axis", 1), "keepdims", 0);
  with_int(b.node("TopK", {"x", "k"}, {"tk", "tki"}), "axis", 1);
  b.node("ReduceMean", {"x", "ax23"}, {"rm"});
  with_int(b.node("Gemm", {"v", "wg"}, {"gm"}), "transB", 0);
  b.node("MatMul", {"x", "wm"}, {"mm"});
  b.node("Softmax", {"x"}, {"sm"});
  with_int(b.node("Cast", {"x"}, {"cs"}), "to", 10);
  b.node("Resize", {"x", "", "scales"}, {"rz"});
  Graph g = b.g;
  infer_shapes(g);
  EXPECT_EQ(shape_of(g, "fl"), (Shape{6, 20}));
  EXPECT_EQ(shape_of(g, "rs"), (Shape{2, 6, 10}));
  EXPECT_EQ(shape_of(g, "tr"), (Shape{2, 4, 5, 3}));
  EXPECT_EQ(shape_of(g, "us"), (Shape{1, 2, 3, 4, 5, 1}));
  EXPECT_EQ(shape_of(g, "sq"), (Shape{2, 3, 4, 5}));
  EXPECT_EQ(shape_of(g, "cc"), (Shape{2, 3, 4, 10}));
  EXPECT_EQ(shape_of(g, "pd"), (Shape{2, 3, 8, 11}));
  EXPECT_EQ(shape_of(g, "sl"), (Shape{2, 3, 4, 3}));
  EXPECT_EQ(shape_of(g, "ga"), (Shape{2, 4, 4, 5}));
  EXPECT_EQ(shape_of(g, "am"), (Shape{2, 4, 5}));
  EXPECT_EQ(g.value("am")->dtype, DType::I64);
  EXPECT_EQ(shape_of(g, "tk"), (Shape{2, 2, 4, 5}));
  EXPECT_EQ(g.value("tki")->dtype, DType::I64);
  EXPECT_EQ(shape_of(g, "rm"), (Shape{2, 3, 1, 1}));
  EXPECT_EQ(shape_of(g, "gm"), (Shape{2, 6}));
  EXPECT_EQ(shape_of(g, "mm"), (Shape{2, 3, 4, 9}));
  EXPECT_EQ(shape_of(g, "sm"), (Shape{2, 3, 4, 5}));
  EXPECT_EQ(g.value("cs")->dtype, DType::F16);
  EXPECT_EQ(shape_of(g, "rz"), (Shape{2, 3, 8, 7}));  // floor(5 * 1.5)
}

TEST(InferShapes, InconsistentShapesAndRuntimeShapeValuesAreInputErrors) {
  {
    GraphBuilder b;
    b.input("x", {2, 3}).input("z", {4}).output("y");
    b.node("Add", {"x", "z"}, {"y"});
    Graph g = b.g;
    try {
      infer_shapes(g);
      FAIL() << "no error";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("[2,3] and [4] do not broadcast"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("Add 'Add_0'"), std::string::npos) << e.what();
    }
  }
  {
    GraphBuilder b;
    b.input("x", {2, 3}).input("s", {2}, DType::I64).output("y");
    b.node("Reshape", {"x", "s"}, {"y"});
    Graph g = b.g;
    try {
      infer_shapes(g);
      FAIL() << "no error";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("computed at run time"), std::string::npos) << e.what();
    }
  }
  {
    GraphBuilder b;
    b.input("x", {-1, 3}).output("y");
    b.node("Relu", {"x"}, {"y"});
    Graph g = b.g;
    EXPECT_THROW(infer_shapes(g), InputError);  // a dynamic input must be fixed first
  }
  {
    GraphBuilder b;
    b.input("x", {1, 8, 5, 5}).output("y");
    b.floats("w", {4, 3, 3, 3}, std::vector<float>(108, 0.f));
    b.node("Conv", {"x", "w"}, {"y"});
    Graph g = b.g;
    EXPECT_THROW(infer_shapes(g), InputError);  // 8 channels into weights for 3
  }
}

TEST(FoldConstants, IdentityOfAWeightIsAnAliasNotACopy) {
  GraphBuilder b;
  b.input("x", {1, 2, 4, 4}).output("y");
  b.floats("w", {2, 2, 1, 1}, {1.f, 0.f, 0.f, 1.f});
  b.node("Identity", {"w"}, {"w_shared"});
  b.node("Conv", {"x", "w_shared"}, {"y"});
  Graph g = b.g;
  fold_constants(g);
  ASSERT_EQ(g.nodes.size(), 1u);
  EXPECT_EQ(g.nodes[0].inputs[1], "w");
  EXPECT_FALSE(g.is_constant("w_shared"));
}
