// fuse_attention: the exporters' attention chains of every zoo model become one sluice.Attention
// node per attention block, and the fused node computes what the chain did (CPU engine, against
// the unfused graph).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>

#include "core/error.h"
#include "model/onnx_loader.h"
#include "model/prepare.h"
#include "test_model_util.h"

using namespace sluice;
using sluice::test::count_ops;

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
// to [B, H, D, S], or Reshape, swap, Reshape) is taken back to k [B, H, S, D] by the pass.
TEST(FuseAttention, KeysComeUntransposedFromTheExportersSpellings) {
  for (const char* name : {"hf_vit.torchscript", "hf_vit.dynamo", "hf_clip_vision.torchscript", "hf_clip_vision.dynamo",
                           "hf_segformer.torchscript", "hf_segformer.dynamo", "hf_dinov2.torchscript", "hf_beit.torchscript",
                           "hf_swin.torchscript", "timm_deit.dynamo", "timm_deit.torchscript", "tv_swin.dynamo"}) {
    const Graph g = prepare_zoo(name);
    int bhsd = 0, all = 0;
    for (const auto& n : g.nodes)
      if (n.op == "Attention") {
        ++all;
        bhsd += n.get_string("layout", "") == "bhsd";
      }
    EXPECT_GT(all, 0) << name;
    EXPECT_EQ(bhsd, all) << name;
  }
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

}  // namespace
