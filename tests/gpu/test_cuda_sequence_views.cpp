// The sequence <-> image layout changes of hierarchical transformers (Segformer, PVT) respelled as
// 4-D transposes (model/fuse_layouts.cpp, sequence_image_views; SLUICE_SEQUENCE_VIEWS=0 keeps the
// exporters' spelling), which the CUDA engine's channels-last tensors take as views: a Mix-FFN block
// (Linear, to the image, depthwise 3x3, back to the sequence, Gelu, Linear) and a spatial-reduction
// convolution against the CPU engine at every precision with the pass on and off; which steps the
// builder makes of them (no device needed); and the zoo's Segformer and PVT exports prepared as a
// job prepares them: fewer copy steps with the pass than without.  Also the Gelu those views carry
// fused into the convolution before them (fuse_conv_gelu, SLUICE_FUSE_CONV_GELU=1; the depthwise
// kernel's epilogue, or cuDNN's convolution and the bias-activation kernel) and a Resize to its input's own size as a view
// of its input (ops_resize.cpp, SLUICE_CUDA_RESIZE_VIEWS).
#include <algorithm>

#include "gpu_test_util.h"
#include "model/prepare.h"
#include "support/zoo_model.h"

using namespace sluice;
using namespace sluice::gputest;
using sluice::testsupport::zoo_model;

namespace {

int count(const std::vector<std::string>& v, const std::string& k) { return static_cast<int>(std::count(v.begin(), v.end(), k)); }

// x [N, L, C] (L = H W) -> MatMul C -> 4C (+ bias) -> Transpose (0, 2, 1) -> Reshape [N, 4C, H, W]
// -> depthwise 3x3 (pad 1, bias) -> Reshape [N, 4C, L] -> Transpose (0, 2, 1) -> Gelu -> MatMul
// 4C -> C (+ bias) -> y, beside a sequence reduction of the same x: to the image, a 2x2 stride-2
// convolution C -> C, back to the sequence -> LayerNormalization -> r.  transformers' SegformerMixFFN
// and SegformerEfficientSelfAttention's key path.
Graph mix_ffn(int64_t n, int64_t c, int64_t h, int64_t w) {
  const int64_t l = h * w, e = 4 * c, hr = h / 2, wr = w / 2;
  GraphBuilder b({n, l, c});
  b.random_f("w1", {c, e}, 1, -0.4f, 0.4f).random_f("b1", {e}, 2);
  b.random_f("dw", {e, 1, 3, 3}, 3, -0.4f, 0.4f).random_f("dwb", {e}, 4);
  b.random_f("w2", {e, c}, 5, -0.3f, 0.3f).random_f("b2", {c}, 6);
  b.random_f("sr", {c, c, 2, 2}, 7, -0.3f, 0.3f).random_f("srb", {c}, 8);
  b.random_f("lng", {c}, 9, 0.5f, 1.5f).random_f("lnb", {c}, 10);
  b.constant_i("img_shape", {4}, {n, e, h, w}).constant_i("seq_shape", {3}, {n, e, l});
  b.constant_i("sr_img_shape", {4}, {n, c, h, w}).constant_i("sr_seq_shape", {3}, {n, c, hr * wr});
  b.node("MatMul", {"x", "w1"}, {f32("m1", {n, l, e})});
  b.node("Add", {"b1", "m1"}, {f32("a1", {n, l, e})});
  set_ints(b.node("Transpose", {"a1"}, {f32("t1", {n, e, l})}), "perm", {0, 2, 1});
  b.node("Reshape", {"t1", "img_shape"}, {f32("img", {n, e, h, w})});
  Node& d = b.node("Conv", {"img", "dw", "dwb"}, {f32("d", {n, e, h, w})});
  set_ints(d, "kernel_shape", {3, 3});
  set_ints(d, "pads", {1, 1, 1, 1});
  set_int(d, "group", e);
  b.node("Reshape", {"d", "seq_shape"}, {f32("r2", {n, e, l})});
  set_ints(b.node("Transpose", {"r2"}, {f32("s2", {n, l, e})}), "perm", {0, 2, 1});
  b.node("Gelu", {"s2"}, {f32("g", {n, l, e})});
  b.node("MatMul", {"g", "w2"}, {f32("m2", {n, l, c})});
  b.node("Add", {"m2", "b2"}, {f32("y", {n, l, c})});
  set_ints(b.node("Transpose", {"x"}, {f32("xt", {n, c, l})}), "perm", {0, 2, 1});
  b.node("Reshape", {"xt", "sr_img_shape"}, {f32("ximg", {n, c, h, w})});
  Node& s = b.node("Conv", {"ximg", "sr", "srb"}, {f32("xs", {n, c, hr, wr})});
  set_ints(s, "kernel_shape", {2, 2});
  set_ints(s, "strides", {2, 2});
  b.node("Reshape", {"xs", "sr_seq_shape"}, {f32("xr", {n, c, hr * wr})});
  set_ints(b.node("Transpose", {"xr"}, {f32("xq", {n, hr * wr, c})}), "perm", {0, 2, 1});
  set_float(b.node("LayerNormalization", {"xq", "lng", "lnb"}, {f32("r", {n, hr * wr, c})}), "epsilon", 1e-5f);
  b.output("y").output("r");
  return b.g;
}

// x [N, C, H, W] -> Conv 3x3 C -> C (pad 1, bias) -> Transpose (0, 2, 3, 1) -> Gelu (tanh) -> MatMul
// C -> C -> y, and x -> Conv 1x1 -> Resize (linear, half_pixel) to its own size -> Concat with the
// bilinear 2x upsampling of a 2x2/2 pooled x -> Conv 1x1 -> z: an ordinary convolution taking the
// Gelu, and Segformer's decode head in small.
Graph conv_gelu_resize(int64_t n, int64_t c, int64_t h, int64_t w) {
  GraphBuilder b({n, c, h, w});
  b.random_f("w3", {c, c, 3, 3}, 11, -0.3f, 0.3f).random_f("b3", {c}, 12).random_f("wm", {c, c}, 13, -0.4f, 0.4f);
  b.random_f("w1", {c, c, 1, 1}, 14, -0.5f, 0.5f).random_f("wf", {c, 2 * c, 1, 1}, 15, -0.4f, 0.4f);
  b.constant_i("same", {4}, {n, c, h, w});
  Node& c3 = b.node("Conv", {"x", "w3", "b3"}, {f32("c3", {n, c, h, w})});
  set_ints(c3, "kernel_shape", {3, 3});
  set_ints(c3, "pads", {1, 1, 1, 1});
  set_ints(b.node("Transpose", {"c3"}, {f32("t3", {n, h, w, c})}), "perm", {0, 2, 3, 1});
  set_string(b.node("Gelu", {"t3"}, {f32("g3", {n, h, w, c})}), "approximate", "tanh");
  b.node("MatMul", {"g3", "wm"}, {f32("y", {n, h, w, c})});
  set_ints(b.node("Conv", {"x", "w1"}, {f32("c1", {n, c, h, w})}), "kernel_shape", {1, 1});
  Node& r = b.node("Resize", {"c1", "", "", "same"}, {f32("r1", {n, c, h, w})});
  set_string(r, "mode", "linear");
  set_string(r, "coordinate_transformation_mode", "half_pixel");
  Node& p = b.node("AveragePool", {"x"}, {f32("p", {n, c, h / 2, w / 2})});
  set_ints(p, "kernel_shape", {2, 2});
  set_ints(p, "strides", {2, 2});
  b.constant_i("up", {4}, {n, c, h, w});
  Node& u = b.node("Resize", {"p", "", "", "up"}, {f32("u", {n, c, h, w})});
  set_string(u, "mode", "linear");
  set_string(u, "coordinate_transformation_mode", "half_pixel");
  Node& cat = b.node("Concat", {"r1", "u"}, {f32("cat", {n, 2 * c, h, w})});
  set_int(cat, "axis", 1);
  set_ints(b.node("Conv", {"cat", "wf"}, {f32("z", {n, c, h, w})}), "kernel_shape", {1, 1});
  b.output("y").output("z");
  return b.g;
}

// g prepared as a job prepares it (batch = its own), with the sequence views on or off.
Graph prepared(const Graph& g, bool views) {
  ScopedEnv env("SLUICE_SEQUENCE_VIEWS", views ? "1" : "0");
  PrepareOptions o;
  const Shape in = g.inputs.at(0).shape;
  o.batch_size = in.at(0);
  o.sample_shape = Shape(in.begin() + 1, in.end());
  return prepare_graph(g, o);
}

class SequenceViews : public ::testing::TestWithParam<Precision> {};

}  // namespace

TEST(SequenceViewLowering, TheMixFfnsLayoutChangesAreViewsOfTheChannelsLastTensors) {
  const Graph g = mix_ffn(2, 16, 6, 10);
  const auto on = step_kinds(prepared(g, true), Precision::BF16);
  EXPECT_EQ(count(on, "Transpose"), 0);
  EXPECT_EQ(count(on, "Layout"), 0);
  EXPECT_EQ(count(on, "Depthwise"), 1);
  // The exporters' spelling: each of the four changes is a Transpose copy, and the Reshapes of the
  // channels-last convolution outputs (and into the inputs) add layout copies.
  const auto off = step_kinds(prepared(g, false), Precision::BF16);
  EXPECT_EQ(count(off, "Transpose"), 4);
  EXPECT_GE(count(off, "Layout"), 2);
}

TEST_P(SequenceViews, AMixFfnAndASequenceReductionMatchTheCpuEngineWithAndWithoutThePass) {
  for (const int64_t c : {16, 6}) {   // 8-channel packs, and the one-channel kernels
    SCOPED_TRACE(str(c, " channels"));
    const Graph g = mix_ffn(3, c, 6, 10);
    expect_matches_cpu(prepared(g, true), GetParam());
    expect_matches_cpu(prepared(g, false), GetParam());
    ScopedEnv gelu("SLUICE_FUSE_CONV_GELU", "1");   // the Gelu in the depthwise kernel's epilogue
    expect_matches_cpu(prepared(g, true), GetParam());
  }
}

TEST(SequenceViewLowering, TheGeluIsTheConvolutionsEpilogueAndASameSizeResizeIsAView) {
  const Graph g = conv_gelu_resize(2, 16, 6, 8);
  // The fusion is off unless asked for (model/fuse_layouts.cpp says why).
  EXPECT_EQ(count(step_kinds(prepared(g, true), Precision::BF16), "Gelu"), 1);
  ScopedEnv gelu("SLUICE_FUSE_CONV_GELU", "1");
  const auto on = step_kinds(prepared(g, true), Precision::BF16);
  EXPECT_EQ(count(on, "Gelu"), 0);
  EXPECT_EQ(count(on, "Resize"), 1);   // the upsampling; the same-size Resize is a view
  ScopedEnv copies("SLUICE_CUDA_RESIZE_VIEWS", "0");
  EXPECT_EQ(count(step_kinds(prepared(g, true), Precision::BF16), "Resize"), 2);
}

TEST_P(SequenceViews, AConvolutionsGeluAndASameSizeResizeMatchTheCpuEngine) {
  for (const int64_t c : {16, 6}) {
    SCOPED_TRACE(str(c, " channels"));
    const Graph g = conv_gelu_resize(3, c, 6, 8);
    {
      ScopedEnv gelu("SLUICE_FUSE_CONV_GELU", "1");
      expect_matches_cpu(prepared(g, true), GetParam());
    }
    ScopedEnv copies("SLUICE_CUDA_RESIZE_VIEWS", "0");
    expect_matches_cpu(prepared(g, false), GetParam());
  }
}

TEST(SequenceViewLowering, TheZoosSegformerAndPvtExportsLoseTheirLayoutCopies) {
  for (const std::string name : {"hf_segformer.torchscript", "hf_segformer.dynamo", "hf_pvt_v2.torchscript",
                                 "hf_pvt_v2.dynamo"}) {
    SCOPED_TRACE(name);
    int copies[2] = {0, 0};
    for (const bool views : {false, true}) {
      ScopedEnv env("SLUICE_SEQUENCE_VIEWS", views ? "1" : "0");
      const Graph g = zoo_model(name);
      const auto kinds = step_kinds(g, Precision::BF16);
      const int t = count(kinds, "Transpose"), l = count(kinds, "Layout");
      copies[views] = t + l;
      std::printf("[ layouts ] %s, sequence views %s: %d steps, %d Transpose, %d Layout\n", name.c_str(),
                  views ? "on" : "off", static_cast<int>(kinds.size()), t, l);
    }
    EXPECT_LT(copies[1], copies[0]);
  }
}

INSTANTIATE_TEST_SUITE_P(Precisions, SequenceViews,
                         ::testing::Values(Precision::FP32, Precision::TF32, Precision::FP16, Precision::BF16),
                         [](const ::testing::TestParamInfo<Precision>& i) { return std::string(precision_name(i.param)); });
