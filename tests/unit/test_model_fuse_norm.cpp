// The older exporters' element-wise spellings of LayerNormalization and Gelu become the ops
// (model/fuse_norm.cpp), and near-misses of the patterns stay as they are.
#include <gtest/gtest.h>

#include "core/error.h"
#include "model/prepare.h"
#include "test_model_util.h"

using namespace sluice;
using sluice::test::GraphBuilder;
using sluice::test::count_ops;
using sluice::test::find_op;

namespace {

// x [2, 5, 8] -> ReduceMean, Sub, Pow 2, ReduceMean, Add eps, Sqrt, Div, Mul g, Add b -> y
GraphBuilder decomposed_layernorm(float power = 2.f, bool extra_reader = false) {
  GraphBuilder b;
  b.input("x", {2, 5, 8}).output(extra_reader ? "z" : "y");
  b.ints("axes", {-1}).floats("two", {}, {power}).floats("eps", {}, {1e-5f});
  b.floats("g", {8}, std::vector<float>(8, 1.5f)).floats("beta", {8}, std::vector<float>(8, 0.25f));
  b.node("ReduceMean", {"x", "axes"}, {"m"});
  b.node("Sub", {"x", "m"}, {"d"});
  b.node("Pow", {"d", "two"}, {"p"});
  b.node("ReduceMean", {"p", "axes"}, {"v"});
  b.node("Add", {"v", "eps"}, {"ve"});
  b.node("Sqrt", {"ve"}, {"s"});
  b.node("Div", {"d", "s"}, {"n"});
  b.node("Mul", {"n", "g"}, {"nb"});
  b.node("Add", {"nb", "beta"}, {"y"});
  if (extra_reader) b.node("Add", {"y", "v"}, {"z"});  // the variance is read elsewhere too
  b.g.topo_sort();
  return b;
}

Graph prepared(Graph g, bool fuse = true) {
  PrepareOptions o;
  o.batch_size = 2;
  o.sample_shape = {5, 8};
  o.fuse = fuse;
  return prepare_graph(std::move(g), o);
}

}  // namespace

TEST(FuseNorm, TheDecomposedLayerNormBecomesOneNodeWithItsScaleBiasAndEpsilon) {
  const Graph g = prepared(decomposed_layernorm().g);
  ASSERT_EQ(g.nodes.size(), 1u);
  const Node* ln = find_op(g, "LayerNormalization");
  ASSERT_NE(ln, nullptr);
  EXPECT_EQ(ln->inputs[0], "input");
  EXPECT_EQ(ln->inputs[1], "g");
  EXPECT_EQ(ln->inputs[2], "beta");
  EXPECT_EQ(ln->get_int("axis", 0), 2);
  EXPECT_FLOAT_EQ(ln->get_float("epsilon", 0.f), 1e-5f);
  EXPECT_EQ(count_ops(prepared(decomposed_layernorm().g, false), "LayerNormalization"), 0);  // --no-fuse
}

TEST(FuseNorm, NearMissesOfTheLayerNormPatternStayUnfused) {
  EXPECT_EQ(count_ops(prepared(decomposed_layernorm(3.f).g), "LayerNormalization"), 0);       // a cube, not a square
  EXPECT_EQ(count_ops(prepared(decomposed_layernorm(2.f, true).g), "LayerNormalization"), 0);  // the variance escapes
}

TEST(FuseNorm, TheErfGeluOfTorchScriptBecomesGelu) {
  for (int form = 0; form < 2; ++form) {
    GraphBuilder b;
    b.input("x", {2, 5, 8}).output("y");
    b.floats("sqrt2", {}, {1.41421356f}).floats("one", {}, {1.f}).floats("half", {}, {0.5f});
    b.node("Div", {"x", "sqrt2"}, {"a"});
    b.node("Erf", {"a"}, {"e"});
    b.node("Add", {"e", "one"}, {"c"});
    if (form == 0) {
      b.node("Mul", {"x", "c"}, {"d"});
      b.node("Mul", {"d", "half"}, {"y"});
    } else {
      b.node("Mul", {"x", "half"}, {"h"});
      b.node("Mul", {"h", "c"}, {"y"});
    }
    b.g.topo_sort();
    const Graph g = prepared(b.g);
    ASSERT_EQ(g.nodes.size(), 1u) << form;
    EXPECT_EQ(g.nodes[0].op, "Gelu");
    EXPECT_EQ(g.nodes[0].get_string("approximate", "none"), "none");
  }
}

TEST(FuseNorm, AnErfWithAnotherScaleIsNotGelu) {
  GraphBuilder b;
  b.input("x", {2, 5, 8}).output("y");
  b.floats("k", {}, {2.f}).floats("one", {}, {1.f}).floats("half", {}, {0.5f});
  b.node("Div", {"x", "k"}, {"a"});
  b.node("Erf", {"a"}, {"e"});
  b.node("Add", {"e", "one"}, {"c"});
  b.node("Mul", {"x", "c"}, {"d"});
  b.node("Mul", {"d", "half"}, {"y"});
  b.g.topo_sort();
  EXPECT_EQ(count_ops(prepared(b.g), "Gelu"), 0);
}
