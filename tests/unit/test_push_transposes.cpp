// push_transposes (model/push_transposes.cpp): Transposes that keep the last axis moved through
// row-wise ops.  torchvision's sequence-first nn.MultiheadAttention (the zoo's dynamo export, and the
// same block built here at a static batch above one, as the TorchScript exporter writes it at batch
// 256) then reads the projections strided and loses every Transpose around attention; a Transpose
// and its inverse around row-wise ops both go; Transposes that would only move onto a larger tensor
// stay.  Each graph is prepared with the pass on and off and run on the CPU engine.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "core/error.h"
#include "model/onnx_loader.h"
#include "model/passes.h"
#include "model/prepare.h"
#include "test_cpu_run.h"
#include "test_model_util.h"

using namespace sluice;
using sluice::test::count_ops;
using sluice::test::cpu_outputs;
using sluice::test::GraphBuilder;
using sluice::test::ramp;
using sluice::test::relative_difference;

namespace {

std::string zoo(const std::string& name) { return std::string(SLUICE_SOURCE_DIR) + "/tests/data/zoo/" + name + ".onnx"; }

Graph prepare(const Graph& model, int64_t batch, bool push) {
  setenv("SLUICE_PUSH_TRANSPOSES", push ? "1" : "0", 1);
  PrepareOptions o;
  o.batch_size = batch;
  o.sample_shape = Shape(model.inputs.at(0).shape.begin() + 1, model.inputs.at(0).shape.end());
  Graph p = prepare_graph(model, o);
  unsetenv("SLUICE_PUSH_TRANSPOSES");
  return p;
}

int strided(const Graph& g) {
  int k = 0;
  for (const auto& n : g.nodes) k += n.op == "Attention" && n.get_string("layout", "") == "strided";
  return k;
}

double worst_difference(const Graph& a, const Graph& b) {
  const auto ya = cpu_outputs(a, 7), yb = cpu_outputs(b, 7);
  EXPECT_EQ(ya.size(), yb.size());
  double worst = 0;
  for (std::size_t i = 0; i < ya.size() && i < yb.size(); ++i) {
    EXPECT_EQ(ya[i].size(), yb[i].size());
    if (ya[i].size() == yb[i].size()) worst = std::max(worst, relative_difference(ya[i], yb[i]));
  }
  return worst;
}

Node& with_perm(Node& n, std::vector<int64_t> perm) {
  n.attrs["perm"] = Attribute::of_ints(std::move(perm));
  return n;
}

// One encoder block of torchvision's ViT as torch 2.x writes nn.MultiheadAttention (batch_first,
// need_weights=False, SDPA decomposed), at a static batch n: x [n, s, e] -> LayerNorm -> Transpose
// (1, 0, 2) -> in-projection [s, n, 3e] -> unflatten, unsqueeze, transpose (0, -2), squeeze, select
// -> q, k, v [s, n h, d] -> transpose (1, 0, 2) -> [n, h, s, d] (k transposed for the product) ->
// softmax(q k^T / sqrt d) v -> permute (2, 0, 1, 3) -> [s n, e] -> Gemm -> [s, n, e] -> Transpose
// (1, 0, 2) -> plus x.
Graph sequence_first_block(int64_t n, int64_t s, int64_t h, int64_t d, uint32_t seed) {
  const int64_t e = h * d;
  GraphBuilder b;
  b.input("x", {n, s, e}).output("y");
  b.floats("ln_g", {e}, ramp(static_cast<std::size_t>(e), seed)).floats("ln_b", {e}, ramp(static_cast<std::size_t>(e), seed + 1));
  b.node("LayerNormalization", {"x", "ln_g", "ln_b"}, {"xn"}).attrs["epsilon"] = Attribute::of_float(1e-6f);
  with_perm(b.node("Transpose", {"xn"}, {"xs"}), {1, 0, 2});
  std::vector<float> w = ramp(static_cast<std::size_t>(e * 3 * e), seed + 2);
  for (auto& v : w) v *= 0.5f;
  b.floats("w_in", {e, 3 * e}, w).floats("b_in", {3 * e}, ramp(static_cast<std::size_t>(3 * e), seed + 3));
  b.node("MatMul", {"xs", "w_in"}, {"proj0"});
  b.node("Add", {"b_in", "proj0"}, {"proj"});
  b.ints("unflat", {s, n, 3, e}).ints("zero", {0}).ints("minus2", {-2});
  b.node("Reshape", {"proj", "unflat"}, {"proj4"});
  b.node("Unsqueeze", {"proj4", "zero"}, {"proj5"});
  with_perm(b.node("Transpose", {"proj5"}, {"proj5t"}), {3, 1, 2, 0, 4});
  b.node("Squeeze", {"proj5t", "minus2"}, {"qkv"});
  b.ints("heads3", {s, n * h, d}).ints("heads4", {n, h, s, d}).ints("heads4t", {n, h, d, s});
  const char* names[3] = {"q", "k", "v"};
  for (int i = 0; i < 3; ++i) {
    const std::string p = names[i];
    b.ints(p + "_index", {i}, true);
    b.node("Gather", {"qkv", p + "_index"}, {p + "_sel"}).attrs["axis"] = Attribute::of_int(0);
    b.node("Reshape", {p + "_sel", "heads3"}, {p + "_r3"});
    with_perm(b.node("Transpose", {p + "_r3"}, {p + "_t3"}), {1, 0, 2});
  }
  b.node("Reshape", {"q_t3", "heads4"}, {"q4"});
  b.node("Reshape", {"v_t3", "heads4"}, {"v4"});
  with_perm(b.node("Transpose", {"k_t3"}, {"k_sw"}), {0, 2, 1});
  b.node("Reshape", {"k_sw", "heads4t"}, {"kt4"});
  b.floats("root_scale", {1}, {static_cast<float>(std::pow(static_cast<double>(d), -0.25))});
  b.node("Mul", {"q4", "root_scale"}, {"qs"});
  b.node("Mul", {"kt4", "root_scale"}, {"ks"});
  b.node("MatMul", {"qs", "ks"}, {"scores"});
  b.node("Softmax", {"scores"}, {"p"}).attrs["axis"] = Attribute::of_int(-1);
  b.node("MatMul", {"p", "v4"}, {"att"});
  with_perm(b.node("Transpose", {"att"}, {"att_p"}), {2, 0, 1, 3});
  b.ints("rows", {s * n, e}).ints("back", {s, n, e});
  b.node("Reshape", {"att_p", "rows"}, {"att_rows"});
  b.floats("w_out", {e, e}, ramp(static_cast<std::size_t>(e * e), seed + 4)).floats("b_out", {e}, ramp(static_cast<std::size_t>(e), seed + 5));
  Node& gemm = b.node("Gemm", {"att_rows", "w_out", "b_out"}, {"out_rows"});
  gemm.attrs["transB"] = Attribute::of_int(1);
  b.node("Reshape", {"out_rows", "back"}, {"out_s"});
  with_perm(b.node("Transpose", {"out_s"}, {"out_b"}), {1, 0, 2});
  b.node("Add", {"out_b", "x"}, {"y"});
  return b.g;
}

// The block at a static batch above one (the benchmark's export is static at 256): with the pass the
// attention reads the in-projection [n, s, 3e] strided and writes [n, s, e] for the Gemm; every
// Transpose goes; without it seven stay (the attention keeps its packed operands).
TEST(PushTransposes, SequenceFirstAttentionLosesEveryTranspose) {
  struct Case {
    int64_t n, s, h, d;
  };
  for (const Case c : {Case{3, 17, 2, 16}, Case{2, 13, 3, 8}, Case{4, 10, 1, 12}}) {
    SCOPED_TRACE(str("n ", c.n, " s ", c.s, " h ", c.h, " d ", c.d));
    const Graph model = sequence_first_block(c.n, c.s, c.h, c.d, static_cast<uint32_t>(c.n + c.s));
    const Graph on = prepare(model, c.n, true), off = prepare(model, c.n, false);
    EXPECT_EQ(count_ops(on, "Attention"), 1);
    EXPECT_EQ(count_ops(off, "Attention"), 1);
    EXPECT_EQ(strided(on), 1);
    if (c.h > 1) EXPECT_EQ(strided(off), 0);   // one head: [S, N x 1, D] is a view of [S, N, E] even so
    EXPECT_EQ(count_ops(on, "Transpose"), 0);
    EXPECT_GE(count_ops(off, "Transpose"), 5);
    EXPECT_LE(worst_difference(on, off), 1e-5);
    for (const auto& n : on.nodes)
      if (n.op == "Attention") {
        const int64_t e = c.h * c.d;
        EXPECT_EQ(on.value(n.inputs[0])->shape, (Shape{c.n, c.s, 3 * e}));
        const int64_t hs = c.h > 1 ? c.d : c.s * 3 * e;   // one head: the packed head stride
        EXPECT_EQ(n.get_ints("q_view"), (std::vector<int64_t>{0, hs, 3 * e}));
        EXPECT_EQ(n.get_ints("k_view"), (std::vector<int64_t>{e, hs, 3 * e}));
        EXPECT_EQ(n.get_ints("v_view"), (std::vector<int64_t>{2 * e, hs, 3 * e}));
        EXPECT_EQ(on.value(n.outputs[0])->shape, (Shape{c.n, c.s, e}));
      }
  }
}

// The same block re-specialized from its static batch to another one (the batch trace follows the
// moved Transposes and the new Reshape targets).
TEST(PushTransposes, TheMovedBlockTakesAnotherBatch) {
  const Graph model = sequence_first_block(2, 11, 2, 8, 3);
  const Graph on = prepare(model, 5, true), off = prepare(model, 5, false);
  EXPECT_EQ(on.inputs.at(0).shape, (Shape{5, 11, 16}));
  EXPECT_EQ(strided(on), 1);
  EXPECT_EQ(count_ops(on, "Transpose"), 0);
  EXPECT_LE(worst_difference(on, off), 1e-5);
}

// torchvision's ViT from the zoo (dynamo export at batch 1, prepared at batch 3): both blocks read
// the projections strided, and only the patch embedding's permutation is left of 17 Transposes.
TEST(PushTransposes, TorchvisionVitReadsTheProjections) {
  ASSERT_TRUE(std::filesystem::exists(zoo("tv_vit.dynamo")));
  const Graph model = load_onnx(zoo("tv_vit.dynamo"));
  const Graph on = prepare(model, 3, true), off = prepare(model, 3, false);
  EXPECT_EQ(count_ops(on, "Attention"), 2);
  EXPECT_EQ(strided(on), 2);
  EXPECT_EQ(strided(off), 0);
  EXPECT_LE(count_ops(on, "Transpose"), 1);
  EXPECT_GE(count_ops(off, "Transpose"), 14);
  EXPECT_LE(worst_difference(on, off), 1e-5);
}

// x [n, a, c] -> Transpose (1, 0, 2) -> MatMul, bias, Gelu, LayerNorm -> Transpose (1, 0, 2): both
// Transposes go.  With a Relu reading the first Transpose too, or nothing after the chain that frees
// the moved Transpose, nothing moves.
TEST(PushTransposes, ATransposeAndItsInverseAroundRowOpsCancel) {
  auto build = [](bool inverse, bool second_reader) {
    GraphBuilder b;
    b.input("x", {2, 5, 6}).output("y");
    with_perm(b.node("Transpose", {"x"}, {"t"}), {1, 0, 2});
    b.floats("w", {6, 4}, ramp(24, 2)).floats("bias", {4}, ramp(4, 3));
    b.node("MatMul", {"t", "w"}, {"m"});
    b.node("Add", {"m", "bias"}, {"a"});
    b.node("Gelu", {"a"}, {"g"});
    b.floats("ln_g", {4}, ramp(4, 4)).floats("ln_b", {4}, ramp(4, 5));
    b.node("LayerNormalization", {"g", "ln_g", "ln_b"}, {"n"});
    std::string last = "n";
    if (second_reader) {
      b.node("Relu", {"t"}, {"r"});
      b.floats("w2", {6, 4}, ramp(24, 6));
      b.node("MatMul", {"r", "w2"}, {"r2"});
      b.node("Add", {"n", "r2"}, {"n2"});
      last = "n2";
    }
    if (inverse) with_perm(b.node("Transpose", {last}, {"y"}), {1, 0, 2});
    else b.node("Sigmoid", {last}, {"y"});
    return b.g;
  };
  {
    const Graph model = build(true, false);
    const Graph on = prepare(model, 2, true), off = prepare(model, 2, false);
    EXPECT_EQ(count_ops(on, "Transpose"), 0);
    EXPECT_EQ(count_ops(off, "Transpose"), 2);
    EXPECT_EQ(on.value("y")->shape, (Shape{2, 5, 4}));
    EXPECT_LE(worst_difference(on, off), 1e-6);
  }
  for (const auto& [inverse, second] : {std::pair{false, false}, std::pair{true, true}}) {
    SCOPED_TRACE(str("inverse ", inverse, " second reader ", second));
    const Graph model = build(inverse, second);
    const Graph on = prepare(model, 2, true), off = prepare(model, 2, false);
    EXPECT_EQ(count_ops(on, "Transpose"), count_ops(off, "Transpose"));
    EXPECT_LE(worst_difference(on, off), 1e-6);
  }
}

// A Transpose that moves the last axis is no row permutation: it stays where it is.
TEST(PushTransposes, ATransposeOfTheLastAxisStays) {
  GraphBuilder b;
  b.input("x", {2, 5, 6}).output("y");
  with_perm(b.node("Transpose", {"x"}, {"t"}), {0, 2, 1});
  b.floats("bias", {5}, ramp(5, 3));
  b.node("Add", {"t", "bias"}, {"a"});
  with_perm(b.node("Transpose", {"a"}, {"y"}), {0, 2, 1});
  Graph g = b.g;
  g.topo_sort();
  infer_shapes(g);
  EXPECT_EQ(push_transposes(g), 0);
  EXPECT_EQ(count_ops(g, "Transpose"), 2);
}

TEST(PushTransposes, TheSwitchTurnsThePassOff) {
  Graph g = sequence_first_block(2, 9, 2, 8, 1);
  g.topo_sort();
  infer_shapes(g);
  setenv("SLUICE_PUSH_TRANSPOSES", "0", 1);
  EXPECT_EQ(push_transposes(g), 0);
  unsetenv("SLUICE_PUSH_TRANSPOSES");
  EXPECT_EQ(count_ops(g, "Transpose"), 8);
}

}  // namespace
