// The op registries held to each other.  The model layer's op table (model/shape_inference.h: an
// op's input and output counts beside its shape rule) is what the loader accepts; each engine's
// registry (engine/cpu/registry.cpp, engine/cuda/builder.cpp) is what it runs, and `sluice check`
// reads it.  A kernel with no row in the table, a row with no CPU kernel (unless the op only folds),
// or a row the CUDA engine lacks fails here.  Then the folder against the CPU engine for the ops whose
// constant evaluation is new: the same node folded on constants and run with its input fed at run
// time gives the same values.
#include <gtest/gtest.h>

#include <set>

#include "engine/cpu/kernel.h"
#include "model/canonicalize.h"
#include "model/const_eval.h"
#include "model/graph_util.h"
#include "model/op_arity.h"
#include "model/prepare.h"
#include "model/shape_inference.h"
#include "test_cpu_util.h"

#ifdef SLUICE_HAVE_CUDA
#include "engine/cuda/cuda_engine.h"
#endif

namespace sluice {
namespace {

using cputest::as;
using cputest::f32;
using cputest::GraphBuilder;
using testsupport::set_int;
using testsupport::set_string;

std::set<std::string> keys(const std::vector<std::string>& v) { return {v.begin(), v.end()}; }

// "sluice.FusedConv" -> ("sluice", "FusedConv"), "Conv" -> ("", "Conv").
std::pair<std::string, std::string> split_key(const std::string& key) {
  const std::size_t dot = key.find('.');
  if (dot == std::string::npos) return {"", key};
  return {key.substr(0, dot), key.substr(dot + 1)};
}

// Ops the engines keep kernels for though the loader rewrites them first (Upsample into Resize,
// Dropout into Identity: model/canonicalize.h), so they have no row of their own.
bool rewritten_at_load(const std::string& key) { return is_convertible_op(key); }

void expect_rows_for(const std::vector<std::string>& registry, const char* engine) {
  const std::set<std::string> rows = keys(shape_rule_ops());
  for (const std::string& key : registry) {
    if (rewritten_at_load(key)) continue;
    EXPECT_TRUE(rows.count(key)) << key << " has a " << engine
                                 << " kernel but no row (shape rule) in the op table, model/shape_inference.cpp";
  }
}

TEST(OpRegistry, EveryCpuKernelHasAShapeRule) { expect_rows_for(cpu::cpu_kernel_ops(), "CPU"); }

TEST(OpRegistry, EveryShapeRuleHasACpuKernelUnlessTheOpOnlyFolds) {
  const std::set<std::string> cpu = keys(cpu::cpu_kernel_ops());
  for (const std::string& key : shape_rule_ops()) {
    if (is_fold_only_op(key)) continue;  // Range, Size, If: folded, or refused by prepare_graph
    EXPECT_TRUE(cpu.count(key)) << key << " has a shape rule but no CPU kernel (engine/cpu/registry.cpp)";
  }
}

#ifdef SLUICE_HAVE_CUDA
TEST(OpRegistry, TheCudaRegistryAndTheShapeRulesHoldTheSameOps) {
  expect_rows_for(cuda::implemented_ops(), "CUDA");
  // The CUDA engine never meets a Constant, a Shape or a ConstantOfShape: prepare_graph folds them
  // (the CPU engine keeps kernels for graphs built by hand).  It lacks no other op.
  const std::set<std::string> folded = {"Constant", "Shape", "ConstantOfShape"};
  const std::set<std::string> cuda = keys(cuda::implemented_ops());
  for (const std::string& key : shape_rule_ops()) {
    if (is_fold_only_op(key) || folded.count(key)) continue;
    EXPECT_TRUE(cuda.count(key)) << key << " has a shape rule but no CUDA lowering (engine/cuda/builder.cpp)";
  }
  for (const std::string& key : folded) EXPECT_FALSE(cuda.count(key)) << key << " is lowered now: take it off `folded`";
}
#endif

TEST(OpRegistry, EveryRegisteredOpHasItsInputAndOutputCounts) {
  std::vector<std::string> all = cpu::cpu_kernel_ops();
#ifdef SLUICE_HAVE_CUDA
  for (const std::string& key : cuda::implemented_ops()) all.push_back(key);
#endif
  for (const std::string& key : shape_rule_ops()) all.push_back(key);
  for (const std::string& key : all) {
    if (rewritten_at_load(key)) continue;
    const auto [domain, op] = split_key(key);
    const OpArity* a = op_arity(domain, op);
    ASSERT_NE(a, nullptr) << key << " has no input and output counts";
    EXPECT_EQ(a, shape_rule_arity(key)) << key;
    EXPECT_LE(a->min_in, a->max_in) << key;
    EXPECT_LE(a->min_out, a->max_out) << key;
    EXPECT_GE(a->min_out, 1u) << key;
  }
  // Off the table: no counts, whatever the domain.
  EXPECT_EQ(op_arity("", "Hardmax"), nullptr);
  EXPECT_EQ(op_arity("", "FusedConv"), nullptr);
  EXPECT_EQ(op_arity("com.microsoft", "Conv"), nullptr);
  EXPECT_NE(op_arity("ai.onnx", "Conv"), nullptr);
  EXPECT_EQ(op_key("ai.onnx", "Conv"), "Conv");
  EXPECT_EQ(op_key("sluice", "FusedConv"), "sluice.FusedConv");
}

TEST(OpRegistry, EveryEvaluatedOpHasAShapeRule) {
  const std::set<std::string> rows = keys(shape_rule_ops());
  for (const std::string& op : evaluated_ops())
    EXPECT_TRUE(rows.count(op)) << op << " is evaluated by the folder but has no row in the op table";
  for (const std::string op : {"DepthToSpace", "SpaceToDepth", "GatherElements", "ScatterElements"})
    EXPECT_TRUE(keys(evaluated_ops()).count(op)) << op;
}

TEST(OpRegistry, TheLoaderAcceptsTheTableLessTheOpsThatOnlyFold) {
  std::set<std::string> want;
  for (const std::string& key : shape_rule_ops()) {
    const auto [domain, op] = split_key(key);
    EXPECT_EQ(domain == "sluice", is_sluice_op(op)) << key << ": sluice ops are model/canonicalize.h's is_sluice_op";
    if (!is_fold_only_op(op)) want.insert(op);
  }
  EXPECT_EQ(keys(supported_ops()), want);
  EXPECT_EQ(keys(supported_ops()).size(), supported_ops().size()) << "an op is listed twice";
  for (const std::string op : {"Conv", "GridSample", "ReduceL1", "ReduceSumSquare", "Attention", "Detections"})
    EXPECT_TRUE(want.count(op)) << op;
  for (const std::string op : {"Hardmax", "Range", "If", "Upsample"}) EXPECT_FALSE(want.count(op)) << op;
}

TEST(OpRegistry, AnOpOffTheTableHasNoShapeAndSluiceOpsNeedTheirDomain) {
  GraphBuilder b({2, 3});
  const ValueInfo x{"x", DType::F32, {2, 3}};
  std::vector<ValueInfo> out;
  std::string why;
  Node n;
  n.op = "Hardmax";
  n.inputs = {"x"};
  n.outputs = {"y"};
  EXPECT_FALSE(infer_node(b.g, n, {&x}, out, why));
  EXPECT_NE(why.find("cannot infer the shape of op Hardmax"), std::string::npos) << why;
  n.op = "Normalize";  // sluice.Normalize, in the default domain
  EXPECT_FALSE(infer_node(b.g, n, {&x}, out, why));
  n.domain = "sluice";
  ASSERT_TRUE(infer_node(b.g, n, {&x}, out, why)) << why;
  EXPECT_EQ(out.at(0).shape, (Shape{2, 3}));
}

// ---- constant evaluation against the CPU engine ---------------------------------------------------

// The graph's one node folded with input 0 ("x") given as the constant `x`.
std::vector<Tensor> folded(const Graph& g, const Tensor& x) {
  const Node& n = g.nodes.at(0);
  std::vector<const Tensor*> in;
  std::vector<const Shape*> shapes;
  for (const std::string& name : n.inputs) {
    const Tensor* t = name == "x" ? &x : g.constant(name);
    in.push_back(t);
    shapes.push_back(t ? &t->shape : nullptr);
  }
  std::vector<Tensor> out;
  EXPECT_TRUE(evaluate_node(g, n, in, shapes, out)) << n.describe();
  return out;
}

// The node folded on x and run by the CPU engine on x: the same shape, and the same bits (data
// movement) or values within float rounding (arithmetic).
void expect_folds_as_it_runs(const GraphBuilder& b, uint32_t seed, bool exact = true) {
  const Shape& xs = b.g.inputs.at(0).shape;
  const std::vector<float> x = cputest::random_values(static_cast<std::size_t>(shape_numel(xs)), seed, -2.f, 2.f);
  const std::vector<Tensor> f = folded(b.g, Tensor::from(DType::F32, xs, x));
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].shape, b.g.outputs.at(0).shape);
  const std::vector<float> ran = cputest::run_f32(b.g, x);
  const std::vector<float> got = f[0].as_float();
  ASSERT_EQ(got.size(), ran.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (exact) ASSERT_EQ(got[i], ran[i]) << "element " << i;
    else ASSERT_NEAR(got[i], ran[i], 1e-5f * (1.f + std::fabs(ran[i]))) << "element " << i;
  }
}

TEST(OpRegistryFold, DepthToSpaceAndSpaceToDepthFoldAsTheyRun) {
  for (const std::string mode : {"DCR", "CRD"}) {
    SCOPED_TRACE(mode);
    GraphBuilder b({2, 12, 3, 2});
    Node& n = b.node("DepthToSpace", {"x"}, {f32("y", {2, 3, 6, 4})});
    set_int(n, "blocksize", 2);
    set_string(n, "mode", mode);
    b.output("y");
    expect_folds_as_it_runs(b, 1);
  }
  GraphBuilder b({2, 3, 6, 9});
  set_int(b.node("SpaceToDepth", {"x"}, {f32("y", {2, 27, 2, 3})}), "blocksize", 3);
  b.output("y");
  expect_folds_as_it_runs(b, 2);
}

TEST(OpRegistryFold, GatherElementsFoldsAsItRunsWithNegativeAndInt32Indices) {
  for (const DType it : {DType::I64, DType::I32}) {
    for (const int64_t axis : {0, 1, -1}) {
      SCOPED_TRACE(str(dtype_name(it), " axis ", axis));
      GraphBuilder b({3, 4, 5});
      const int64_t dim = axis == 0 ? 3 : axis == 1 ? 4 : 5;
      std::vector<int64_t> idx(2 * 3 * 4);
      for (std::size_t k = 0; k < idx.size(); ++k) idx[k] = static_cast<int64_t>(k * 7 % (2 * dim)) - dim;  // -dim .. dim-1
      b.constant("i", cast_tensor(Tensor::from(DType::I64, {2, 3, 4}, idx), it));
      set_int(b.node("GatherElements", {"x", "i"}, {f32("y", {2, 3, 4})}), "axis", axis);
      b.output("y");
      expect_folds_as_it_runs(b, 3);
    }
  }
}

TEST(OpRegistryFold, ScatterElementsFoldsAsItRunsForEveryReduction) {
  for (const std::string red : {"none", "add", "mul", "max", "min"}) {
    SCOPED_TRACE(red);
    GraphBuilder b({3, 5});
    // Duplicates on rows 0 and 2: the reductions combine them, none keeps the last.
    b.constant_i("i", {2, 5}, {0, 2, 2, 1, 0, 0, 2, 2, 1, -3});
    b.random_f("u", {2, 5}, 4, -2.f, 2.f);
    Node& n = b.node("ScatterElements", {"x", "i", "u"}, {f32("y", {3, 5})});
    set_string(n, "reduction", red);
    b.output("y");
    expect_folds_as_it_runs(b, 5, red == "none" || red == "max" || red == "min");
  }
}

TEST(OpRegistryFold, ReduceL1AndReduceSumSquareFoldAsTheyRun) {
  for (const std::string op : {"ReduceL1", "ReduceSumSquare"}) {
    SCOPED_TRACE(op);
    GraphBuilder b({2, 3, 4});
    b.constant_i("axes", {2}, {0, 2});
    b.node(op, {"x", "axes"}, {f32("y", {1, 3, 1})});
    b.output("y");
    expect_folds_as_it_runs(b, 6, false);
    // And against the definition: sum |x| and sum x^2 over axes 0 and 2.
    const std::vector<float> x = cputest::random_values(24, 6, -2.f, 2.f);
    const std::vector<float> y = cputest::run_f32(b.g, x);
    for (int64_t c = 0; c < 3; ++c) {
      double want = 0;
      for (int64_t n = 0; n < 2; ++n)
        for (int64_t w = 0; w < 4; ++w) {
          const double v = x[static_cast<std::size_t>((n * 3 + c) * 4 + w)];
          want += op == "ReduceL1" ? std::fabs(v) : v * v;
        }
      EXPECT_NEAR(y[static_cast<std::size_t>(c)], want, 1e-5 * (1 + want)) << "channel " << c;
    }
  }
}

TEST(OpRegistryFold, AnIndexOutOfRangeIsAnInputErrorNamingTheNode) {
  GraphBuilder b({3, 4});
  b.constant_i("i", {1, 4}, {0, 3, 1, 2});
  set_int(b.node("GatherElements", {"x", "i"}, {f32("y", {1, 4})}), "axis", 0);
  b.output("y");
  const Tensor x = Tensor::from(DType::F32, {3, 4}, std::vector<float>(12, 1.f));
  std::vector<const Tensor*> in = {&x, b.g.constant("i")};
  std::vector<const Shape*> shapes = {&x.shape, &b.g.constant("i")->shape};
  std::vector<Tensor> out;
  try {
    evaluate_node(b.g, b.g.nodes[0], in, shapes, out);
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("index 3 is out of range for an axis of size 3"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("GatherElements0"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace sluice
