// fuse_attention: the exporters' attention chains of every zoo model become one sluice.Attention
// node per attention block, and the fused node computes what the chain did (CPU engine, against
// the unfused graph).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <map>

#include "core/error.h"
#include "engine/engine.h"
#include "model/onnx_loader.h"
#include "model/passes.h"
#include "model/prepare.h"
#include "test_cpu_run.h"
#include "test_model_util.h"

using namespace sluice;
using sluice::test::count_ops;
using sluice::test::GraphBuilder;
using sluice::test::ramp;

namespace {

Graph prepare_zoo(const std::string& name, bool fuse = true) {
  const std::string path = std::string(SLUICE_SOURCE_DIR) + "/tests/data/zoo/" + name + ".onnx";
  Graph g = load_onnx(path);
  PrepareOptions o;
  // The export's own batch (1) where it fixes one: sub-batches would repeat every node.
  o.batch_size = g.inputs.at(0).shape.at(0) > 0 ? g.inputs[0].shape[0] : 3;
  o.sample_shape = Shape(g.inputs.at(0).shape.begin() + 1, g.inputs.at(0).shape.end());
  o.fuse = fuse;
  return prepare_graph(std::move(g), o);
}

// Attention blocks per zoo export: one per layer (and per decoder self-/cross-attention).  A pattern
// that silently stops matching shows up here as a count below the model's attention layers.  Not
// fused, by design: SwinV2's cosine attention (a per-head logit scale where a head count above one
// makes it no scalar), CaiT's talking heads (a head mix between product and softmax), XCiT's
// cross-covariance attention (a per-head temperature), MaxViT's Einsum spelling, SwiftFormer's and
// MobileViTv2's attention without a q k^T product.
const std::map<std::string, int>& expected_blocks() {
  static const std::map<std::string, int> m = {
      {"hf_beit.dynamo", 2}, {"hf_beit.torchscript", 2}, {"hf_clip_vision.dynamo", 2},
      {"hf_clip_vision.torchscript", 2}, {"hf_deit.dynamo", 2}, {"hf_deit.torchscript", 2},
      {"hf_detr.dynamo", 2}, {"hf_detr.dynamo18", 2}, {"hf_detr.torchscript", 2}, {"hf_dinov2.dynamo", 2},
      {"hf_dinov2.torchscript", 2}, {"hf_dpt.dynamo", 4}, {"hf_dpt.dynamo21", 4}, {"hf_dpt.torchscript", 4},
      {"hf_levit.dynamo", 5}, {"hf_levit.torchscript", 5}, {"hf_mobilevit.dynamo", 9},
      {"hf_mobilevit.torchscript", 9}, {"hf_pvt_v2.dynamo", 2}, {"hf_pvt_v2.torchscript", 2},
      {"hf_segformer.dynamo", 2}, {"hf_segformer.dynamo18", 2}, {"hf_segformer.torchscript", 2},
      {"hf_siglip_vision.dynamo", 3}, {"hf_siglip_vision.torchscript", 3}, {"hf_swin.dynamo", 4},
      {"hf_swin.torchscript", 4}, {"hf_swinv2.dynamo", 2}, {"hf_vit.dynamo", 2}, {"hf_vit.dynamo18", 2},
      {"hf_vit.torchscript", 2}, {"hf_yolos.dynamo", 2}, {"hf_yolos.torchscript", 2}, {"timm_beit.dynamo", 2},
      {"timm_beit.torchscript", 2}, {"timm_cait.dynamo", 1}, {"timm_cait.torchscript", 1},
      {"timm_deit.dynamo", 2}, {"timm_deit.torchscript", 2}, {"timm_deit_distilled.dynamo", 2},
      {"timm_deit_distilled.torchscript", 2}, {"timm_dinov2.dynamo", 2}, {"timm_dinov2.torchscript", 2},
      {"timm_eva02.dynamo", 2}, {"timm_eva02.dynamo18", 2}, {"timm_levit.dynamo", 5},
      {"timm_levit.dynamo18", 5}, {"timm_levit.torchscript", 5}, {"timm_swin.dynamo", 4},
      {"timm_swin.torchscript", 4}, {"timm_swinv2.dynamo", 2}, {"timm_xcit.dynamo", 2},
      {"timm_xcit.torchscript", 2}, {"tv_swin.dynamo", 4}, {"tv_swin.dynamo18", 4},
      {"tv_swin.torchscript", 4}, {"tv_swin_v2.dynamo", 2}, {"tv_swin_v2.dynamo18", 2}, {"tv_vit.dynamo", 2},
  };
  return m;
}

TEST(FuseAttention, EveryZooAttentionBlockBecomesOneNode) {
  std::string misses;
  for (const auto& [name, want] : expected_blocks()) {
    const std::string path = std::string(SLUICE_SOURCE_DIR) + "/tests/data/zoo/" + name + ".onnx";
    if (!std::filesystem::exists(path)) {
      misses += name + ": missing file; ";
      continue;
    }
    const Graph g = prepare_zoo(name);
    const int got = count_ops(g, "Attention");
    if (got != want) misses += str(name, ": ", got, " of ", want, " (", count_ops(g, "Softmax"), " Softmax left); ");
  }
  EXPECT_TRUE(misses.empty()) << misses;
}

// cuDNN's fused attention reads k untransposed: the exporters' k^T (a Transpose of the projection
// to [B, H, D, S]; Reshape, swap, Reshape; torchvision's two transposes and a Reshape) is taken
// back to k [B, H, S, D] by the pass.
TEST(FuseAttention, KeysComeUntransposedFromTheExportersSpellings) {
  for (const char* name : {"hf_vit.torchscript", "hf_vit.dynamo", "hf_clip_vision.torchscript", "hf_clip_vision.dynamo",
                           "hf_segformer.torchscript", "hf_segformer.dynamo", "hf_dinov2.torchscript", "hf_beit.torchscript",
                           "hf_swin.torchscript", "timm_deit.dynamo", "timm_deit.torchscript", "tv_swin.dynamo", "tv_vit.dynamo"}) {
    const Graph g = prepare_zoo(name);
    int bhsd = 0, all = 0;
    for (const auto& n : g.nodes)
      if (n.op == "Attention") {
        ++all;
        // bhsd, or the strided views of the projections the layout pass makes of it (rows of k)
        bhsd += n.get_string("layout", "") == "bhsd" || n.get_string("layout", "") == "strided";
      }
    EXPECT_GT(all, 0) << name;
    EXPECT_EQ(bhsd, all) << name;
  }
}

TEST(FuseAttention, AMaskOfZerosIsNoBias) {
  // The dynamo export of HF ViT adds an attention mask that masks nothing.
  const Graph g = prepare_zoo("hf_vit.dynamo");
  for (const auto& n : g.nodes)
    if (n.op == "Attention") EXPECT_EQ(n.inputs.size(), 3u) << n.describe();
}

TEST(FuseAttention, TheSwitchTurnsThePassOff) {
  setenv("SLUICE_FUSE_ATTENTION", "0", 1);
  const Graph g = prepare_zoo("hf_vit.dynamo");
  unsetenv("SLUICE_FUSE_ATTENTION");
  EXPECT_EQ(count_ops(g, "Attention"), 0);
  EXPECT_EQ(count_ops(g, "Softmax"), 2);
}

TEST(FuseAttention, SwinWindowsTakeRelativeBiasAndShiftMaskAsOneRepeatingBias) {
  const Graph g = prepare_zoo("hf_swin.dynamo");
  int with_bias = 0;
  for (const auto& n : g.nodes) {
    if (n.op != "Attention") continue;
    ASSERT_EQ(n.inputs.size(), 4u) << n.describe();
    const Tensor* b = g.constant(n.inputs[3]);
    ASSERT_NE(b, nullptr);
    ASSERT_EQ(b->shape.size(), 3u);
    ++with_bias;
  }
  EXPECT_EQ(with_bias, 4);
}

// ---- the fused node computes what the chain did (CPU engine, fused against unfused) --------------

// Every output of g prepared at batch 2 for input [2, 2, 6, 8], with or without the fusion, and the
// number of attention nodes it had.
std::vector<std::vector<float>> run_prepared(const Graph& model, bool fuse_attention, int* blocks) {
  setenv("SLUICE_FUSE_ATTENTION", fuse_attention ? "1" : "0", 1);
  PrepareOptions o;
  o.batch_size = 2;
  o.sample_shape = {2, 6, 8};
  const Graph g = prepare_graph(model, o);
  unsetenv("SLUICE_FUSE_ATTENTION");
  *blocks = count_ops(g, "Attention");
  return sluice::test::cpu_outputs(g, 7);
}

void expect_same_outputs(const Graph& model, int want_blocks) {
  int fused = -1, plain = -1;
  const auto a = run_prepared(model, true, &fused), b = run_prepared(model, false, &plain);
  EXPECT_EQ(fused, want_blocks);
  EXPECT_EQ(plain, 0);
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].size(), b[i].size());
    double scale = 1e-30, diff = 0;
    for (std::size_t j = 0; j < a[i].size(); ++j) {
      scale = std::max(scale, static_cast<double>(std::fabs(b[i][j])));
      diff = std::max(diff, static_cast<double>(std::fabs(a[i][j] - b[i][j])));
    }
    EXPECT_LE(diff / scale, 1e-5) << "output " << i;
  }
}

// x [B, 2, 6, 8] gives q, k, v by three products; the scores chain is the caller's.
GraphBuilder projections() {
  GraphBuilder b;
  b.input("x", {-1, 2, 6, 8}).output("y");
  b.floats("wq", {8, 8}, ramp(64, 1)).floats("wk", {8, 8}, ramp(64, 2)).floats("wv", {8, 8}, ramp(64, 3));
  b.node("MatMul", {"x", "wq"}, {"q"});
  b.node("MatMul", {"x", "wk"}, {"k"});
  b.node("MatMul", {"x", "wv"}, {"v"});
  b.node("Transpose", {"k"}, {"kt"}).attrs["perm"] = Attribute::of_ints({0, 1, 3, 2});
  return b;
}

TEST(FuseAttention, ADivisionAfterTheProductAndABiasComputedFromTheDataFuse) {
  GraphBuilder b = projections();
  b.floats("c", {}, {std::sqrt(8.f)}).floats("wb", {8, 6}, ramp(48, 4));
  b.node("MatMul", {"q", "kt"}, {"s"});
  b.node("Div", {"s", "c"}, {"s2"});
  b.node("MatMul", {"x", "wb"}, {"bias"});   // [B, 2, 6, 6], from the input
  b.node("Add", {"s2", "bias"}, {"s3"});
  b.node("Softmax", {"s3"}, {"p"}).attrs["axis"] = Attribute::of_int(-1);
  b.node("MatMul", {"p", "v"}, {"y"});
  expect_same_outputs(b.g, 1);
}

// A text encoder's padding mask: a bias per sample, [B, 1, S, S_kv], added to [B, H, S, S_kv]
// scores, broadcast over the heads.  It fuses with bias_group H (matrix b * H + h reads bias b); the
// op once read such a bias by flat index modulo its size, mixing the samples' masks.
GraphBuilder per_sample_bias(const Shape& ends_at) {
  GraphBuilder b = projections();
  b.floats("c", {}, {std::sqrt(8.f)}).floats("wb", {8, 6}, ramp(48, 4));
  b.ints("st", {0, 0}).ints("en", ends_at).ints("ax", {1, 2});
  b.node("MatMul", {"q", "kt"}, {"s"});
  b.node("Div", {"s", "c"}, {"s2"});
  b.node("Slice", {"x", "st", "en", "ax"}, {"x1"});   // [B, 1, rows, 8]: one head's worth per sample
  b.node("MatMul", {"x1", "wb"}, {"bias"});           // [B, 1, rows, 6], from the input
  b.node("Add", {"s2", "bias"}, {"s3"});
  b.node("Softmax", {"s3"}, {"p"}).attrs["axis"] = Attribute::of_int(-1);
  b.node("MatMul", {"p", "v"}, {"y"});
  return b;
}

// The fused node's bias attributes for the graph of per_sample_bias (batch 3).
void expect_bias_attrs(const Graph& model, int64_t group, int64_t rows) {
  PrepareOptions o;
  o.batch_size = 3;
  o.sample_shape = {2, 6, 8};
  const Graph g = prepare_graph(model, o);
  int seen = 0;
  for (const Node& n : g.nodes)
    if (n.op == "Attention") {
      ++seen;
      EXPECT_EQ(n.get_int("bias_group", 1), group);
      EXPECT_EQ(n.get_int("bias_rows", 6), rows);
      EXPECT_GE(n.inputs.size(), 4u);
    }
  EXPECT_EQ(seen, 1);
}

TEST(FuseAttention, ABiasPerSampleBroadcastOverTheHeadsFusesWithItsGroup) {
  GraphBuilder b = per_sample_bias({1, 6});
  expect_same_outputs(b.g, 1);
  expect_bias_attrs(b.g, 2, 6);
}

TEST(FuseAttention, ABiasPerSampleBroadcastOverTheQueryRowsTooFusesWithOneRow) {
  // [B, 1, 1, S_kv]: the older exports' (1 - mask) * finfo.min, one row of key biases per sample.
  GraphBuilder b = per_sample_bias({1, 1});
  expect_same_outputs(b.g, 1);
  expect_bias_attrs(b.g, 2, 1);
}

TEST(FuseAttention, ABiasThatMixesBroadcastAndPerSampleAxesStaysUnfused) {
  // [B, 1, S, 1]: broadcast over the keys, which the op does not read that way.
  GraphBuilder b = projections();
  b.floats("wb", {8, 1}, ramp(8, 4));
  b.ints("st", {0}).ints("en", {1}).ints("ax", {1});
  b.node("MatMul", {"q", "kt"}, {"s"});
  b.node("Slice", {"x", "st", "en", "ax"}, {"x1"});
  b.node("MatMul", {"x1", "wb"}, {"bias"});   // [B, 1, 6, 1]
  b.node("Add", {"s", "bias"}, {"s3"});
  b.node("Softmax", {"s3"}, {"p"}).attrs["axis"] = Attribute::of_int(-1);
  b.node("MatMul", {"p", "v"}, {"y"});
  expect_same_outputs(b.g, 0);
}

TEST(FuseAttention, ScalesOnQAndKAndAScaleAfterAConstantBiasFuse) {
  GraphBuilder b = projections();
  b.floats("cq", {}, {0.7f}).floats("ck", {}, {0.3f}).floats("half", {}, {0.5f}).floats("rel", {2, 6, 6}, ramp(72, 5));
  b.node("Mul", {"q", "cq"}, {"qs"});
  b.node("Mul", {"kt", "ck"}, {"ks"});
  b.node("MatMul", {"qs", "ks"}, {"s"});
  b.node("Add", {"s", "rel"}, {"s2"});
  b.node("Mul", {"s2", "half"}, {"s3"});   // scales the bias too
  b.node("Softmax", {"s3"}, {"p"}).attrs["axis"] = Attribute::of_int(-1);
  b.node("MatMul", {"p", "v"}, {"y"});
  expect_same_outputs(b.g, 1);
}

TEST(FuseAttention, ProbabilitiesThatAreAlsoAGraphOutputStayUnfused) {
  GraphBuilder b = projections();
  b.output("p");
  b.node("MatMul", {"q", "kt"}, {"s"});
  b.node("Softmax", {"s"}, {"p"}).attrs["axis"] = Attribute::of_int(-1);
  b.node("MatMul", {"p", "v"}, {"y"});
  expect_same_outputs(b.g, 0);
}

}  // namespace
